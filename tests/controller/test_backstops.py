"""What the controller does when agents stay silent, and gang runs over several nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.harness import ADMIN, ANA, OPERATOR, Cluster, inventory, spec
from gpufleet.api.agent_schemas import AgentRegister, RunRef, RunReport, SyncReply
from store.databases import Database

LIMIT = 60  # the jobs' time limit; kill grace 30 s and backstop 60 s after it


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    c = Cluster(db, kill_grace_s=30, backstop_s=60.0, heartbeat_timeout_s=120.0)
    c.register()
    yield c
    c.ctl.stop()


def tick(cluster: Cluster, seconds: float, nodes: tuple[str, ...] = ("n1", "n2")) -> None:
    """Time passes; the agents of ``nodes`` sync (holding what they hold); a cycle runs."""
    cluster.clock.advance(seconds)
    for node in nodes:
        cluster.sync(node)
    cluster.ctl.run_cycle_now()


def jobs_on(cluster: Cluster, node: str) -> list[str]:
    return cluster.ctl.get_node(principal=OPERATOR, name=node).jobs


def started(cluster: Cluster, **extra: object) -> tuple[str, str]:
    """A whole-node job, started and held by its agent: (job id, node)."""
    job = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, **extra)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    return job, node


def test_a_run_past_its_limit_without_a_report_times_out_but_holds_its_room(
    cluster: Cluster,
) -> None:
    job, node = started(cluster, time_limit_s=LIMIT)
    tick(cluster, LIMIT + 30 + 59)
    assert cluster.state(job) == "RUNNING"  # within the backstop: the agent may still report
    cluster.clock.advance(1)
    cluster.ctl.run_cycle_now()
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert out.state == "TIMEOUT" and out.end_time == cluster.clock.now()
    big = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, nodes=2)).job_id
    cluster.ctl.run_cycle_now()
    assert cluster.state(big) == "PENDING"  # the timed-out run still holds its GPUs
    reply = cluster.sync(node)  # the agent still holds it: SIGKILL
    assert [(k.job_id, k.signal, k.grace_s) for k in reply.jobs_to_kill] == [(job, "KILL", 0)]
    cluster.ctl.run_cycle_now()
    assert cluster.state(big) == "PENDING" and jobs_on(cluster, node) == [job]
    cluster.sync(node)  # it no longer holds the run: confirmed gone
    assert jobs_on(cluster, node) == []
    cluster.ctl.run_cycle_now()
    assert cluster.state(big) == "RUNNING" and cluster.state(job) == "TIMEOUT"


def test_an_unconfirmed_cancel_ends_cancelled_and_a_lost_node_frees_it(cluster: Cluster) -> None:
    job, node = started(cluster)
    other = "n2" if node == "n1" else "n1"
    cluster.ctl.cancel_job(principal=ANA, job_id=job)
    assert cluster.state(job) == "COMPLETING"
    tick(cluster, 30 + 60, (other,))
    assert cluster.state(job) == "CANCELLED"
    assert jobs_on(cluster, node) == [job]
    tick(cluster, 60, (other,))  # 150 s since the node's last sync: DOWN
    assert cluster.ctl.get_node(principal=OPERATOR, name=node).state == "down"
    assert jobs_on(cluster, node) == []
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert out.state == "CANCELLED" and "NODE_FAIL" not in [e.state for e in out.history]


def test_the_room_stays_held_across_a_restart_until_confirmed(cluster: Cluster) -> None:
    job, node = started(cluster, time_limit_s=LIMIT)
    tick(cluster, LIMIT + 30 + 60)
    assert cluster.state(job) == "TIMEOUT"
    cluster.restart()
    assert jobs_on(cluster, node) == [job]
    with pytest.raises(Exception, match="still being stopped"):
        cluster.ctl.requeue_job(principal=OPERATOR, job_id=job)
    cluster.held[node].clear()
    cluster.sync(node)
    assert jobs_on(cluster, node) == []


def test_a_lost_node_goes_down_and_requeues_its_runs_in_one_transaction(
    cluster: Cluster,
) -> None:
    job, node = started(cluster)
    other = "n2" if node == "n1" else "n1"
    cluster.clock.advance(121)
    cluster.sync(other)
    writer = cluster.ctl.writer
    assert writer is not None
    before = writer.batches
    cluster.ctl.run_cycle_now()
    assert writer.batches == before + 1
    assert cluster.ctl.get_node(principal=OPERATOR, name=node).state == "down"
    history = [e.state for e in cluster.ctl.get_job(principal=ANA, job_id=job).history]
    assert history[:4] == ["PENDING", "RUNNING", "NODE_FAIL", "REQUEUED"]


def gang(cluster: Cluster) -> str:
    job = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=1, nodes=2)).job_id
    cluster.ctl.run_cycle_now()
    ranks = {}
    for node in ("n1", "n2"):
        (launch,) = cluster.sync(node).jobs_to_start
        ranks[node] = launch.node_rank
    assert sorted(ranks.values()) == [0, 1]  # one task on every node of the gang
    return job


def report(
    cluster: Cluster, node: str, job: str, code: int | None, signal: int | None = None
) -> SyncReply:
    state = "exited" if signal is None else "signalled"
    r = RunReport(job_id=job, run=1, state=state, exit_code=code, signal=signal, at=0.0)
    return cluster.sync(node, [r])


def test_a_gang_ends_when_all_tasks_have_exited_with_the_worst_code(cluster: Cluster) -> None:
    ok = gang(cluster)
    report(cluster, "n1", ok, 0)
    assert cluster.state(ok) == "RUNNING"  # the other task runs on
    assert cluster.sync("n1").jobs_to_start == []  # and the ended one is not started again
    report(cluster, "n2", ok, 0)
    assert cluster.state(ok) == "COMPLETED"
    bad = gang(cluster)
    report(cluster, "n1", bad, 0)
    report(cluster, "n2", bad, 3)
    out = cluster.ctl.get_job(principal=ANA, job_id=bad)
    assert (out.state, out.exit_code) == ("FAILED", 3)


def test_a_gang_fails_at_its_first_failed_task_and_kills_the_others(cluster: Cluster) -> None:
    job = gang(cluster)
    report(cluster, "n1", job, 2)
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.exit_code) == ("FAILED", 2)
    cluster.held["n2"].add((job, 1))
    reply = cluster.sync("n2")
    assert [(k.job_id, k.signal) for k in reply.jobs_to_kill] == [(job, "TERM")]
    # The run's room is given back whole, once every task is gone.
    assert jobs_on(cluster, "n2") == [job] and jobs_on(cluster, "n1") == [job]
    report(cluster, "n2", job, None, signal=15)
    assert jobs_on(cluster, "n2") == [] and jobs_on(cluster, "n1") == []
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.exit_code) == ("FAILED", 2)


@pytest.mark.parametrize(
    ("reported", "expected"),
    [(8, 8), (100, 20), (-50, 0)],  # seconds after the start; the report comes at 20 s
)
def test_a_run_ends_when_its_node_says_within_its_start_and_now(
    cluster: Cluster, reported: float, expected: float
) -> None:
    """The end is the node's time of it, not when the controller heard (the agent was
    down meanwhile), kept between the run's start and now against a skewed clock."""
    job, node = started(cluster, time_limit_s=LIMIT)
    start = cluster.clock.now()
    cluster.clock.advance(20)
    at = start + reported
    cluster.sync(node, [RunReport(job_id=job, run=1, state="exited", exit_code=0, at=at)])
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.start_time, out.end_time) == ("COMPLETED", start, start + expected)
    assert out.history[-1].time == start + expected


