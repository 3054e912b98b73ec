"""The timeline and its blocks: holds kept apart per node, multi-node starts checked
over their whole window, holds rounded down to the backfill resolution, and starts
estimated as Slurm's select plugin estimates them (``WillRun``).

Properties, over random clusters, running jobs and sequences of planned starts:
no two holds overlap on a node, each planned start has the capacity it needs on
every node it names, and no earlier start would do.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, job, node
from gpufleet.core.state import Assignment, IntArray
from gpufleet.core.timeline import NEVER, Blocks, Timeline, WillRun


def whole(node_: int, *gpus: int) -> Assignment:
    return Assignment(node=node_, gpus=gpus, gpu_milli=1000)


def test_blocks_keep_the_gap_between_two_holds_on_a_node() -> None:
    blocks = Blocks.none(2)
    blocks.add(np.array([0]), 100, 200)
    blocks.add(np.array([0]), 400, 500)
    # [250, 350) lies between the holds; [250, 401) reaches into the second.
    assert blocks.usable(250, 100).tolist() == [True, True]
    assert blocks.usable(250, 151).tolist() == [False, True]
    # From 150: 100 s fit from 200 (the gap); 201 s fit only from 500.
    assert blocks.shift(np.array([150, 150]), 100).tolist() == [200, 150]
    assert blocks.shift(np.array([150, 150]), 201).tolist() == [500, 150]
    # Merging with another set keeps the gap too.
    other = Blocks.none(2)
    other.add(np.array([True, False]), 180, 220)  # overlaps the first: [100, 220)
    both = blocks.merged(other)
    assert both.shift(np.array([150, 150]), 100).tolist() == [220, 150]
    assert both.usable(250, 100).tolist() == [True, True]
    assert blocks.shift(np.array([150, 150]), 100).tolist() == [200, 150]  # unchanged


def test_a_gang_is_held_where_every_node_is_free_over_its_whole_window() -> None:
    # a: all 8 GPUs busy until 120; b: free, but held for another job over [100, 200).
    # A 2 x 8-GPU gang of 60 s: a is ready at 120, b is held then -> both at 200.
    state = cluster(node("a").gpus(8), node("b").gpus(8))
    tl = Timeline(state, now=0, resolution=1)
    busy = whole(0, *range(8))
    state.allocate(busy)
    tl.add("r", [busy], 120)
    blocks = Blocks.none(2)
    blocks.add(np.array([1]), 100, 200)
    planned = tl.earliest(job().gpus(8).gang(2).build(), np.ones(2, np.bool_), 60, blocks)
    assert planned is not None
    assert (planned.start, planned.nodes.tolist()) == (200, [0, 1])


def test_a_hold_is_rounded_down_to_the_resolution_and_ends_are_exact() -> None:
    state = cluster(node("a").gpus(2))
    tl = Timeline(state, now=1000, resolution=60)
    for key, gpu, end in (("late", 0, 900), ("soon", 1, 1001)):
        a = whole(0, gpu)
        state.allocate(a)
        tl.add(key, [a], end)
    assert tl.node_times(job().gpus(1).build()).tolist() == [1000]  # the overdue one
    assert tl.node_times(job().gpus(2).build()).tolist() == [1001]  # not rounded
    planned = tl.earliest(job().gpus(2).build(), np.ones(1, np.bool_), 600, Blocks.none(1))
    assert planned is not None and planned.start == 1001
    # Slurm: start 1001 -> 960, end 1601 -> 1560.
    assert planned.hold == (960, 1560)
    assert tl.hold(1001, 30) == (960, 1020)  # shorter than a step: one step


# -- Slurm's will-run estimates ---------------------------------------------------------
# Times are seconds after 17:00 of a real Slurm 22.05 run (bf_resolution=60), whose
# backfill pass at 17:46:19 logged these planned starts (DebugFlags=Backfill).


def hms(text: str) -> int:
    m, s = text.split(":")
    return int(m) * 60 + int(s)


def test_ends_are_taken_off_in_batches_30_s_wide_then_doubling() -> None:
    ends = np.array(
        [
            hms(t)
            for t in (
                "47:14",
                "47:45",
                "47:57",
                "48:04",
                "48:10",
                "48:50",
                "49:03",
                "49:46",
                "50:52",
            )
        ]
    )
    got = WillRun().batched(ends, hms("46:19"), ends)
    # First batch: up to 47:30 + 30 s; then to 47:30 + 60 s, + 120 s, + 240 s.
    assert [t - 2760 for t in got.tolist()] == [
        hms(t) - 2760
        for t in ("47:57", "47:57", "47:57", "48:10", "48:10", "49:03", "49:03", "50:52", "50:52")
    ]
    # bf_window_linear=60: windows of 30, 90, 150 s past 47:30.
    linear = WillRun(30, 60).batched(ends, hms("46:19"), ends)
    assert linear.tolist()[3:8] == [hms(t) for t in ("48:50",) * 3 + ("49:46",) * 2]
    # Times at or before now stay; so do ends on nodes the estimate does not look at.
    assert WillRun().batched(np.array([100, hms("52:00")]), 200, ends).tolist() == [
        100,
        hms("52:00"),
    ]


SLURM = WillRun()


def running_at(
    state_nodes: int, jobs: list[tuple[int, int, str]], will_run: WillRun | None = SLURM
) -> tuple[Timeline, int]:
    """A timeline at 46:19 over 8-GPU nodes with ``jobs`` as (node, GPUs, end)."""
    state = cluster(*(node(f"n{i}").gpus(8) for i in range(state_nodes)))
    tl = Timeline(state, now=hms("46:19"), resolution=60, will_run=will_run)
    used = [0] * state_nodes
    for k, (n, gpus, end) in enumerate(jobs):
        a = whole(n, *range(used[n], used[n] + gpus))
        used[n] += gpus
        state.allocate(a)
        tl.add(f"r{k}", [a], hms(end))
    return tl, state_nodes


CONS_TRES = WillRun(consecutive=True)


# The logged decisions below come out the same with either node choice.
@pytest.mark.parametrize("slurm", [SLURM, CONS_TRES], ids=["best-fit", "consecutive"])
def test_a_planned_start_is_the_last_end_of_its_batch_on_the_best_fitting_node(
    slurm: WillRun,
) -> None:
    # As Slurm planned its 8-GPU job 50: at 48:10, the last end of the second batch
    # (exactly: 48:04, when n1 empties). A 2-GPU job: at 47:45, the first batch's
    # last end, on n0, where 2 GPUs are free then (exactly: 47:14, on n2, with 6).
    jobs = [(0, 2, "47:45"), (0, 6, "50:13"), (1, 8, "48:04"), (2, 6, "47:14"), (2, 2, "48:10")]
    tl, n = running_at(3, jobs, slurm)
    everywhere = np.ones(n, np.bool_)
    big = tl.earliest(job().gpus(8).build(), everywhere, 300, Blocks.none(n))
    assert big is not None and (big.start, big.nodes.tolist()) == (hms("48:10"), [1])
    small = tl.earliest(job().gpus(2).build(), everywhere, 240, Blocks.none(n))
    assert small is not None and (small.start, small.nodes.tolist()) == (hms("47:45"), [0])
    exact = running_at(3, jobs, None)[0]
    plain = exact.earliest(job().gpus(2).build(), everywhere, 240, Blocks.none(n))
    assert plain is not None and (plain.start, plain.nodes.tolist()) == (hms("47:14"), [2])


@pytest.mark.parametrize("slurm", [SLURM, CONS_TRES], ids=["best-fit", "consecutive"])
def test_the_batches_skip_jobs_on_nodes_a_hold_keeps(slurm: WillRun) -> None:
    # As for Slurm's job 42: n0 is held from 47:00, so its job ending 47:14 does not
    # start the batches; the first is 47:45's, so the batch runs to 48:30 and the
    # start is its last end, 48:10, not 47:57.
    tl, n = running_at(
        3, [(0, 8, "47:14"), (1, 6, "47:45"), (1, 2, "47:57"), (2, 8, "48:10")], slurm
    )
    held = Blocks.none(n)
    held.add(np.array([0]), hms("47:00"), hms("52:00"))
    planned = tl.earliest(job().gpus(2).build(), np.ones(n, np.bool_), 240, held)
    assert planned is not None and (planned.start, planned.nodes.tolist()) == (hms("48:10"), [1])


def test_a_gang_is_planned_on_the_nodes_cons_tres_picks() -> None:
    # n0 is free now, n3 and n4 empty at 50:00, n1 and n2 at 55:00: a 2 x 8-GPU gang
    # starts at 50:00 either way. Best fit takes the first free nodes, n0 and n3;
    # cons_tres the run of adjacent nodes that holds it, n3 and n4, leaving n0 to
    # a job that can backfill there (as Slurm ran the sixth job after n006 freed).
    jobs = [(1, 8, "55:00"), (2, 8, "55:00"), (3, 8, "50:00"), (4, 8, "50:00")]
    gang = job().gpus(8).gang(2).build()
    for will_run, expected in ((SLURM, [0, 3]), (CONS_TRES, [3, 4])):
        tl, n = running_at(5, jobs, will_run)
        planned = tl.earliest(gang, np.ones(n, np.bool_), 300, Blocks.none(n))
        assert planned is not None
        assert (planned.start, planned.nodes.tolist()) == (hms("50:00"), expected)


# -- properties -------------------------------------------------------------------------


def overlaps(spans: list[tuple[int, int, int]], n: int, at: int, length: int) -> bool:
    return any(k == n and s < at + length and at < e for k, s, e in spans)


@settings(max_examples=150)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 500), st.integers(1, 300)), max_size=12),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 600)), max_size=8),
    st.integers(1, 200),
)
def test_blocks_answer_as_a_list_of_spans_does(
    spans: list[tuple[int, int, int]], queries: list[tuple[int, int]], length: int
) -> None:
    blocks = Blocks.none(4)
    kept = []
    for n, start, span in spans:
        blocks.add(np.array([n]), start, start + span)
        kept.append((n, start, start + span))
    for n, at in queries:
        assert bool(blocks.usable(at, length)[n]) == (not overlaps(kept, n, at, length))
        times = np.full(4, at, dtype=np.int64)
        first = int(blocks.shift(times, length)[n])
        assert not overlaps(kept, n, first, length)
        # Nothing earlier fits: the first fit is ``at`` or the end of a span.
        ends = [e for k, _, e in kept if k == n and at <= e < first]
        assert all(overlaps(kept, n, t, length) for t in [at, *ends] if t < first)


@st.composite
def plans(draw: st.DrawFn) -> tuple[int, list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    n = draw(st.integers(2, 4))
    running = draw(
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, 4), st.integers(1, 900)))
    )
    requests = draw(
        st.lists(
            st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 2), st.integers(30, 600)),
            min_size=1,
            max_size=8,
        )
    )
    return n, running, requests


def loaded(
    n: int, running: list[tuple[int, int, int]], resolution: int, will_run: WillRun | None
) -> Timeline:
    """A timeline at 0 over ``n`` 8-GPU nodes running (node, GPUs, end)."""
    state = cluster(*(node(f"n{i}").gpus(8) for i in range(n)))
    tl = Timeline(state, now=0, resolution=resolution, will_run=will_run)
    for i, (where, gpus, end) in enumerate(running):
        free = np.flatnonzero(state.gpu_milli_free[where] == 1000)[:gpus]
        a = whole(where, *free.tolist())
        state.allocate(a)
        tl.add(f"r{i}", [a], end)
    return tl


@settings(max_examples=200)  # about 4 s
@given(plans(), st.sampled_from([1, 60]), st.sampled_from([None, SLURM]))
def test_planned_starts_never_overlap_and_none_could_start_earlier(
    plan: tuple[int, list[tuple[int, int, int]], list[tuple[int, int, int]]],
    resolution: int,
    will_run: WillRun | None,
) -> None:
    """Exact estimates: no earlier start would do. Slurm's: later, but the room is there
    and no hold overlaps another (checked on rounded holds, as Slurm checks)."""
    n, running, requests = plan
    tl = loaded(n, running, resolution, will_run)
    blocks = Blocks.none(n)
    holds: list[tuple[int, int, int]] = []
    every = np.ones(n, dtype=np.bool_)
    for gpus, gang, length in requests:
        r = job().gpus(gpus).gang(gang).build()
        times = tl.node_times(r)
        planned = tl.earliest(r, every, length, blocks)

        def feasible(t: int, times: IntArray = times, length: int = length) -> int:
            return int(((times <= t) & blocks.usable(t, length) & (times < NEVER)).sum())

        candidates = sorted({0, *times[times < NEVER].tolist(), *blocks.end.tolist()})
        if planned is None:
            assert will_run is None and all(feasible(t) < gang for t in candidates)
            continue
        chosen = planned.nodes.tolist()
        assert len(set(chosen)) == gang
        assert (times[chosen] <= planned.start).all()  # capacity is there at the start
        if will_run is None or resolution == 1:
            assert blocks.usable(planned.start, length)[chosen].all()
        if will_run is None:
            assert all(feasible(t) < gang for t in candidates if t < planned.start)
        begin, end = planned.hold
        assert begin <= planned.start and begin % resolution == 0 and end % resolution == 0
        for k in chosen:
            assert not any(h == k and s < end and begin < e for h, s, e in holds), "holds overlap"
            holds.append((k, begin, end))
        blocks.add(planned.nodes, begin, end)
