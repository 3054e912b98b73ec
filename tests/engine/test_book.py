"""The job book: how a plan, run ends, checkpoints and node changes change the jobs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import node
from gpufleet.core.job import JobState, Partition, QoS, RunningJob
from gpufleet.core.plan import Plan, Preemption
from gpufleet.core.state import Assignment, OverAllocation
from gpufleet.engine.book import JobBook, UnknownJob
from scenario.harness import qjob

QOS = {"normal": QoS("normal"), "low": QoS("low")}
PARTS = {"main": Partition("main")}


def book(*names: str, gpus: int = 8) -> JobBook:
    return JobBook([node(n).gpus(gpus).build() for n in names], QOS, PARTS)


def whole(n: int, *gpus: int) -> Assignment:
    return Assignment(node=n, gpus=gpus, gpu_milli=1000, cpu_milli=1000)


def test_start_finish_and_runs() -> None:
    b = book("a")
    b.submit(qjob("j").gpus(2).limit(600).job())
    fx = b.apply(Plan(starts={"j": [whole(0, 0, 1)]}), now=100)
    (s,) = fx.started
    assert (s.job_id, s.run, s.expected_end) == ("j", 1, 700)  # 100 + limit 600
    assert s.placements[0].node == "a" and s.placements[0].gpus == (0, 1)
    assert not b.pending and b.running["j"].job.state is JobState.RUNNING
    assert int(b.state.gpu_milli_free[0].sum()) == 6000
    end = b.finish("j", now=400)
    assert (end.outcome, end.start, end.end, end.elapsed, end.run) == ("finished", 100, 400, 300, 1)
    assert not b.running and not b.pending
    assert int(b.state.gpu_milli_free[0].sum()) == 8000
    with pytest.raises(UnknownJob):
        b.finish("j", now=500)


def test_requeue_grows_attained_service_and_counts_runs() -> None:
    b = book("a")
    b.submit(qjob("j").gpus(2).job())
    b.apply(Plan(starts={"j": [whole(0, 0, 1)]}), now=0)
    end = b.stop("j", now=50, requeue=True)
    # 2 GPUs x 50 s = 100 GPU-seconds attained.
    assert end.outcome == "requeued" and end.job.gpu_seconds_attained == 100.0
    assert b.pending["j"] is end.job and end.job.state is JobState.PENDING
    assert end.job.start_time is None
    (s,) = b.apply(Plan(starts={"j": [whole(0, 0, 1)]}), now=60).started
    assert s.run == 2


def test_cancel_takes_the_job_out() -> None:
    b = book("a")
    b.submit(qjob("j").gpus(1).job())
    b.apply(Plan(starts={"j": [whole(0, 0)]}), now=0)
    assert b.stop("j", now=5, requeue=False).outcome == "cancelled"
    assert not b.pending and not b.running


def test_victim_without_grace_stops_before_the_start() -> None:
    b = book("a")
    b.submit(qjob("v").gpus(8).qos("low").job())
    b.apply(Plan(starts={"v": [whole(0, *range(8))]}), now=0)
    b.submit(qjob("j").gpus(8).job())
    plan = Plan(
        starts={"j": [whole(0, *range(8))]},
        preemptions=[Preemption("v", "requeue", 0, for_job="j")],
    )
    fx = b.apply(plan, now=10)
    assert [e.job_id for e in fx.stopped] == ["v"] and fx.stopped[0].outcome == "requeued"
    assert [s.job_id for s in fx.started] == ["j"] and not fx.deferred
    assert list(b.pending) == ["v"]


def test_a_book_that_waits_for_stops_signals_a_victim_without_grace() -> None:
    """A driver whose victims are processes (the controller) builds its book with
    ``stop_at_once=False``: a victim with no grace time holds its room, for its
    preemptor, until the driver reports it gone, as one in grace time does."""
    b = JobBook([node("a").gpus(8).build()], QOS, PARTS, stop_at_once=False)
    b.submit(qjob("v").gpus(8).qos("low").job())
    b.apply(Plan(starts={"v": [whole(0, *range(8))]}), now=0)
    b.submit(qjob("j").gpus(8).job())
    plan = Plan(
        starts={"j": [whole(0, *range(8))]},
        preemptions=[Preemption("v", "requeue", 0, for_job="j")],
    )
    fx = b.apply(plan, now=10)
    (sig,) = fx.signalled
    assert (sig.job_id, sig.deadline, sig.mode, sig.for_job) == ("v", 10, "requeue", "j")
    assert fx.deferred == ["j"] and not fx.started and not fx.stopped
    assert b.snapshot(12).signalled == {"v": "j"}
    assert b.stop("v", now=12, requeue=True).outcome == "requeued"
    assert b.snapshot(12).promised == {"j": tuple(plan.starts["j"])}


def test_victim_in_grace_defers_the_start_and_is_signalled_once() -> None:
    b = book("a")
    b.submit(qjob("v").gpus(8).qos("low").job())
    b.apply(Plan(starts={"v": [whole(0, *range(8))]}), now=0)
    b.submit(qjob("j").gpus(8).job())
    plan = Plan(
        starts={"j": [whole(0, *range(8))]},
        preemptions=[Preemption("v", "cancel", 30, for_job="j")],
    )
    fx = b.apply(plan, now=10)
    (sig,) = fx.signalled
    assert (sig.job_id, sig.deadline, sig.mode, sig.for_job) == ("v", 40, "cancel", "j")
    assert fx.deferred == ["j"] and not fx.started and not fx.stopped
    assert b.running["v"].expected_end == 40  # backfill sees it go at the deadline
    assert b.snapshot(20).signalled == {"v": "j"}
    again = b.apply(plan, now=20)  # named again: not signalled twice
    assert not again.signalled and again.deferred == ["j"]
    assert b.stop("v", now=40, requeue=sig.mode == "requeue").outcome == "cancelled"
    assert b.snapshot(40).signalled == {}
    assert [s.job_id for s in b.apply(Plan(starts={"j": plan.starts["j"]}), now=40).started] == [
        "j"
    ]


def test_checkpoint_is_seen_by_the_snapshot() -> None:
    b = book("a")
    b.submit(qjob("j").gpus(1).job())
    b.apply(Plan(starts={"j": [whole(0, 0)]}), now=0)
    b.checkpoint("j", now=30)
    (r,) = b.snapshot(40).running
    assert r.job.last_checkpoint == 30


def test_node_down_requeues_its_runs_and_node_up_restores_it() -> None:
    b = book("a", "b")
    for j in ("y", "x", "z"):
        b.submit(qjob(j).gpus(1).job())
    b.apply(
        Plan(starts={"y": [whole(0, 0)], "x": [whole(0, 1)], "z": [whole(1, 0)]}), now=0
    )
    ends = b.node_down("a", now=10)
    assert [e.job_id for e in ends] == ["x", "y"]  # by job id
    assert all(e.outcome == "requeued" for e in ends)
    assert not b.state.healthy[0] and b.node_down(0, now=11) == []
    assert list(b.running) == ["z"]
    b.node_up("a")
    assert b.state.healthy[0]


def test_add_and_remove_nodes_keep_runs_and_health() -> None:
    b = book("a", "b", "c")
    b.submit(qjob("j").gpus(2).job())
    b.apply(Plan(starts={"j": [whole(2, 0, 1)]}), now=0)
    b.node_down("a", now=1)
    with pytest.raises(ValueError, match="jobs run on it"):
        b.remove_node("c")
    b.remove_node("b")
    # c moved from index 2 to 1; the run moved with it.
    assert [n.name for n in b.state.nodes] == ["a", "c"]
    assert b.running["j"].assignments[0].node == 1 and b.on_node[1] == {"j"}
    assert int(b.state.gpu_milli_free[1].sum()) == 6000
    assert not b.state.healthy[0]
    b.add_node(node("d").gpus(4).build())
    assert b.state.index["d"] == 2 and b.state.healthy[2]
    with pytest.raises(ValueError, match="already"):
        b.add_node(node("d").gpus(4).build())
    assert b.finish("j", now=5).assignments[0].node == 1


def test_remove_node_renumbers_mig_instances() -> None:
    b = JobBook(
        [node(n).mig("3g.40gb@0,3g.40gb@4").gpus(1).build() for n in ("a", "b")], QOS, PARTS
    )
    b.submit(qjob("j").mig("3g.40gb").job())
    # Instances: a -> 0, 1; b -> 2, 3. Take b's second one.
    b.apply(Plan(starts={"j": [Assignment(node=1, mig=(3,))]}), now=0)
    assert b.placements(b.running["j"].assignments)[0].mig == ("0:3g.40gb@4",)
    b.remove_node("a")
    assert b.running["j"].assignments[0].mig == (1,)
    assert b.placements(b.running["j"].assignments)[0].mig == ("0:3g.40gb@4",)


def test_placements_name_gpu_uuids() -> None:
    n = node("a").gpus(2).build()
    n = replace(n, gpus=tuple(replace(g, uuid=f"GPU-{g.index}") for g in n.gpus))
    b = JobBook([n], QOS, PARTS)
    (p,) = b.placements([Assignment(node=0, gpus=(1,), gpu_milli=500, cpu_milli=10)])
    assert (p.node, p.gpus, p.gpu_uuids, p.gpu_milli) == ("a", (1,), ("GPU-1",), 500)


def test_submit_withdraw_and_restore() -> None:
    b = book("a")
    job = qjob("j").gpus(1).job()
    b.submit(job)
    with pytest.raises(ValueError, match="already"):
        b.submit(job)
    assert b.withdraw("j") is job and not b.pending
    with pytest.raises(UnknownJob):
        b.withdraw("j")
    running = qjob("r").gpus(8).job(state=JobState.RUNNING, start_time=0)
    b.restore(RunningJob(running, (whole(0, *range(8)),), 3600), run=3)
    assert b.runs["r"] == 3 and b.on_node[0] == {"r"}
    other = qjob("o").gpus(1).job(state=JobState.RUNNING, start_time=0)
    with pytest.raises(OverAllocation):
        b.restore(RunningJob(other, (whole(0, 0),), 3600))
    assert "o" not in b.running


def test_cordon_keeps_the_placer_off_and_the_runs_on() -> None:
    b = book("a", "b")
    b.submit(qjob("x").gpus(1).job())
    b.apply(Plan(starts={"x": [whole(0, 0)]}), now=0)
    version = int(b.state.version[0])
    b.cordon("a", usable=False)
    assert not b.state.healthy[0] and b.state.version[0] == version + 1
    assert list(b.running) == ["x"] and int(b.state.gpu_milli_free[0].sum()) == 7000
    b.cordon("a", usable=False)  # again: nothing changes
    assert b.state.version[0] == version + 1
    b.cordon("a", usable=True)
    assert b.state.healthy[0] and list(b.running) == ["x"]
    # A cordoned node can still go down, and a cordon's end does not bring it back.
    b.cordon(0, usable=False)
    assert [e.job_id for e in b.node_down("a", now=5)] == ["x"]
    b.cordon("a", usable=True)
    assert not b.state.healthy[0]
    b.node_up("a")
    assert b.state.healthy[0]
    # Removing other nodes keeps a cordon where it is.
    b.cordon("b", usable=False)
    b.remove_node("a")
    assert not b.state.healthy[0] and b.cordoned == {"b"}


def test_submit_with_the_runs_a_job_had_before() -> None:
    b = book("a")
    b.submit(qjob("j").gpus(1).job(), runs=3)
    (s,) = b.apply(Plan(starts={"j": [whole(0, 0)]}), now=0).started
    assert s.run == 4
    with pytest.raises(ValueError):
        b.submit(qjob("k").gpus(1).job(), runs=-1)
    assert "k" not in b.pending
