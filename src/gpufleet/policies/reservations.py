"""Advance reservations: nodes held for a window, for named users and accounts.

The ``Reservations`` gate tells the cycle, for each job, which nodes it may
use and which spans it must keep clear:

* a job outside a reservation may use its nodes only if it ends before the
  reservation starts (or starts after it ends);
* a job that names a reservation runs only on its nodes, only inside its
  window (it must end by the reservation's end), and only if its user or
  account is admitted; otherwise it waits with the reason ``Reservation``;
* a maintenance reservation admits nobody.

A reservation given as a GPU count holds whole nodes: the lowest-numbered
healthy nodes until their GPUs reach the count, which is deterministic and
keeps the held set compact.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpufleet.core.job import Job, Reservation
from gpufleet.core.plan import RESERVATION
from gpufleet.core.protocols import Access
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import BoolArray, ClusterState
from gpufleet.core.timeline import NEVER, Blocks


def reserved_nodes(state: ClusterState, res: Reservation) -> BoolArray:
    """The nodes ``res`` holds (unknown node names are ignored)."""
    mask = np.zeros(state.num_nodes, dtype=np.bool_)
    if res.nodes:
        mask[[state.index[n] for n in res.nodes if n in state.index]] = True
        return mask
    gpus = np.where(state.healthy, state.gpu_exists.sum(axis=1), 0)
    # The first node at which the running GPU count reaches the target closes the set.
    last = int(np.searchsorted(np.cumsum(gpus), res.gpus))
    mask[: last + 1] = gpus[: last + 1] > 0
    return mask


class Reservations:
    NAME: ClassVar[str] = "reservations"
    clocked: ClassVar[bool] = False  # it changes only at the starts and ends the snapshot names

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None
        self._masks: dict[str, BoolArray] = {}
        self._blocks: dict[str, Blocks] = {}

    def _reset(self, snapshot: Snapshot) -> None:
        if self._snapshot is not snapshot:
            self._snapshot = snapshot
            self._masks = {r.name: reserved_nodes(snapshot.state, r) for r in snapshot.reservations}
            self._blocks = {}

    def _blocks_except(self, snapshot: Snapshot, name: str) -> Blocks:
        """Blocks of every reservation but ``name`` ("" for none)."""
        blocks = self._blocks.get(name)
        if blocks is None:
            blocks = Blocks.none(snapshot.state.num_nodes)
            for r in snapshot.reservations:
                if r.name != name:
                    blocks.add(self._masks[r.name], r.start, r.end)
            self._blocks[name] = blocks
        return blocks

    def quiet(self, snapshot: Snapshot) -> bool:
        """With no reservation left, a job naming none may use its whole partition."""
        return not snapshot.reservations

    def access(self, snapshot: Snapshot, job: Job, partition_nodes: BoolArray, now: int) -> Access:
        self._reset(snapshot)
        if not job.reservation:
            return Access(partition_nodes, self._blocks_except(snapshot, ""))
        res = next((r for r in snapshot.reservations if r.name == job.reservation), None)
        if res is None or not res.admits(job) or now >= res.end:
            return Access(partition_nodes, Blocks.none(len(partition_nodes)), reason=RESERVATION)
        nodes = partition_nodes & self._masks[res.name]
        blocks = self._blocks_except(snapshot, res.name).copy()
        blocks.add(nodes, res.end, NEVER)  # the job must end inside the window
        return Access(nodes, blocks, not_before=res.start)
