"""Autoscaling live: ``gpufleet up`` with a node pool and the ``local`` provider.

Real processes and real HTTP: jobs of the pool's partition pend, the
controller starts a second ``gpufleet agent`` for the pool's node, which
registers and runs them; once it has been idle for ``idle_s`` the controller
deletes the node and stops its agent.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cli.live import running_up
from deploy.live import until

ROOT = Path(__file__).resolve().parents[2]
IDLE_S = 4


def config(state_dir: Path) -> str:
    """The shipped example, with short timings and the pool's files under the test's dir."""
    text = (ROOT / "examples" / "elastic-up.toml").read_text()
    text = text.replace("idle_s = 10", f"idle_s = {IDLE_S}")
    text = text.replace('state_dir = "gpufleet-elastic/pool"', f'state_dir = "{state_dir}"')
    for user in ("ops", "ada", "bob"):  # the principals running_up makes tokens for
        role = "operator" if user == "ops" else "user"
        text += f'\n[[principals]]\nname = "{user}"\nrole = "{role}"\n'
    return text


def test_local_pool_grows_runs_and_shrinks(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    with running_up(tmp_path / "up", config(pool)) as up, up.api() as api:

        def nodes() -> dict[str, dict[str, Any]]:
            return {n["name"]: n for n in api.get("/v1/nodes").json()}

        assert set(nodes()) == {"local"}  # the pool starts empty (min_nodes 0)
        body = {
            "command": ["sleep", "2"], "workdir": str(tmp_path), "partition": "burst",
            "gpus_per_node": 1,
        }  # fmt: skip
        ids = [api.post("/v1/jobs", json=body).json()["job_id"] for _ in range(2)]
        reason = api.get(f"/v1/jobs/{ids[0]}").json()["reason"]
        assert reason in ("ReqNodeNotAvail", "None", "")  # no node of burst is up yet
        # a second agent registers the pool's node, burst-1, which takes both jobs (2 GPUs)
        until("burst-1", lambda: "burst-1" in nodes())
        assert (pool / "burst-1" / "node.toml").is_file()
        for job_id in ids:
            assert up.wait_final(job_id) == "COMPLETED"
            job = api.get(f"/v1/jobs/{job_id}").json()
            assert job["node_list"] == ["burst-1"], job
        # idle for IDLE_S: the node leaves the cluster and its agent stops
        until("burst-1 deleted", lambda: "burst-1" not in nodes(), IDLE_S + 30)
        log = pool / "burst-1" / "agent.log"
        until("the agent to stop", lambda: "stopped; jobs keep running" in log.read_text(), 30)
        entries = api.get("/v1/audit", params={"limit": 1000}).json()["entries"]
        deleted = [e["target"] for e in entries if e["action"] == "node.delete"]
        assert deleted == ["burst-1"], entries
        # /metrics: the pool is empty again, and its node cost something while it existed
        metrics = api.get("/metrics").text
        assert 'gpufleet_pool_nodes{pool="burst",state="up"} 0.0' in metrics
        assert 'gpufleet_pool_nodes{pool="burst",state="booting"} 0.0' in metrics
        cost = re.search(r'gpufleet_pool_cost\{pool="burst"\} (\S+)', metrics)
        assert cost is not None and float(cost[1]) > 0, metrics
        # the node token the controller issued for the agent is revoked with the node
        tokens = [t for t in api.get("/v1/tokens").json() if t["node"] == "burst-1"]
        assert tokens and all(t["revoked"] for t in tokens), tokens
