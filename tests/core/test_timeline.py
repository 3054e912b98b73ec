"""The timeline and its blocks: holds kept apart per node, multi-node starts checked
over their whole window, holds rounded down to the backfill resolution.

Properties, over random clusters, running jobs and sequences of planned starts:
no two holds overlap on a node, each planned start has the capacity it needs on
every node it names, and no earlier start would do.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, job, node
from gpufleet.core.state import Assignment, IntArray
from gpufleet.core.timeline import NEVER, Blocks, Timeline


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


@settings(max_examples=150)  # about 2 s
@given(plans(), st.sampled_from([1, 60]))
def test_planned_starts_never_overlap_and_none_could_start_earlier(
    plan: tuple[int, list[tuple[int, int, int]], list[tuple[int, int, int]]], resolution: int
) -> None:
    n, running, requests = plan
    state = cluster(*(node(f"n{i}").gpus(8) for i in range(n)))
    tl = Timeline(state, now=0, resolution=resolution)
    for i, (where, gpus, end) in enumerate(running):
        free = np.flatnonzero(state.gpu_milli_free[where] == 1000)[:gpus]
        a = whole(where, *free.tolist())
        state.allocate(a)
        tl.add(f"r{i}", [a], end)
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
            assert all(feasible(t) < gang for t in candidates)
            continue
        chosen = planned.nodes.tolist()
        assert len(set(chosen)) == gang
        assert (times[chosen] <= planned.start).all()  # capacity is there at the start
        assert blocks.usable(planned.start, length)[chosen].all()
        assert all(feasible(t) < gang for t in candidates if t < planned.start)
        begin, end = planned.hold
        assert begin <= planned.start and begin % resolution == 0 and end % resolution == 0
        for k in chosen:
            assert not any(h == k and s < end and begin < e for h, s, e in holds), "holds overlap"
            holds.append((k, begin, end))
        blocks.add(planned.nodes, begin, end)
