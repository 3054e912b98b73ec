"""The cycle's extension points: one small protocol each, its contract in the docstring.

Placement's own points (``Filter``, ``Tier``, ``Scorer``, ``GpuPicker``) live
in ``core.placement``; these are the cycle's: who goes first (``Ordering``),
may it run (``Admission``, ``BulkAdmission``), where and from when
(``Gate``), whether a waiting job gets a planned start (``Backfill``),
whom to stop for it (``Preemptor``), and how to re-cut idle MIG GPUs for
what waits (``Repartitioner``). ``core.cycle`` says how they combine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from gpufleet.core.job import Job, RunningJob
from gpufleet.core.model import Request
from gpufleet.core.plan import Plan, Relayout
from gpufleet.core.snapshot import FloatArray, ObjectArray, QueueView, Snapshot, Tally
from gpufleet.core.state import BoolArray, ClusterState
from gpufleet.core.timeline import Blocks, WillRun


class Ordering(Protocol):
    """Who goes first. Exactly one ordering is active per profile.

    Return one priority per job in ``pending`` (aligned), higher first; the
    cycle breaks ties by submit time, then job id. Must be pure and
    deterministic; may read anything in the snapshot.
    """

    NAME: ClassVar[str]

    def priorities(self, snapshot: Snapshot, pending: Sequence[Job], now: int) -> FloatArray: ...


class Admission(Protocol):
    """May ``job`` run now, as far as limits go? Return "" or a Slurm pending reason.

    Reads the job, the snapshot's definitions and the tally; pure. Plugins
    combine in order: the first reason wins.
    """

    def admit(self, snapshot: Snapshot, job: Job, tally: Tally) -> str: ...


@runtime_checkable
class BulkAdmission(Protocol):
    """An ``Admission`` that can also judge many jobs at once.

    ``admit_all`` returns, aligned with ``queue``, the reason ``admit`` would
    give each job under this tally ("" to admit), as an object array. Pure.
    The cycle uses it to settle runs of jobs that change nothing.
    """

    def admit(self, snapshot: Snapshot, job: Job, tally: Tally) -> str: ...

    def admit_all(self, snapshot: Snapshot, queue: QueueView, tally: Tally) -> ObjectArray: ...


@dataclass(frozen=True)
class Access:
    """Where and from when a job may run: nodes, blocks to respect, earliest start.

    A non-empty ``reason`` keeps the job pending regardless.
    """

    nodes: BoolArray
    blocks: Blocks
    not_before: int = 0
    reason: str = ""


class Gate(Protocol):
    """Which nodes, and when, ``job`` may use (advance reservations).

    Given the nodes of the job's partition; returns them narrowed, with the
    blocks other reservations impose. Pure; may cache per snapshot.
    """

    def access(
        self, snapshot: Snapshot, job: Job, partition_nodes: BoolArray, now: int
    ) -> Access: ...


@runtime_checkable
class QuietGate(Protocol):
    """A ``Gate`` that can tell when it changes nothing for most jobs.

    ``quiet(snapshot)`` True promises that, for this snapshot, ``access``
    gives every job that names no reservation its partition's nodes, no
    blocks, no earliest start and no reason. The cycle then skips asking for
    those jobs and may judge them in bulk. Pure.
    """

    def access(
        self, snapshot: Snapshot, job: Job, partition_nodes: BoolArray, now: int
    ) -> Access: ...

    def quiet(self, snapshot: Snapshot) -> bool: ...


class Backfill(Protocol):
    """Whether a job that cannot start now gets a planned start, and how far ahead to look.

    ``planned`` is how many starts this cycle already planned, ``tested`` how
    many jobs it already tried to place. ``horizon`` is the latest start worth
    planning (Slurm's bf_window); ``resolution`` rounds holds down (bf_resolution);
    ``will_run`` estimates starts as Slurm's select plugin does (None: exactly).
    ``runs_at`` says whether a cycle at ``now`` backfills, given when the last
    cycle that did ran (``Snapshot.last_backfill``; None: never); a cycle that
    does not runs as if there were no backfill plugin (Slurm's main pass).
    ``own_pass``: backfill runs in passes apart from the main one, which the
    profile's queue depth does not bound (only ``may_test`` does).
    """

    resolution: int
    will_run: WillRun | None
    own_pass: bool

    def wants_planned_start(self, planned: int) -> bool: ...

    def horizon(self, now: int) -> int: ...

    def may_test(self, tested: int) -> bool: ...

    def runs_at(self, now: int, last_pass: int | None) -> bool: ...


Trial = Callable[[Sequence[RunningJob], BoolArray, Request], BoolArray]
"""The masked nodes one task of ``request`` would fit on once these victims let go.

Changes nothing: the victims are released tentatively and restored."""


@dataclass(frozen=True)
class PreemptionRequest:
    """What a preemption plugin sees for one job that could not be placed."""

    job: Job
    snapshot: Snapshot
    now: int
    nodes: BoolArray
    running: Sequence[RunningJob]
    state: ClusterState
    trial: Trial


class Preemptor(Protocol):
    """Which running jobs to preempt so that ``req.job`` fits; [] when none will do.

    Must only return jobs its policy allows, and should verify its choice
    with ``req.trial``; the cycle checks again before preempting anyone.
    """

    def victims(self, req: PreemptionRequest) -> Sequence[RunningJob]: ...


class Repartitioner(Protocol):
    """New MIG layouts for idle GPUs, to match what waits. At most one per profile.

    Called once per cycle after the walk, with the snapshot and the plan the
    walk made (its starts and pending reasons). Returns layout changes to
    begin now, for GPUs with nothing allocated on a usable node, that no
    start of ``plan`` uses and that are not in ``snapshot.reconfiguring``;
    each layout one the GPU's model supports (``core.mig``). Pure and
    deterministic. ``reconfigure_s`` is how long a change keeps a GPU from
    work, for drivers that model time (the simulator); the live controller
    waits for the node's report instead.
    """

    reconfigure_s: int

    def propose(self, snapshot: Snapshot, plan: Plan) -> Sequence[Relayout]: ...
