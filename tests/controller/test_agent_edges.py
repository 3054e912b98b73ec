"""The agent protocol's edges: a cancel that crosses its start, kills sent once,
and a run ended by its time limit, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from controller.harness import ADMIN, ANA, OPERATOR, Cluster, spec
from gpufleet.api.agent_schemas import KILL_RESEND_S, AgentSync, RunRef, RunReport, SyncReply
from store.databases import Database

GRACE_S = 30


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    c = Cluster(db, kill_grace_s=GRACE_S, backstop_s=60.0)
    c.register()
    yield c
    c.ctl.stop()


def sync(
    cluster: Cluster, node: str, *held: str, reports: Sequence[RunReport] = ()
) -> SyncReply:
    """A sync from an agent holding run 1 of ``held``, whatever the replies said."""
    body = AgentSync(running=[RunRef(job_id=j, run=1) for j in held], reports=list(reports))
    return cluster.ctl.sync_agent(principal=ADMIN, node=node, body=body)


def kills(reply: SyncReply) -> list[tuple[str, int, str]]:
    return [(k.job_id, k.run, k.signal) for k in reply.jobs_to_kill]


def whole_node_job(cluster: Cluster, **extra: object) -> tuple[str, str]:
    job = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, **extra)).job_id
    cluster.ctl.run_cycle_now()
    return job, cluster.where(job)


@pytest.mark.parametrize("start_sent", [False, True], ids=["before-the-start", "start-in-flight"])
def test_a_cancel_that_crosses_its_start_ends_the_job_at_once(
    cluster: Cluster, start_sent: bool
) -> None:
    job, node = whole_node_job(cluster)
    if start_sent:
        assert [s.job_id for s in sync(cluster, node).jobs_to_start] == [job]
    cluster.ctl.cancel_job(principal=ANA, job_id=job)
    # The agent does not hold the run (yet): it still gets the kill, and no start.
    reply = sync(cluster, node)
    assert reply.jobs_to_start == [] and kills(reply) == [(job, 1, "TERM")]
    # An agent ends a run killed before it started and reports it so.
    unstarted = RunReport(
        job_id=job,
        run=1,
        state="failed_to_start",
        cause="killed",
        at=cluster.clock.now(),
        message="killed before it started (cancel)",
    )
    reply = sync(cluster, node, reports=[unstarted])
    assert reply.jobs_to_start == [] and reply.jobs_to_kill == []
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert out.state == "CANCELLED" and out.end_time == cluster.clock.now()
    assert cluster.ctl.get_node(principal=OPERATOR, name=node).jobs == []
    # Its room is free again, long before the backstop (grace 30 s + 60 s).
    nxt, _ = whole_node_job(cluster, nodes=2)
    assert cluster.state(nxt) == "RUNNING"


def test_a_kill_is_sent_once_then_again_only_after_the_resend_time(cluster: Cluster) -> None:
    job, node = whole_node_job(cluster)
    sync(cluster, node)
    cluster.ctl.cancel_job(principal=ANA, job_id=job)
    assert kills(sync(cluster, node, job)) == [(job, 1, "TERM")]
    assert kills(sync(cluster, node, job)) == []  # still in its grace: nothing new
    cluster.clock.advance(KILL_RESEND_S)
    assert kills(sync(cluster, node, job)) == [(job, 1, "TERM")]  # a lost answer is repaired
    assert kills(sync(cluster, node, job)) == []
    # Past the grace and the backstop: escalated to SIGKILL, sent at once, once.
    cluster.clock.advance(GRACE_S + 60 - KILL_RESEND_S)
    cluster.ctl.run_cycle_now()
    assert kills(sync(cluster, node, job)) == [(job, 1, "KILL")]
    assert kills(sync(cluster, node, job)) == []
    sync(cluster, node)  # gone
    assert cluster.ctl.get_node(principal=OPERATOR, name=node).jobs == []


def test_a_registering_agent_gets_its_kills_again(cluster: Cluster) -> None:
    # A restarted agent may have lost the answer that carried them.
    job, node = whole_node_job(cluster)
    sync(cluster, node)
    cluster.ctl.cancel_job(principal=ANA, job_id=job)
    assert kills(sync(cluster, node, job)) == [(job, 1, "TERM")]
    cluster.register(node)
    assert kills(sync(cluster, node, job)) == [(job, 1, "TERM")]
    assert kills(sync(cluster, node, job)) == []


def test_an_unexpected_run_is_killed_once(cluster: Cluster) -> None:
    assert kills(sync(cluster, "n1", "77")) == [("77", 1, "KILL")]
    assert kills(sync(cluster, "n1", "77")) == []
    assert kills(sync(cluster, "n1")) == []
    assert kills(sync(cluster, "n1", "77")) == [("77", 1, "KILL")]  # it came back


def report(cluster: Cluster, job: str, **fields: object) -> RunReport:
    return RunReport(job_id=job, run=1, at=cluster.clock.now(), **fields)


@pytest.mark.parametrize(
    ("fields", "state", "exit_code"),
    [
        # Trapped the limit's SIGTERM and exited 0: still the limit's doing.
        ({"state": "exited", "exit_code": 0, "cause": "time_limit"}, "TIMEOUT", 0),
        ({"state": "signalled", "signal": 9, "cause": "time_limit"}, "TIMEOUT", None),
        # Ended by itself just after its limit (the agent had not acted yet).
        ({"state": "exited", "exit_code": 0, "cause": "exited"}, "COMPLETED", 0),
        # An agent that gives no cause: a signal after the limit is the limit.
        ({"state": "signalled", "signal": 15}, "TIMEOUT", None),
        ({"state": "exited", "exit_code": 0}, "COMPLETED", 0),
    ],
    ids=["trapped-exit-0", "killed", "by-itself", "no-cause-signal", "no-cause-exit"],
)
def test_a_run_its_limit_ended_is_a_timeout_whatever_its_exit(
    cluster: Cluster, fields: dict[str, object], state: str, exit_code: int | None
) -> None:
    job, node = whole_node_job(cluster, time_limit_s=60)
    sync(cluster, node)
    cluster.clock.advance(61)
    sync(cluster, node, job, reports=[report(cluster, job, **fields)])
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.exit_code) == (state, exit_code)


def test_a_gang_task_ended_by_its_limit_makes_the_run_a_timeout(cluster: Cluster) -> None:
    job, _ = whole_node_job(cluster, nodes=2, time_limit_s=60)
    for node in ("n1", "n2"):
        sync(cluster, node)
    cluster.clock.advance(61)
    limit = report(cluster, job, state="exited", exit_code=0, cause="time_limit")
    sync(cluster, "n1", job, reports=[limit])
    assert cluster.state(job) == "RUNNING"  # n2's task still runs
    by_itself = report(cluster, job, state="exited", exit_code=0, cause="exited")
    sync(cluster, "n2", job, reports=[by_itself])
    assert cluster.state(job) == "TIMEOUT"