def test_a_node_back_with_a_run_it_lost_takes_no_work_until_that_run_ends(
    cluster: Cluster,
) -> None:
    """The run a lost node kept is killed when its agent comes back, and its room (not
    known any more) is not given to a new run, its job's included, until it has ended."""
    job, node = started(cluster)
    other = "n2" if node == "n1" else "n1"
    filler, _ = started(cluster)  # the other node is full: the job can only come back here
    tick(cluster, 200, (other,))  # past the heartbeat timeout (and any start grace)
    assert cluster.ctl.get_node(principal=OPERATOR, name=node).state == "down"
    assert cluster.state(job) == "PENDING"
    body = AgentRegister(inventory=inventory(node), running=[RunRef(job_id=job, run=1)])
    cluster.ctl.register_agent(principal=ADMIN, node=node, body=body)
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "PENDING"
    reply = cluster.sync(node)  # the agent still holds run 1: killed, nothing started
    assert [(k.job_id, k.run, k.signal) for k in reply.jobs_to_kill] == [(job, 1, "KILL")]
    assert reply.jobs_to_start == []
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "PENDING"
    cluster.sync(node)  # run 1 is gone
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING" and cluster.where(job) == node
    assert [(s.job_id, s.run) for s in cluster.sync(node).jobs_to_start] == [(job, 2)]
    assert cluster.state(filler) == "RUNNING"
