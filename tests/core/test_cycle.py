"""The cycle's building blocks, and property tests for the invariants of any plan.

Invariants, over random clusters, running jobs, queues and reservations:
no GPU is over-allocated by a plan, a gang starts whole or not at all, a
reservation is honoured, a hold is never delayed by what the plan starts, no
two holds overlap on a node, every pending job either starts or has a reason,
and the snapshot is left exactly as it was.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, job, node
from gpufleet.core.cycle import Journal, queue_order
from gpufleet.core.job import Job, QoS, Reservation
from gpufleet.core.model import Request
from gpufleet.core.state import Assignment, ClusterState
from gpufleet.core.timeline import NEVER, Blocks, Timeline
from scenario.harness import Scenario, qjob


def plain(job_id: str, submit: int) -> Job:
    return qjob(job_id).gpus(1).submit(submit).job()


@pytest.mark.parametrize(
    ("priorities", "jobs", "expected"),
    [
        # Higher priority first.
        ([1.0, 3.0, 2.0], [plain("a", 0), plain("b", 0), plain("c", 0)], ["b", "c", "a"]),
        # Equal priority: earlier submit first.
        ([1.0, 1.0, 1.0], [plain("a", 5), plain("b", 3), plain("c", 4)], ["b", "c", "a"]),
        # Equal priority and submit: lower id first, and only within the tie.
        (
            [2.0, 1.0, 1.0, 1.0],
            [plain("z", 0), plain("y", 1), plain("x", 1), plain("w", 2)],
            ["z", "x", "y", "w"],
        ),
        # An array's tasks by index, as Slurm starts them (not 10 before 2), numbered
        # jobs by number, other ids after them by text.
        (
            [1.0] * 6,
            [plain(i, 0) for i in ("28_10", "a", "28_2", "28", "7", "28_0")],
            ["7", "28", "28_0", "28_2", "28_10", "a"],
        ),
    ],
)
def test_queue_order_breaks_ties_by_submit_then_id(
    priorities: list[float], jobs: list[Job], expected: list[str]
) -> None:
    order = queue_order(np.array(priorities), jobs)
    assert [jobs[i].id for i in order] == expected


def test_the_journal_rolls_back_allocations_and_releases() -> None:
    state = cluster(node("a").gpus(4).used(2))
    before = state.gpu_milli_free.copy()
    journal = Journal(state)
    journal.allocate(Assignment(node=0, gpus=(2,), gpu_milli=1000))
    mark = journal.mark()
    journal.release(Assignment(node=0, gpus=(0, 1), gpu_milli=1000))
    journal.rollback(mark)
    assert state.gpu_milli_free[0].tolist() == [0, 0, 0, 1000]
    journal.rollback()
    assert (state.gpu_milli_free == before).all()


@pytest.mark.parametrize(
    ("start", "end", "at", "length", "usable", "shifted"),
    [
        # Blocked over [100, 200): a 50 s job at 0 ends by 100 -> usable, stays at 0.
        (100, 200, 0, 50, True, 0),
        # A 101 s job at 0 would overlap -> pushed to 200.
        (100, 200, 0, 101, False, 200),
        # Starting at the block's end is fine.
        (100, 200, 200, 10_000, True, 200),
    ],
)
def test_blocks(start: int, end: int, at: int, length: int, usable: bool, shifted: int) -> None:
    blocks = Blocks.none(2)
    blocks.add(np.array([0]), start, end)
    assert blocks.usable(at, length).tolist() == [usable, True]
    assert blocks.shift(np.array([at, at]), length).tolist() == [shifted, at]


def timeline(state: ClusterState, holders: list[tuple[str, int, list[Assignment]]]) -> Timeline:
    tl = Timeline(state, now=0, resolution=1)
    for key, end, assignments in holders:
        for a in assignments:
            state.allocate(a)
        tl.add(key, assignments, end)
    return tl


def whole(node_: int, *gpus: int, cpu: int = 0) -> Assignment:
    return Assignment(node=node_, gpus=gpus, gpu_milli=1000 if gpus else 0, cpu_milli=cpu)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        # a: GPUs 0-3 free at 100, 4-7 at 300; b: 6 GPUs busy until 200, 2 free now.
        (job().gpus(2).build(), (0, [1])),  # b's two free GPUs: now
        (job().gpus(4).build(), (100, [0])),  # a's first four at 100
        (job().gpus(8).build(), (200, [1])),  # b whole at 200, before a at 300
        (job().gpus(6).build(), (200, [1])),  # b: 2 free + 6 at 200 beats a's 300
        (job().gpus(8).gang(2).build(), (300, [0, 1])),
        (job().gpus(9).build(), None),  # no node has 9 GPUs
        # CPU-only, 10 CPUs: a has 64 - 60 = 4 until 100; b has all 64 now.
        (job().cpu(10_000).build(), (0, [1])),
        (job().fraction(500).build(), (0, [1])),
    ],
)
def test_earliest_start_on_the_timeline(
    request_: Request, expected: tuple[int, list[int]] | None
) -> None:
    state = cluster(node("a").gpus(8), node("b").gpus(8))
    tl = timeline(
        state,
        [
            ("j1", 100, [whole(0, 0, 1, 2, 3, cpu=60_000)]),
            ("j2", 300, [whole(0, 4, 5, 6, 7)]),
            ("j3", 200, [whole(1, 0, 1, 2, 3, 4, 5)]),
        ],
    )
    nodes = np.ones(2, dtype=np.bool_)
    hold = tl.earliest(request_, nodes, 60, Blocks.none(2))
    if expected is None:
        assert hold is None
    else:
        assert hold is not None
        assert (hold.start, hold.nodes.tolist()) == expected


def test_earliest_start_respects_blocks_and_mig() -> None:
    state = cluster(node("a").gpus(1).mig("3g.40gb@0,3g.40gb@4"), node("b").gpus(8))
    mig_req = job().mig("3g.40gb", 2).build()
    first = int(np.flatnonzero(state.mig_node == 0)[0])
    tl = timeline(state, [("m", 500, [Assignment(node=0, mig=(first,))])])
    nodes = np.ones(2, dtype=np.bool_)
    hold = tl.earliest(mig_req, nodes, 60, Blocks.none(2))
    assert hold is not None and (hold.start, hold.nodes.tolist()) == (500, [0])
    # Node a blocked over [400, 1000): a 60 s job free at 500 overlaps, so it waits to 1000.
    blocks = Blocks.none(2)
    blocks.add(np.array([0]), 400, 1000)
    hold = tl.earliest(mig_req, nodes, 60, blocks)
    assert hold is not None and hold.start == 1000
    assert tl.earliest(mig_req, nodes, 60, blocks, horizon=999) is None


# -- properties -------------------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(2, 4))
    nodes = [node(f"n{i}").gpus(draw(st.sampled_from([4, 8]))) for i in range(n)]
    reservations = []
    if draw(st.booleans()):
        start = draw(st.integers(0, 500))
        reservations.append(
            Reservation(
                "res",
                start=start,
                end=start + draw(st.integers(100, 2000)),
                nodes=("n0",),
                users=("bob",),
                maintenance=draw(st.booleans()),
            )
        )
    sc = Scenario(
        nodes,
        now=100,
        reservations=reservations,
        backfill=draw(st.sampled_from(["none", "easy", "conservative"])),
        preemption=draw(st.booleans()),
        resolution_s=draw(st.sampled_from([1, 60])),
    )
    sc.qos = [QoS("normal", preempt=("low",)), QoS("low")]
    for i in range(draw(st.integers(0, 2 * n))):
        gpus = draw(st.sampled_from([1, 2, 4]))
        where = f"n{draw(st.integers(0, n - 1))}"
        st_ = sc.state
        if (st_.gpu_milli_free[st_.index[where]] >= 1000).sum() >= gpus:
            sc.run(
                qjob(f"r{i}").gpus(gpus).qos("low").limit(draw(st.integers(200, 3000))),
                start=draw(st.integers(0, 100)),
                on=where,
            )
    for i in range(draw(st.integers(1, 12))):
        b = qjob(f"p{i:02d}").submit(draw(st.integers(0, 50))).limit(draw(st.integers(60, 3000)))
        kind = draw(st.sampled_from(["whole", "gang", "fraction"]))
        if kind == "whole":
            b.gpus(draw(st.sampled_from([1, 2, 4, 8])))
        elif kind == "gang":
            b.gpus(draw(st.sampled_from([4, 8]))).gang(2)
        else:
            b.fraction(draw(st.sampled_from([250, 500])))
        if draw(st.booleans()):
            b.user("bob")
            if reservations and draw(st.booleans()):
                b.with_(reservation="res")
        if draw(st.integers(0, 3)) == 0:
            b.qos("low")
        sc.submit(b)
    return sc


@settings(max_examples=100)  # about 3 s
@given(scenarios())
def test_plan_invariants(sc: Scenario) -> None:
    snap = sc.snapshot()
    state = snap.state
    before = [a.copy() for a in (state.gpu_milli_free, state.cpu_free, state.mig_free)]
    out = sc.cycle()
    plan = out.plan
    after = (state.gpu_milli_free, state.cpu_free, state.mig_free)
    assert all((x == y).all() for x, y in zip(before, after, strict=True)), "snapshot changed"

    pending = {j.id: j for j in snap.pending}
    assert set(plan.starts) | set(plan.reasons) == set(pending)
    assert not set(plan.starts) & set(plan.reasons)

    # Apply the plan: release victims, allocate starts; over-allocation would raise.
    journal = Journal(state)
    try:
        victims = {p.job_id for p in plan.preemptions}
        for r in snap.running:
            if r.job.id in victims:
                for a in r.assignments:
                    journal.release(a)
        for job_id, assignments in plan.starts.items():
            j = pending[job_id]
            assert len(assignments) == j.request.nodes  # a gang starts whole
            assert len({a.node for a in assignments}) == j.request.nodes
            for a in assignments:
                journal.allocate(a)
            for res in snap.reservations:
                on_res = any(state.nodes[a.node].name in res.nodes for a in assignments)
                end = snap.now + j.time_limit_s
                overlaps = snap.now < res.end and end > res.start
                if j.reservation == res.name:
                    assert res.admits(j)
                    assert all(state.nodes[a.node].name in res.nodes for a in assignments)
                    assert res.start <= snap.now and end <= res.end
                else:
                    assert not (on_res and overlaps), "an outsider overlaps a reservation"

        # No hold is delayed: with the plan's starts in place, each held job
        # still fits on its hold's nodes at its planned start.
        tl = Timeline(state, snap.now, sc.resolution_s)
        for r in snap.running:
            if r.job.id not in victims:
                tl.add(r.job.id, r.assignments, r.expected_end)
        for job_id, assignments in plan.starts.items():
            tl.add(job_id, assignments, snap.now + pending[job_id].time_limit_s)
        holds: list[tuple[int, int, int]] = []
        for job_id, start in plan.expected_start.items():
            times = tl.node_times(pending[job_id].request)
            held = list(plan.expected_nodes[job_id])
            assert (times[held] <= start).all()
            assert times[held].max() < NEVER
            # No two holds overlap on a node.
            begin, end = tl.hold(start, pending[job_id].time_limit_s)
            for k in held:
                assert not any(h == k and s < end and begin < e for h, s, e in holds)
                holds.append((k, begin, end))
    finally:
        journal.rollback()
