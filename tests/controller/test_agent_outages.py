"""Outages on either side of the agent protocol: a node that cannot launch a run (its
state directory is full), and a controller restart while the agents back off."""

from __future__ import annotations

import pytest

from controller.harness import ANA, Cluster, spec
from gpufleet.api.agent_schemas import MAX_RETRY_S, RunReport
from store.databases import Database

TIMEOUT_S = 3.0  # docs/agent.md's example: heartbeats every second, three missed


def node_failure(cluster: Cluster, job: str, run: int) -> RunReport:
    message = "agent: cannot start the run: [Errno 28] No space left on device"
    at = cluster.clock.now()
    return RunReport(
        job_id=job, run=run, state="failed_to_start", at=at, message=message, cause="node_fail"
    )


@pytest.mark.parametrize("requeue", [True, False])
def test_a_run_its_node_could_not_start_is_requeued(cluster: Cluster, requeue: bool) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec(requeue=requeue)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    assert [s.job_id for s in cluster.sync(node).jobs_to_start] == [job]
    cluster.sync(node, [node_failure(cluster, job, 1)])
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert "NODE_FAIL" in [e.state for e in out.history]
    if not requeue:
        assert out.state == "NODE_FAIL"
        return
    assert (out.state, out.restart_count) == ("PENDING", 1)
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"
    node = cluster.where(job)
    assert [(s.job_id, s.run) for s in cluster.sync(node).jobs_to_start] == [(job, 2)]


def test_a_restarted_controller_waits_for_agents_still_backing_off(db: Database) -> None:
    cluster = Cluster(db, heartbeat_timeout_s=TIMEOUT_S)
    try:
        cluster.register()
        job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
        cluster.ctl.run_cycle_now()
        node = cluster.where(job)
        cluster.sync(node)
        # The controller is away 20 s; its agents' retries stretch towards MAX_RETRY_S.
        cluster.clock.advance(20)
        cluster.restart()
        restarted = cluster.clock.now()
        due = cluster.ctl._next_due()
        assert due is not None and due >= restarted + MAX_RETRY_S + TIMEOUT_S
        cluster.clock.advance(MAX_RETRY_S)  # well past the heartbeat timeout alone
        cluster.ctl.run_cycle_now()
        assert cluster.state(job) == "RUNNING"
        assert cluster.sync(node).jobs_to_kill == []  # its agent is back: nothing lost
        other = "n2" if node == "n1" else "n1"
        cluster.clock.advance(TIMEOUT_S + 1)  # the other agent never came back
        cluster.sync(node)
        cluster.ctl.run_cycle_now()
        nodes = {n.name: n.state for n in cluster.ctl.list_nodes(principal=ANA)}
        assert nodes[other] == "down" and cluster.state(job) == "RUNNING"
    finally:
        cluster.ctl.stop()
