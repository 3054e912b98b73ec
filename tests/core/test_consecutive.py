"""Slurm's node choice (cons_tres): runs of consecutive nodes, then the tightest."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.consecutive import consecutive_nodes, runs

X = -1  # a node the job cannot use


@pytest.mark.parametrize(
    ("cpus", "count", "expected"),
    [
        ([64, 64, 64], 1, [0]),  # all alike: the first
        ([64, 64, X, 60], 1, [3]),  # the run with the fewest free CPUs (60 < 128)
        ([64, 50, 60], 1, [1]),  # in the run, the node with the fewest
        ([64, X, 64, 64], 2, [2, 3]),  # the only run that holds a gang of 2
        ([64, 64, X, 50, 50], 2, [3, 4]),  # the tighter of two that hold it
        ([64, 64, X, 64, 64], 3, [0, 1, 3]),  # none holds it: the largest, then the next
        # Slurm's loop lets a larger run that cannot hold the gang displace one that
        # can: n3 first, then the fewest-CPU node of the other run
        ([2, 2, X, 64], 2, [0, 3]),
        ([64, X, 64], 3, []),  # too few usable nodes
    ],
)
def test_scenarios(cpus: list[int], count: int, expected: list[int]) -> None:
    free = np.array(cpus, dtype=np.int64)
    assert consecutive_nodes(free >= 0, free, count, 1).tolist() == expected


@given(st.lists(st.integers(-1, 64), min_size=1, max_size=24), st.integers(1, 6))
def test_a_pick_is_count_usable_nodes_and_one_task_goes_to_the_tightest_run(
    cpus: list[int], count: int
) -> None:
    free = np.array(cpus, dtype=np.int64)
    usable = free >= 1
    picked = consecutive_nodes(usable, free, count, 1)
    if usable.sum() < count:
        assert len(picked) == 0
        return
    assert len(set(picked.tolist())) == count and usable[picked].all()
    if count == 1:
        totals = {(a, b): int(free[a:b].sum()) for a, b in runs(usable)}
        (a, b), least = next((r, t) for r, t in totals.items() if r[0] <= picked[0] < r[1])
        assert least == min(totals.values())
        assert free[picked[0]] == free[a:b].min()


def test_a_removed_node_does_not_split_a_run() -> None:
    # n1 was taken out of the cluster: n0 and n2 are adjacent, as in the new
    # configuration, and that run comes first; an unusable n1 splits them.
    free = np.array([64, 0, 64, X, 64, 64], dtype=np.int64)
    gone = np.array([False, True, False, False, False, False])
    usable = (free > 0) & ~gone
    assert consecutive_nodes(usable, free, 2, 1, gone).tolist() == [0, 2]
    assert consecutive_nodes(usable, free, 2, 1).tolist() == [4, 5]
