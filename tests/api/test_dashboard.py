"""The dashboard over HTTP: its static page, the cluster map and a node's page.

A controller on a manual clock (cycles run when the test says) with four
nodes: ``a1`` and ``a2`` with four whole A100s, ``m1`` with a MIG-partitioned
A100 beside a whole one, and ``d1``, declared but never registered. Jobs
are pinned to nodes so every GPU's state is known.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from api.helpers import job, problem
from api.live import client, serve
from gpufleet.adapters.store import sqlite_url
from gpufleet.api.agent_schemas import AgentRegister, AgentSync, GpuReading
from gpufleet.api.app import create_app
from gpufleet.api.schemas import JobSubmit
from gpufleet.controller.clock import ManualClock
from gpufleet.controller.config import config_from_dict
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import setup_from_config

A100 = {"cpu_milli": 32000, "memory_mib": 262144, "gpus": {"model": "A100-80GB", "count": 4}}
MIG = {
    "cpu_milli": 32000,
    "memory_mib": 262144,
    "gpus": {"model": "A100-80GB", "count": 2, "mig": {"0": "3g.40gb@0,2g.20gb@4,1g.10gb@6"}},
}
NODES = [{"names": "a[1-2]", **A100}, {"names": "m1", **MIG}, {"names": "d1", **A100}]
CONFIG: dict[str, Any] = {
    "server": {"heartbeat_interval_s": 3600},
    "policy": {"accounts": [{"name": "vision"}, {"name": "nlp"}]},
    "nodes": NODES,
    "principals": [
        {"name": "ops", "role": "operator"},
        {"name": "alice", "role": "user", "accounts": ["vision"]},
        {"name": "bob", "role": "user", "accounts": ["nlp"]},
    ],
}
ADMIN = Principal(user="root", role="admin")


@dataclass
class Site:
    url: str
    controller: Controller
    tokens: dict[str, str]
    jobs: dict[str, str]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("dashboard")
    config = config_from_dict(CONFIG, "test")
    setup = setup_from_config(config.build("test"), config.to_dict())
    controller = Controller(setup=setup, db_url=sqlite_url(tmp), clock=ManualClock(1e9))
    controller.start(loop=False)
    try:
        for name, group in (("a1", A100), ("a2", A100), ("m1", MIG)):
            inventory = AgentRegister(inventory={**group, "names": name})
            controller.register_agent(principal=ADMIN, node=name, body=inventory)
        # GPU 1 of m1 reports an XID; the other readings are fine.
        readings = [
            GpuReading(index=0, util_pct=40.0),
            GpuReading(index=1, xid_last=79, healthy=False, health_reason="XID 79"),
        ]
        controller.sync_agent(principal=ADMIN, node="m1", body=AgentSync(gpus=readings))
        tokens = {
            who: controller.create_token(principal=ADMIN, name=who, user=who, role=role).token
            for who, role in (("ops", "operator"), ("alice", "user"), ("bob", "user"))
        }
        users = {who: controller.authenticate(token=token) for who, token in tokens.items()}
        shapes = {
            "whole": ("alice", {"gpus_per_node": 2, "nodelist": ["a1"]}),
            "share": ("bob", {"gpus_per_node": 0, "gpu_milli": 500, "nodelist": ["a1"]}),
            "slice": ("alice", {"gpus_per_node": 0, "mig_profile": "1g.10gb", "mig_count": 1}),
            "waits": ("bob", {"gpus_per_node": 4, "nodelist": ["a1"]}),
        }
        jobs = {}
        for key, (who, shape) in shapes.items():
            spec = JobSubmit.model_validate(job(tmp, name=key, **shape))
            principal = users[who]
            assert principal is not None
            jobs[key] = controller.submit(principal=principal, spec=spec).job_id
        controller.run_cycle_now()
        ops = users["ops"]
        assert ops is not None
        controller.drain_node(principal=ops, name="a2", reason="new cables")
        with serve(create_app(controller)) as url:
            yield Site(url, controller, tokens, jobs)
    finally:
        controller.stop()


def _map(site: Site, who: str) -> dict[str, Any]:
    with client(site.url, site.tokens[who]) as c:
        answer = c.get("/v1/dashboard/map")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


COLUMNS = ("used_milli", "mig_used", "mig_total", "jobs", "others", "util_pct", "health")


def _cells(body: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """Each GPU's columns gathered into one dict, by (node, GPU index)."""
    return {
        (n["name"], g): {"state": state} | {c: n[c][g] for c in COLUMNS}
        for n in body["nodes"]
        for g, state in enumerate(n["gpus"])
    }


def test_the_map_colours_every_gpu_by_its_state(site: Site) -> None:
    body = _map(site, "ops")
    cells = _cells(body)
    states = {key: cell["state"] for key, cell in cells.items()}
    assert states == {
        # a1: the 2-GPU job takes GPUs 0-1, the half GPU shares GPU 2
        ("a1", 0): "allocated",
        ("a1", 1): "allocated",
        ("a1", 2): "shared",
        ("a1", 3): "free",
        **{("a2", g): "draining" for g in range(4)},
        ("m1", 0): "mig",  # the 1g.10gb slice is one of its three instances
        ("m1", 1): "unhealthy",  # its reading says XID 79
        **{("d1", g): "offline" for g in range(4)},  # no agent ever registered
    }
    assert body["gpus"] == Counter(states.values())  # each of the seven states counted
    assert (body["running"], body["pending"]) == (3, 1)
    assert cells["a1", 2]["used_milli"] == 500
    assert (cells["m1", 0]["mig_used"], cells["m1", 0]["mig_total"]) == (1, 3)
    assert cells["m1", 1]["health"] == "XID 79"
    assert cells["m1", 0]["util_pct"] == 40.0
    assert cells["a1", 0]["jobs"] == [site.jobs["whole"]]
    nodes = {n["name"]: n for n in body["nodes"]}
    assert (nodes["a2"]["state"], nodes["a2"]["reason"]) == ("drain", "new cables")


