"""What one scheduling cycle decides: starts, preemptions, planned starts and reasons."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

from gpufleet.core.job import PreemptMode
from gpufleet.core.state import Assignment

# Slurm's pending reasons used by the cycle itself; plugins return others.
PRIORITY = "Priority"
RESOURCES = "Resources"
DEPENDENCY = "Dependency"
HELD = "JobHeldUser"
NODE_NOT_AVAIL = "ReqNodeNotAvail"
INVALID_QOS = "InvalidQOS"
INVALID_PARTITION = "InvalidPartition"
RESERVATION = "Reservation"
BEGIN_TIME = "BeginTime"


@dataclass(frozen=True)
class Preemption:
    """One victim of the plan: signal it, wait ``grace_s``, then requeue or cancel."""

    job_id: str
    mode: PreemptMode
    grace_s: int
    for_job: str


Layout = tuple[tuple[str, int], ...] | None
"""A GPU's MIG layout as ``GPU.mig`` holds it: (profile, start slot) pairs, None for MIG off."""


@dataclass(frozen=True)
class Relayout:
    """A new MIG layout for GPU ``gpu`` of node ``node`` (an index into the state)."""

    node: int
    gpu: int
    layout: Layout


@dataclass(frozen=True, eq=False)
class Ranked:
    """The ordering's priority of each job a cycle ranked: ids and priorities, in the same
    order. Arrays, so that the cycle does no Python work per job; ``of`` builds its
    lookup the first time someone asks."""

    ids: npt.NDArray[np.object_]
    priorities: npt.NDArray[np.float64]

    @cached_property
    def _by_id(self) -> dict[str, float]:
        return dict(zip(self.ids.tolist(), self.priorities.tolist(), strict=True))

    def of(self, job_id: str) -> float | None:
        """The job's priority; None for a job the cycle did not rank."""
        return self._by_id.get(job_id)


@dataclass
class Plan:
    """What the cycle decided. Job ids index everything.

    ``starts`` maps a job to its exact placement; ``expected_start`` maps a
    job that waits to its planned start (backfill's reservation for it), and
    ``expected_nodes`` to the nodes planned; ``reasons`` gives
    every job left pending its Slurm reason (but those beyond the profile's
    ``queue_depth``, which keep their last one). ``backfilled`` says the cycle
    ran a backfill pass (``Backfill.runs_at``). ``clocked`` is False when a
    cycle on the same snapshot at a later time would decide the same (no
    plugin reads the clock, no planned start was cut off by the horizon, no
    backfill pass was due later), so a driver may skip a periodic cycle while
    nothing happens; when it is True, ``wake`` is the first time the clock
    alone may change a decision (None: any time), so a driver may skip one
    before then too. ``relayouts`` are MIG layout changes for idle GPUs
    (``Repartitioner``), for the driver to carry out. ``ranked`` holds the
    ordering's priorities of the jobs it ranked: every pending job but those
    the cycle stopped before ranking (held, before their begin time, waiting on
    a dependency, of an unknown QoS or partition). ``stats`` are diagnostics:
    timings in seconds and counters, for drivers to record.
    """

    starts: dict[str, list[Assignment]] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)
    expected_start: dict[str, int] = field(default_factory=dict)
    expected_nodes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    clocked: bool = False
    wake: int | None = None
    cut: tuple[float, int, str] | None = None
    """When the queue depth cut the queue: the last job the walk considered, as its sort
    key (minus priority, submit time, id); None when every job was considered."""
    considered: tuple[str, ...] = ()
    """The jobs the walk considered, in order (``run_cycle``'s ``settled``)."""
    stats: dict[str, float] = field(default_factory=dict)
    backfilled: bool = False
    relayouts: list[Relayout] = field(default_factory=list)
    ranked: Ranked | None = field(default=None, compare=False)
