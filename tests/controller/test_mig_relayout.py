"""MIG re-partitioning live: the cycle's layout change goes to the node's agent (audited
and stored in the cycle's transaction), the GPU waits for the agent's report, then serves
with its new layout, which the store keeps across a restart; so does a change not yet
reported."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.harness import ADMIN, Cluster, spec
from gpufleet.api.agent_schemas import AgentRegister, AgentSync, MigDone
from gpufleet.policies.config import Policy, PolicyConfig
from gpufleet.policies.migplan import MigArgs
from store.databases import Database

SEVEN_1G = ",".join(f"1g.10gb@{s}" for s in range(7))
ORDER = ["7g.80gb@0"]
BIG = spec(gpus_per_node=0, mig_profile="7g.80gb", mig_count=1)
DRY_RUN = [["nvidia-smi", "mig", "-i", "0", "-dci"]]  # as an agent reports it; not checked


def mig_inventory(name: str) -> dict[str, Any]:
    return {
        "names": name,
        "cpu_milli": 32000,
        "memory_mib": 256 * 1024,
        "gpus": {"model": "A100-80GB", "count": 2, "mig": {"all": SEVEN_1G}},
    }


@pytest.fixture
def mig(db: Database) -> Iterator[Cluster]:
    policy = Policy(PolicyConfig(mig=MigArgs(repartition=True, min_interval_s=0)))
    c = Cluster(db, profile_factory=lambda workload: policy.profile(workload))
    body = AgentRegister(inventory=mig_inventory("n1"))
    c.ctl.register_agent(principal=ADMIN, node="n1", body=body)
    yield c
    c.ctl.stop()


def done(gpu: int, layout: list[str] | None, error: str = "") -> AgentSync:
    return AgentSync(mig_done=[MigDone(gpu=gpu, layout=layout, commands=DRY_RUN, error=error)])


def audit(c: Cluster) -> list[tuple[str, Any]]:
    page = c.ctl.list_audit(principal=ADMIN)
    return [(e.action, e.detail) for e in reversed(page.entries) if e.action.startswith("node.mig")]


def test_the_agent_gets_the_change_and_the_gpu_serves_once_it_reports(mig: Cluster) -> None:
    job = mig.ctl.submit(principal=ADMIN, spec=BIG)
    mig.ctl.run_cycle_now()
    reply = mig.sync("n1")
    assert [(c.gpu, c.layout) for c in reply.mig_changes] == [(0, ORDER)]
    assert audit(mig) == [("node.mig.order", {"gpu": 0, "layout": ORDER})]
    assert mig.sync("n1").mig_changes == reply.mig_changes  # sent until reported
    mig.ctl.run_cycle_now()
    assert mig.state(job.job_id) == "PENDING"  # the GPU takes no work meanwhile
    assert mig.sync("n1").jobs_to_start == []
    reply = mig.ctl.sync_agent(principal=ADMIN, node="n1", body=done(0, ORDER))
    assert reply.mig_changes == []
    mig.ctl.run_cycle_now()
    started = mig.sync("n1").jobs_to_start
    assert [s.job_id for s in started] == [job.job_id]
    assert mig.ctl.get_job(principal=ADMIN, job_id=job.job_id).state == "RUNNING"
    entries = audit(mig)
    assert [a for a, _ in entries] == ["node.mig.order", "node.mig"]
    assert entries[1][1]["applied"] is False and entries[1][1]["commands"] == DRY_RUN
    # A repeated report changes nothing; the store keeps the layout across a restart.
    mig.ctl.sync_agent(principal=ADMIN, node="n1", body=done(0, ORDER))
    assert len(audit(mig)) == 2
    mig.restart()
    gpus = mig.ctl.book.state.nodes[mig.ctl.book.state.index["n1"]].gpus
    assert gpus[0].mig == (("7g.80gb", 0),)
    assert gpus[1].mig == tuple(("1g.10gb", s) for s in range(7))


def test_a_failed_change_leaves_the_gpu_out_of_work_and_is_audited(mig: Cluster) -> None:
    mig.ctl.submit(principal=ADMIN, spec=BIG)
    mig.ctl.run_cycle_now()
    assert mig.sync("n1").mig_changes
    mig.ctl.sync_agent(principal=ADMIN, node="n1", body=done(0, ORDER, error="-dgi: In use"))
    assert mig.sync("n1").mig_changes == []
    assert [a for a, _ in audit(mig)] == ["node.mig.order", "node.mig.failed"]
    assert mig.ctl.book.state.nodes[0].gpus[0].mig == ()  # no instances: no work


def test_a_change_not_yet_reported_is_sent_again_after_a_restart(mig: Cluster) -> None:
    job = mig.ctl.submit(principal=ADMIN, spec=BIG)
    mig.ctl.run_cycle_now()
    assert [(c.gpu, c.layout) for c in mig.sync("n1").mig_changes] == [(0, ORDER)]
    mig.restart()
    mig.ctl.run_cycle_now()  # the GPU still takes no work, and is not ordered again
    reply = mig.sync("n1")
    assert [(c.gpu, c.layout) for c in reply.mig_changes] == [(0, ORDER)]
    assert reply.jobs_to_start == [] and mig.state(job.job_id) == "PENDING"
    assert mig.ctl.book.state.nodes[0].gpus[0].mig == ()
    assert audit(mig) == [("node.mig.order", {"gpu": 0, "layout": ORDER})]
    # the report clears it for good: a later restart sends nothing, the GPU serves
    mig.ctl.sync_agent(principal=ADMIN, node="n1", body=done(0, ORDER))
    mig.restart()
    assert mig.sync("n1").mig_changes == []
    mig.ctl.run_cycle_now()
    assert [s.job_id for s in mig.sync("n1").jobs_to_start] == [job.job_id]