def test_a_user_sees_the_owners_of_its_own_jobs_only(site: Site) -> None:
    everyone = _map(site, "ops")["jobs"]
    mine = _map(site, "alice")["jobs"]
    running = {site.jobs[k] for k in ("whole", "share", "slice")}
    assert everyone.keys() == running
    assert everyone[site.jobs["share"]]["user"] == "bob"
    assert mine.keys() == {site.jobs["whole"], site.jobs["slice"]}
    assert mine[site.jobs["whole"]] == {"user": "alice", "account": "vision", "name": "whole"}
    # The cell counts bob's job without its id, as GET /v1/nodes does; ops sees the id.
    cell = _cells(_map(site, "alice"))["a1", 2]
    assert (cell["jobs"], cell["others"]) == ([], 1)
    cell = _cells(_map(site, "ops"))["a1", 2]
    assert (cell["jobs"], cell["others"]) == ([site.jobs["share"]], 0)
    cell = _cells(_map(site, "bob"))["a1", 0]
    assert (cell["jobs"], cell["others"]) == ([], 1)  # alice's, to bob


def test_the_nodes_show_a_user_the_ids_of_its_own_jobs_only(site: Site) -> None:
    def a1(who: str) -> dict[str, Any]:
        with client(site.url, site.tokens[who]) as c:
            listed = {n["name"]: n for n in c.get("/v1/nodes").json()}["a1"]
            one = c.get("/v1/nodes/a1").json()
            page = c.get("/v1/dashboard/nodes/a1").json()["node"]
        assert one == listed and page == listed
        return listed

    whole, share = site.jobs["whole"], site.jobs["share"]
    ops, alice, bob = a1("ops"), a1("alice"), a1("bob")
    assert (sorted(ops["jobs"]), ops["other_jobs"]) == (sorted([whole, share]), 0)
    assert (alice["jobs"], alice["other_jobs"]) == ([whole], 1)
    assert (bob["jobs"], bob["other_jobs"]) == ([share], 1)
    gpus = [(g["jobs"], g["other_jobs"]) for g in alice["gpus"]]
    assert gpus == [([whole], 0), ([whole], 0), ([], 1), ([], 0)]
    gpus = [(g["jobs"], g["other_jobs"]) for g in bob["gpus"]]
    assert gpus == [([], 1), ([], 1), ([share], 0), ([], 0)]
    assert [(g["jobs"], g["other_jobs"]) for g in ops["gpus"]][2] == ([share], 0)


def test_the_node_page_has_readings_and_events(site: Site) -> None:
    with client(site.url, site.tokens["alice"]) as c:
        a2 = c.get("/v1/dashboard/nodes/a2").json()
        m1 = c.get("/v1/dashboard/nodes/m1").json()
        problem(c.get("/v1/dashboard/nodes/nope"), 404)
    assert [(e["action"], e["who"], e["detail"]) for e in a2["events"]] == [
        ("node.drain", "ops", {"reason": "new cables"})
    ]
    assert a2["readings"] == []
    assert [(r["reading"]["index"], r["reading"]["healthy"]) for r in m1["readings"]] == [
        (0, True),
        (1, False),
    ]
    assert m1["node"]["gpus"][0]["mig"] == ["3g.40gb", "2g.20gb", "1g.10gb"]


def test_the_data_needs_a_token(site: Site) -> None:
    with client(site.url) as c:
        for path in ("/v1/dashboard/map", "/v1/dashboard/nodes/a1"):
            assert problem(c.get(path), 401)


def test_the_page_is_served_without_a_token_and_loads_nothing_from_elsewhere(
    site: Site,
) -> None:
    with client(site.url) as c:
        home = c.get("/", follow_redirects=True)
        assets = {name: c.get(f"/ui/{name}") for name in ("app.js", "app.css")}
        problem(c.get("/ui/secrets.txt"), 404)
    assert home.status_code == 200 and str(home.url).endswith("/ui/")
    assert home.headers["content-type"].startswith("text/html")
    csp = home.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    for name, answer in assets.items():
        assert answer.status_code == 200, name
    text = home.text + "".join(a.text for a in assets.values())
    # The one URL in the files is SVG's namespace, an identifier that is never fetched.
    assert set(re.findall(r"\w+://[^\s\"')]+", text)) == {"http://www.w3.org/2000/svg"}
    assert "localStorage" not in text  # the token lives in the tab only


def test_the_page_ships_with_the_package() -> None:
    """Every static file matches a package-data pattern, so wheels carry it."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["gpufleet"]
    package = Path(str(files("gpufleet")))
    static = sorted((package / "api" / "web" / "static").iterdir())
    assert {p.name for p in static} >= {"index.html", "app.js", "app.css"}
    for path in static:
        name = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name
