"""The agent protocol over HTTP: a node acts for itself only; work reaches it by sync."""

from __future__ import annotations

import time

from api.conftest import Cluster
from api.helpers import job, problem

INVENTORY = {
    "names": "n1",
    "cpu_milli": 16000,
    "memory_mib": 65536,
    "gpus": {"model": "A100-80GB", "count": 4},
}
UUIDS = [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(4)]


def _register(cluster: Cluster, who: str, node: str) -> int:
    body = {"inventory": {**INVENTORY, "names": node}, "gpu_uuids": UUIDS}
    with cluster.client(who) as c:
        return c.post(f"/v1/agents/{node}/register", json=body).status_code


def test_a_node_token_acts_for_its_own_node_only(cluster: Cluster) -> None:
    assert _register(cluster, "n2", "n1") == 403
    assert _register(cluster, "alice", "n1") == 403
    assert _register(cluster, "operator", "n1") == 403
    with cluster.client("n2") as c:
        problem(c.post("/v1/agents/n1/sync", json={}), 403)


def test_a_submitted_job_reaches_its_node_by_sync(cluster: Cluster) -> None:
    assert _register(cluster, "n1", "n1") == 200
    with cluster.client("alice") as c:
        job_id = c.post("/v1/jobs", json=job(cluster.workdir, nodelist=["n1"])).json()["job_id"]
    launches: list[dict[str, object]] = []
    deadline = time.monotonic() + 20
    with cluster.client("n1") as c:
        while not launches and time.monotonic() < deadline:
            reply = c.post("/v1/agents/n1/sync", json={"wait_s": 2})
            assert reply.status_code == 200, reply.text
            launches = [j for j in reply.json()["jobs_to_start"] if j["job_id"] == job_id]
        assert launches, "the job never reached its node"
        launch = launches[0]
        assert launch["argv"] == ["true"] and launch["user"] == "alice"
        running = [{"job_id": job_id, "run": launch["run"]}]
        # Holding the run, a retried sync starts nothing twice.
        again = c.post("/v1/agents/n1/sync", json={"running": running}).json()
        assert job_id not in [j["job_id"] for j in again["jobs_to_start"]]
        report = {
            "job_id": job_id,
            "run": launch["run"],
            "state": "exited",
            "exit_code": 0,
            "at": time.time(),
        }
        for _ in range(2):  # a repeated report changes nothing twice
            assert c.post("/v1/agents/n1/sync", json={"reports": [report]}).status_code == 200
    with cluster.client("alice") as c:
        shown = c.get(f"/v1/jobs/{job_id}").json()
    assert shown["state"] == "COMPLETED"
    assert shown["node_list"] == ["n1"]
