"""Which nodes Slurm's select plugin gives a job: runs of consecutive nodes.

Slurm's ``select/cons_tres`` (without a topology plugin, ``LLN`` or
``pack_serial_at_end``) does not rank nodes one by one. It cuts the nodes a
job can use into runs of consecutive node indices (the order of
``slurm.conf``) and then, until the job has its nodes:

* takes the best run: one that holds the rest of the job (enough nodes and
  CPUs) beats one that does not; among those that hold it, the fewest free
  CPUs in all; among those that do not, the most (which may displace one
  that holds it, as Slurm's loop allows); the first run on ties;
* when one node is still needed, the node of that run with the fewest free
  CPUs that holds the job's CPUs (the first on ties); else the run's nodes
  from its first on.

So a gang lands on a block of adjacent nodes that just holds it, rather than
on the first free nodes, and a small job on the busiest node (by CPUs) of
the smallest block it fits. Node weights, required nodes and contiguity
(``--contiguous``) are not modelled: every node weighs the same.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]


def runs(usable: BoolArray) -> list[tuple[int, int]]:
    """The runs of consecutive ``usable`` nodes, as (first, last + 1)."""
    edges = np.diff(np.concatenate(([0], usable.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def consecutive_nodes(
    usable: BoolArray, cpus: IntArray, count: int, need: int, removed: BoolArray | None = None
) -> IntArray:
    """The ``count`` nodes Slurm picks among ``usable`` (empty if there are too few).

    ``cpus``: each node's free CPUs (any unit); ``need``: the CPUs one task
    takes there. A usable node is one where a task fits. ``removed`` slots
    (nodes taken out of the cluster) are not there at all: the nodes on
    either side are adjacent, as in the configuration that no longer lists them.
    """
    if removed is not None and removed.any():
        present = np.flatnonzero(~removed)
        return present[consecutive_nodes(usable[present], cpus[present], count, need)]
    free = np.where(usable, cpus, 0).astype(np.int64)
    left = runs(usable)
    chosen: list[int] = []
    while left and len(chosen) < count:
        rest = count - len(chosen)
        best, best_cpus, best_holds = -1, 0, False
        for i, (a, b) in enumerate(left):
            total = int(free[a:b].sum())
            holds = b - a >= rest and total >= rest * need
            if (
                best < 0
                or (holds and not best_holds)
                or (holds and total < best_cpus)
                or (not holds and total > best_cpus)
            ):
                best, best_cpus, best_holds = i, total, holds
        a, b = left.pop(best)
        if rest == 1:
            fits = np.flatnonzero(free[a:b] >= need)
            if len(fits):
                chosen.append(a + int(fits[np.argmin(free[a:b][fits])]))
                continue
        chosen.extend(range(a, min(b, a + rest)))
    if len(chosen) < count:
        return np.empty(0, dtype=np.int64)
    return np.array(sorted(chosen), dtype=np.int64)
