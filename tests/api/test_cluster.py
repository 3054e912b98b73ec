"""Nodes, policy views and accounting over HTTP, on both stores."""

from __future__ import annotations

import json

import pytest

from api.conftest import CONFIG, Cluster
from api.helpers import fields, problem


def test_nodes_are_listed_and_shown_with_their_gpus(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        nodes = c.get("/v1/nodes").json()
        n1 = c.get("/v1/nodes/n1").json()
        problem(c.get("/v1/nodes/nope"), 404)
    assert [n["name"] for n in nodes] == ["n1", "n2"]
    assert len(n1["gpus"]) == 4
    assert n1["gpus"][0]["model"].startswith("A100")


def test_only_operators_drain_and_resume(cluster: Cluster) -> None:
    inventory = {**CONFIG["nodes"][0], "names": "n2"}
    with cluster.client("n2") as c:
        registered = c.post("/v1/agents/n2/register", json={"inventory": inventory})
        assert registered.status_code == 200, registered.text
    with cluster.client("alice") as c:
        problem(c.post("/v1/nodes/n2/drain", json={"reason": "mine now"}), 403)
    with cluster.client("operator") as c:
        fields(c.post("/v1/nodes/n2/drain", json={}))  # a drain needs a reason
        drained = c.post("/v1/nodes/n2/drain", json={"reason": "new cables"})
        assert drained.status_code == 200, drained.text
        assert drained.json()["state"] == "drain"  # nothing runs there
        assert drained.json()["reason"] == "new cables"
        problem(c.post("/v1/nodes/nope/drain", json={"reason": "x"}), 404)
        resumed = c.post("/v1/nodes/n2/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["state"] == "idle"


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("/v1/partitions", ["gpu"]),
        ("/v1/qos", ["normal", "high"]),
        ("/v1/reservations", []),
    ],
)
def test_policy_views(cluster: Cluster, path: str, names: list[str]) -> None:
    with cluster.client("bob") as c:
        response = c.get(path)
    assert response.status_code == 200, response.text
    assert [row["name"] for row in response.json()] == names


def test_a_partition_shows_its_state(cluster: Cluster) -> None:
    with cluster.client("bob") as c:
        (gpu,) = c.get("/v1/partitions").json()
    assert (gpu["name"], gpu["state"]) == ("gpu", "up")


def test_accounts_and_fairshare(cluster: Cluster) -> None:
    with cluster.client("bob") as c:
        accounts = c.get("/v1/accounts").json()
        shares = c.get("/v1/fairshare").json()
    assert {("vision", "account"), ("nlp", "account")} <= {(a["name"], a["kind"]) for a in accounts}
    assert {"vision", "nlp"} <= {row["account"] for row in shares}


def test_usage_and_its_export(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        rows = c.get("/v1/usage", params={"start": 0, "by": "account"})
        assert rows.status_code == 200, rows.text
        assert all(r["gpu_hours"] >= 0 for r in rows.json())
        export = c.get("/v1/usage/export", params={"start": 0})
        assert export.status_code == 200, export.text
        assert export.headers["content-type"].startswith("application/x-ndjson")
        for line in export.text.splitlines():
            assert json.loads(line)["user"] == "alice"
        assert fields(c.get("/v1/usage", params={"start": 10, "end": 5})) == {"query.end"}
        assert fields(c.get("/v1/usage", params={"by": "colour"})) == {"query.by"}
        assert fields(c.get("/v1/usage", params={"start": -1})) == {"query.start"}


def test_node_tokens_cannot_use_the_user_api(cluster: Cluster) -> None:
    with cluster.client("n1") as c:
        for path in ("/v1/jobs", "/v1/nodes", "/v1/partitions", "/v1/usage"):
            problem(c.get(path), 403)
