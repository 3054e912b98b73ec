"""A real agent against a real controller: an injected XID masks one GPU and leaves the
node working; a failing check drains the node, remediation runs and the node resumes;
every step in the node's history."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from api.conftest import Cluster
from gpufleet.agent.checks import CheckSettings, NodeChecks
from gpufleet.agent.daemon import Agent
from gpufleet.agent.runner import Runner
from gpufleet.agent.telemetry import DeclaredTelemetry
from gpufleet.core.model import GPU, Node

INVENTORY = {"names": "n1", "cpu_milli": 16000, "memory_mib": 65536,
             "gpus": {"model": "A100-80GB", "count": 4}}  # fmt: skip
NODE = Node("n1", 16000, 65536, tuple(GPU(i, "A100-80GB", 81920) for i in range(4)))


def eventually(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.05)
    return got


@pytest.fixture
def agent(cluster: Cluster, tmp_path: Path) -> Iterator[Path]:
    """The agent of n1, checking every 0.3 s; yields its directory for injections."""
    check = tmp_path / "check.sh"
    check.write_text(
        f"#!/bin/sh\n[ ! -e {tmp_path}/broken ] || {{ echo 'ib0 is down'; exit 1; }}\n"
    )
    check.chmod(0o755)
    fix = tmp_path / "fix.sh"  # removes the fault, as a playbook would
    fix.write_text(f"#!/bin/sh\nsleep 0.5\nrm -f {tmp_path}/broken\n")
    fix.chmod(0o755)
    runner = Runner(tmp_path / "state", "n1", same_user=True)
    settings = CheckSettings(scripts=((str(check),),), remediation=(str(fix),), interval_s=0.3)
    daemon = Agent(
        server=cluster.url,
        token=cluster.tokens["n1"],
        node="n1",
        inventory=INVENTORY,
        runner=runner,
        telemetry=DeclaredTelemetry(NODE, tmp_path / "n1.telemetry.toml"),
        checks=NodeChecks(settings),
        max_wait_s=0.5,
    )
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        yield tmp_path
    finally:
        daemon.stop()
        thread.join(10)
        runner.close()


def test_xid_masks_a_gpu_and_a_failing_check_drains_then_remediation_resumes(
    cluster: Cluster, agent: Path
) -> None:
    with cluster.client("admin") as api:

        def node() -> dict[str, Any]:
            return dict(api.get("/v1/nodes/n1").json())

        def history() -> list[tuple[str, dict[str, Any]]]:
            entries = api.get("/v1/audit", params={"limit": 100}).json()["entries"]
            return [(e["action"], e["detail"]) for e in reversed(entries) if e["target"] == "n1"]

        eventually(lambda: node()["state"] == "idle")
        (agent / "n1.telemetry.toml").write_text("[[gpus]]\nindex = 2\nxid_last = 48\n")
        eventually(
            lambda: ("node.health", {"ok": True, "reason": "", "masked_gpus": [2]}) in history()
        )
        assert node()["state"] == "idle"  # the node works on with three GPUs
        readings = cluster.controller.gpu_readings()["n1"].gpus
        assert [(g.index, g.healthy) for g in readings] == [(2, False)]  # the file's GPU only
        # Held for no job, once the book has the mask (the audit may come first).
        gpus = eventually(lambda: (g := node()["gpus"])[2]["used_milli"] == 1000 and g)
        assert gpus[2]["jobs"] == []

        (agent / "broken").touch()
        drained = eventually(lambda: (n := node())["state"] == "drain" and n)
        assert drained["reason"] == f"health: {agent / 'check.sh'}: ib0 is down"
        eventually(lambda: node()["state"] == "idle")
        steps = [a for a, _ in history()]
        assert steps[-3:] == ["node.health", "node.remediation", "node.health"]
        assert history()[-2][1] == {"result": f"ran {agent / 'fix.sh'}: exit 0"}
