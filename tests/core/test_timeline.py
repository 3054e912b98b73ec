"""The timeline's blocks: holds kept apart per node."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.timeline import Blocks


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
