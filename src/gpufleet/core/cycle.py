"""The scheduling cycle: who runs first, and when.

``run_cycle(snapshot, profile, now) -> Plan`` walks the pending jobs in the
order the profile's ``Ordering`` gives (ties: earlier submit, then lower job
id) and, for each job:

1. **May it run?** A hold, a begin time still ahead, unmet dependencies,
   every ``Admission`` plugin (QoS and partition limits), and the ``Gate``
   (partition nodes, advance reservations) may keep it pending with a Slurm
   reason.
2. **Now?** The placer (mode ``now``) tries to place it on the nodes it may
   use (partition, constraints) without overlapping any planned start or
   reservation block.
3. **Else preempt?** The ``Preemption`` plugin may pick victims; the cycle
   checks with a tentative release that the job then fits, or preempts nobody.
4. **Else plan its start.** The ``Backfill`` plugin decides whether the job
   gets a planned start (``Plan.expected_start``, its nodes from the
   ``Timeline``; Slurm's backfill reservation). Lower-priority jobs may start
   now only where and while they overlap no planned start.

Without a backfill plugin the queue is strict: once a job of a partition
waits for resources, no later job of that partition starts. So is a cycle
the plugin does not run in (``Backfill.runs_at``: Slurm's main scheduler
between backfill passes); ``Plan.backfilled`` says which kind a cycle was.

Request shapes are classes: once a shape failed to fit for a job of length
L, every later job of that shape (same partition, reservation and node
constraints) of length
L or more fails too, because capacity only shrinks and planned starts only
grow during a cycle (Slurm skips such jobs the same way). A preemption frees
capacity and so forgets these failures.

Most jobs of a large queue change nothing: a limit keeps them, or their
shape already failed and the start is planned. So the walk takes the queue
in windows: ``BulkAdmission`` plugins judge a window's jobs at once and a
compiled pass (``core.walk``) gives reasons, tests and plans starts up to the
first job that might change more (start, preempt, ask a gate), which is
considered alone. The plan is exactly the job-by-job walk's. The
profile's ``CycleCache`` keeps what each job fixes across cycles, by object
identity, so a cycle after a few arrivals reads columns instead of jobs.

The cycle never changes the snapshot: every allocation goes through a
journal that is rolled back before the plan is returned. After the walk, a
profile's ``Repartitioner`` may add MIG layout changes for idle GPUs to the
plan (``Plan.relayouts``), judging by the jobs the walk left waiting.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from operator import attrgetter
from typing import Any, ClassVar, Literal, cast

import numpy as np
import numpy.typing as npt

from gpufleet.core import walk
from gpufleet.core.columns import Rows, grown, subset
from gpufleet.core.constraints import idle_nodes, node_mask
from gpufleet.core.fit import fit_need, fit_state, model_mask
from gpufleet.core.job import Job, Partition, RunningJob, gpu_milli_equivalent
from gpufleet.core.model import Request
from gpufleet.core.order import leading
from gpufleet.core.placement import Mode, PlacementContext, PlacementProfile, Placer
from gpufleet.core.plan import (
    BEGIN_TIME,
    DEPENDENCY,
    HELD,
    INVALID_PARTITION,
    INVALID_QOS,
    NODE_NOT_AVAIL,
    PRIORITY,
    RESERVATION,
    RESOURCES,
    Plan,
    Preemption,
    Ranked,
)
from gpufleet.core.protocols import (
    Access,
    Admission,
    Backfill,
    BulkAdmission,
    Gate,
    Ordering,
    PreemptionRequest,
    Preemptor,
    Repartitioner,
)
from gpufleet.core.snapshot import FloatArray, ObjectArray, QueueView, Snapshot, Tally
from gpufleet.core.state import Assignment, BoolArray, ClusterState, IntArray, OverAllocation
from gpufleet.core.timeline import (
    NEVER,
    NO_RELEASES,
    Blocks,
    PlannedStart,
    RunningEvents,
    Timeline,
)
from gpufleet.core.walk import (
    CUT_AT,
    CUT_UNKNOWN,
    PLANNED,
    ROOM,
    TESTED,
    TIMES,
    compact,
    walk_run,
)

__all__ = [  # Plan and Snapshot too: callers of run_cycle import them from here
    "CycleCache",
    "Journal",
    "NodeMask",
    "Plan",
    "SchedulingProfile",
    "Snapshot",
    "beyond_cut",
    "gpu_hours_at_risk",
    "partition_nodes",
    "queue_order",
    "run_cycle",
]


Constraints = tuple[tuple[str, ...], tuple[str, ...], str, bool]
"""``Job.constraints``: nodelist, exclude, constraint, exclusive."""
_PROMISE = "promised:"
"""Timeline key prefix of a promised room (not a job id the drivers make)."""
NodeChoice = tuple[tuple[str, ...], tuple[str, ...], str]
"""The constraints that narrow a job's nodes: nodelist, exclude, constraint."""
ShapeKey = tuple[Request, str, str, Constraints]
"""A request shape: request, partition, reservation, constraints (see ``_Shape``)."""


def _has_deps(job: Job) -> bool:
    return bool(job.dependencies)


def _may_stop(job: Job) -> bool:
    """Whether the job is held or names dependencies (``_static_reasons``)."""
    return job.hold or bool(job.dependencies)


def _runs_exclusive(r: RunningJob) -> bool:
    return r.job.exclusive


@dataclass
class CycleCache:
    """What queued and running jobs fix, kept across cycles by identity (``core.columns``).

    It saves work only: a cycle's plan is the same with a fresh cache.
    """

    pending: Rows[Job] = field(default_factory=Rows)
    running: RunningEvents = field(default_factory=RunningEvents)
    idle_fits: dict[tuple[Request, bytes, bytes], bool] = field(default_factory=dict)
    """Whether a request fits nodes of the idle cluster, by request, nodes and their health
    (see ``_Cycle._fits_idle``)."""
    task_needs: dict[Request, tuple[IntArray, BoolArray]] = field(default_factory=dict)
    """``Timeline.task_needs`` by request."""
    shape_of: tuple[ClusterState, int] | None = None
    """The state and epoch that ``idle_fits`` and ``task_needs`` hold for."""
    facts: ShapeFacts = field(default_factory=lambda: ShapeFacts())
    """What the walk reads of each request shape (see ``ShapeFacts``)."""
    cut: tuple[float, int] | None = None
    """The last cycle's cut by the queue depth (``Plan.cut`` but the id): where the next
    cycle's first jobs likely end (``queue_order``'s ``near``)."""

    def shaped(self, state: ClusterState, partitions: Mapping[str, Partition], fixed: bool) -> bool:
        """Forget what the state's shape fixed if this is another state, or another shape;
        and the shape facts too if the health or the partitions changed, or they are
        not ``fixed`` (placement filters may read more of the state). True when nothing
        was forgotten: the cluster is the last cycle's but for its allocations."""
        kept = True
        if self.shape_of != (state, state.epoch):  # the same state object, in the same shape
            self.idle_fits.clear()
            self.task_needs.clear()
            self.shape_of = (state, state.epoch)
            self.facts, kept = ShapeFacts(), False
        of = (state.healthy.tobytes(), dict(partitions))
        if not fixed or self.facts.of != of:
            self.facts, kept = ShapeFacts(of), False
        return kept


@dataclass
class ShapeFacts:
    """Per request shape, what the walk reads that the cluster's shape, its health and
    the partitions fix: the shape's nodes, whether it never fits them, and (but MIG)
    what the compiled fit and node times read of its request. Rows by shape, kept
    across cycles while those facts stay (``CycleCache.shaped``), each column grown
    in place (``core.columns``), since a backlog's windows ask for the same few shapes.
    """

    of: tuple[bytes, dict[str, Partition]] | None = None
    index: dict[ShapeKey, int] = field(default_factory=dict)
    columns: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    room: dict[str, npt.NDArray[Any]] = field(default_factory=dict)

    NAMES: ClassVar[tuple[str, ...]] = (
        "nodes", "never", "plain", "fit_needs", "models", "needs", "gpu_ok"
    )  # fmt: skip

    def rows(self, keys: list[ShapeKey], make: Callable[[ShapeKey], tuple[Any, ...]]) -> IntArray:
        """The row of each of ``keys`` (distinct), made by ``make`` (one array per name)
        for the keys not seen yet."""
        fresh = [k for k in keys if k not in self.index]
        if fresh:
            made = [make(k) for k in fresh]
            for name, values in zip(self.NAMES, zip(*made, strict=True), strict=True):
                column, stacked = self.columns.get(name), np.stack(values)
                whole = stacked if column is None else grown(self.room, name, column, stacked)
                self.columns[name] = whole
            for k in fresh:
                self.index[k] = len(self.index)
        return np.array([self.index[k] for k in keys], dtype=np.int64)


@dataclass
class SchedulingProfile:
    """The plugins one cycle runs with, and the cache its cycles share.

    With ``estimates`` a job is expected to hold its nodes for
    ``Job.expected_runtime_s`` (a predictor's estimate, capped by the limit)
    instead of its time limit: backfill plans and fits jobs with it.
    """

    ordering: Ordering
    placement: PlacementProfile
    admission: Sequence[Admission] = ()
    gate: Gate | None = None
    backfill: Backfill | None = None
    preemption: Preemptor | None = None
    repartition: Repartitioner | None = None
    estimates: bool = False
    queue_depth: int = 0
    """At most this many jobs considered per cycle, highest priority first (Slurm's
    default_queue_depth); 0: every job. The plan gives the others no reason: they keep
    the last one a cycle gave them."""
    cache: CycleCache = field(default_factory=CycleCache, repr=False, compare=False)

    def clocked(self) -> bool:
        """Whether a plugin's answer may change while only the clock moves.

        A plugin says it has no such dependence with ``clocked = False``; one
        that does not say is taken to have one. Times the snapshot names
        (reservation starts and ends, begin times) do not count: drivers
        treat them as events. With ``estimates`` runs pass their estimated
        ends as the clock moves, and the book expects them anew.
        """
        return self.estimates or any(getattr(p, "clocked", True) for p in self._plugins())

    def clock_moves_only_the_order(self) -> bool:
        """Whether the ordering is the only plugin whose answer may change while only the
        clock moves (see ``clocked``)."""
        others = self._plugins()[1:]
        return not self.estimates and not any(getattr(p, "clocked", True) for p in others)

    def _plugins(self) -> list[object]:
        """The plugins, the ordering first."""
        optional = (self.gate, self.backfill, self.preemption, self.repartition)
        return [self.ordering, *self.admission, *(p for p in optional if p is not None)]

    def wake(self, now: int) -> int | None:
        """The first time after ``now`` at which a plugin's answer may change while only
        the clock moves; None when that may be any time.

        A clocked plugin tells with ``next_change(now) -> int | None`` (None: any
        time); one that does not say may change at any time.
        """
        if self.estimates:
            return None
        times = []
        for p in self._plugins():
            if not getattr(p, "clocked", True):
                continue
            next_change = getattr(p, "next_change", None)
            at = next_change(now) if next_change is not None else None
            if at is None:
                return None
            times.append(at)
        return min(times, default=None)


class Journal:
    """Tentative allocations and releases on a state, undone in reverse order."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.log: list[tuple[Literal[1, -1], Assignment]] = []

    def allocate(self, a: Assignment) -> None:
        self.state.allocate(a)
        self.log.append((1, a))

    def release(self, a: Assignment) -> None:
        self.state.release(a)
        self.log.append((-1, a))

    def mark(self) -> int:
        return len(self.log)

    def rollback(self, mark: int = 0) -> None:
        while len(self.log) > mark:
            sign, a = self.log.pop()
            if sign > 0:
                self.state.release(a)
            else:
                self.state.allocate(a)


class NodeMask:
    """A placement filter that admits only the nodes of a mask."""

    def __init__(self, mask: BoolArray) -> None:
        self.mask = mask

    def filter(self, ctx: PlacementContext) -> BoolArray:
        return self.mask


def partition_nodes(state: ClusterState, p: Partition) -> BoolArray:
    """The partition's nodes: named ones, those of its pools, or all when neither is given."""
    if not p.nodes and not p.pools:
        return np.ones(state.num_nodes, dtype=np.bool_)
    mask = np.array([n.pool in p.pools for n in state.nodes], dtype=np.bool_)
    named = [state.index[name] for name in p.nodes if name in state.index]
    mask[named] = True
    return mask


def queue_order(
    priorities: FloatArray,
    pending: Sequence[Job],
    submit: IntArray | None = None,
    first: int = 0,
    near: tuple[float, int] | None = None,
) -> list[int]:
    """Indices of ``pending`` by priority (higher first), then submit time, then id.

    ``submit``, when given, is the jobs' submit times, already gathered.
    ``first`` > 0 returns only the first that many; ``near`` (minus priority, submit
    time) may guess where the first-th sorts, to find them faster (``leading``).
    """
    if submit is None:
        submit = np.fromiter((j.submit_time for j in pending), dtype=np.int64, count=len(pending))
    if first and 2 * first < len(pending):
        # Only jobs that may sort among the first few are sorted: those of a higher priority
        # than the first-th's, and of its priority those submitted no later than its.
        chosen = leading(-priorities, submit, first, *(near or (np.inf, 0)))
        inner = _sorted(priorities[chosen], subset(pending, chosen), submit[chosen], first)
        order: list[int] = chosen[np.asarray(inner, dtype=np.int64)].tolist()
        return order
    return _sorted(priorities, pending, submit, first)


def _sorted(
    priorities: FloatArray, pending: Sequence[Job], submit: IntArray, first: int
) -> list[int]:
    """``queue_order`` by sorting every job."""
    order = np.lexsort((submit, -priorities))
    p, t = priorities[order], submit[order]
    # Equal priority and submit time are rare: sort just those runs by id.
    same = np.flatnonzero((p[1:] == p[:-1]) & (t[1:] == t[:-1]))
    cut = min(first, len(order)) if first else len(order)
    runs = np.split(same, np.flatnonzero(np.diff(same) > 1) + 1) if len(same) else []
    runs = [run for run in runs if run[0] < cut]  # a run that starts before the cut, whole
    result: list[int] = order[: max(cut, int(runs[-1][-1]) + 2 if runs else 0)].tolist()
    for run in runs:
        lo, hi = int(run[0]), int(run[-1]) + 2
        result[lo:hi] = sorted(result[lo:hi], key=lambda i: id_order(pending[i].id))
    return result[:cut]


_NUMBERED = re.compile(r"(\d+)(?:_(\d+))?")


def id_order(job_id: str) -> tuple[int, int, int, str]:
    """How ids that tie on priority and submit time are ordered: a numbered job and its
    array's tasks (``28``, ``28_2``, ``28_10``) by number, then task index, as Slurm
    starts them; any other id after them, by its text."""
    m = _NUMBERED.fullmatch(job_id)
    if m is None:
        return (1, 0, 0, job_id)
    return (0, int(m[1]), int(m[2] or -1), "")


CALM = 8
"""A window that walked fewer jobs than this before a job it had to leave to
``_consider`` marks the walk as eventful: so many jobs are then considered alone."""
WINDOW = 128
"""The first window's length; it doubles while windows walk every job."""
_WORDS = np.array(["", PRIORITY, RESOURCES, NODE_NOT_AVAIL], dtype=object)
"""Reasons by ``core.walk``'s codes (its ``ADMISSION``: the admission plugins' own)."""


def _kinds_of(kind: IntArray, jobs: BoolArray) -> list[int]:
    """The kinds (indices into a window's shapes) of the ``jobs``, in order."""
    kinds: list[int] = np.flatnonzero(np.bincount(kind[jobs])).tolist()
    return kinds


def _first_refused(allows: Callable[[int], bool], have: int, most: int) -> int:
    """The first count from ``have`` on that ``allows`` refuses, or ``have + most + 1``:
    a window of ``most`` jobs adds at most that many. Counts only grow, and a count
    refused stays refused (a backfill limit), so a binary search finds it."""
    lo, hi = have, have + most + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if allows(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _known(queue: QueueView, attr: str, defined: Mapping[str, object]) -> BoolArray:
    """Whether each job's ``attr`` names something ``defined``."""
    codes, keys = queue.codes(attr)
    return np.array([k in defined for k in keys], dtype=np.bool_)[codes] if keys else codes > 0


def run_cycle(
    snapshot: Snapshot,
    profile: SchedulingProfile,
    now: int | None = None,
    settled: Plan | None = None,
) -> Plan:
    """Decide starts, preemptions, planned starts and pending reasons; see the module docstring.

    ``settled``: the last plan, when it started, stopped and deferred nobody and
    only the clock moved since (the driver knows; jobs may have arrived past the
    queue depth's cut). If the cluster is the one the profile's last cycle saw,
    the ordering is the only plugin that reads the clock and it still puts the
    same jobs first in the same order, the walk would start and stop nobody
    either: holds begin no earlier than they did and every window a job tries
    is later. The walk is then skipped: the plan keeps that plan's reasons and
    planned starts, and only the ordering wakes it (a start that the backfill
    window cut off is planned by the next walk).
    """
    cycle = _Cycle(snapshot, profile, snapshot.now if now is None else now)
    try:
        plan = cycle.run(settled)
    finally:
        cycle.journal.rollback()
    if profile.repartition is not None:  # on the snapshot's own state, the walk undone
        plan.relayouts = list(profile.repartition.propose(snapshot, plan))
    return plan


@dataclass
class _Shape:
    """Per (request, partition, reservation) facts found during one cycle."""

    failed_at: int = NEVER  # shortest time limit that failed to place now
    unfit: BoolArray | None = None  # nodes without room for it, found as a placement failed
    unplanned_at: int = NEVER  # shortest time limit that found no planned start in the window
    never: bool | None = None  # would not fit even on an idle cluster


def _where(
    nodelist: tuple[str, ...], exclude: tuple[str, ...], constraint: str
) -> NodeChoice | None:
    """The node choice of these constraints; None when they narrow nothing."""
    return (nodelist, exclude, constraint) if nodelist or exclude or constraint else None


def _covered(shape: _Shape, usable: BoolArray, gang: int) -> bool:
    """Whether a placement of the shape (of ``gang`` nodes) on the ``usable`` nodes fails,
    as the fit found too few of them with room when a placement of the shape last failed.

    Capacity only shrinks during a cycle (until a preemption or a victim's
    room frees some: ``_Cycle._forget_failures``), so a node without room
    stays without; with no profile filter a placement fails exactly when
    fewer nodes than its gang have room (members never share a node).
    """
    unfit = shape.unfit
    if unfit is None:
        return False
    return int((usable & ~unfit).sum()) < gang


class _Cycle:
    def __init__(self, snapshot: Snapshot, profile: SchedulingProfile, now: int) -> None:
        self.s = snapshot
        self.p = profile
        self.now = now
        self.state = snapshot.state
        self.journal = Journal(self.state)
        self.fitter = Placer(profile.placement)  # the built-in fit reads no filter
        self.plan = Plan()
        # How long a job is taken to hold its nodes: its limit, or its estimate.
        self.length_attr = "expected_runtime_s" if profile.estimates else "time_limit_s"
        cache = profile.cache
        # Whether the cluster is the last cycle's but for its allocations (see _unchanged).
        self.same_cluster = cache.shaped(
            self.state, snapshot.partitions, not profile.placement.filters
        )
        running_rows = cache.running.rows(snapshot.running)
        self.tally = Tally.of_running(cache.running, running_rows)
        bf = profile.backfill
        # A cycle between backfill passes is Slurm's main pass: as without backfill.
        self.backfill = bf if bf is not None and bf.runs_at(now, snapshot.last_backfill) else None
        self.plan.clocked = bf is not None and self.backfill is None  # the pass is due later
        self.plan.backfilled = self.backfill is not None
        resolution = self.backfill.resolution if self.backfill else 1
        will_run = self.backfill.will_run if self.backfill else None
        self.timeline = Timeline(
            self.state,
            now,
            resolution,
            snapshot.running,
            cache.running,
            will_run,
            running_rows,
            cache.task_needs,
        )
        # Nodes kept for planned starts and for exclusive jobs, per time span.
        self.planned = Blocks.none(self.state.num_nodes)
        self.shapes: dict[ShapeKey, _Shape] = {}
        self.partition_masks: dict[str, BoolArray] = {}
        self.constraint_masks: dict[NodeChoice, BoolArray] = {}
        # Keyed by partition and node choice; shares self.planned, so stays current.
        self.plain_access: dict[tuple[str, NodeChoice | None], Access] = {}
        self.signalled_for: defaultdict[str, list[RunningJob]] = defaultdict(list)
        self.promised = self._take_promised()
        if snapshot.signalled:
            for r in snapshot.running:
                if r.job.id in snapshot.signalled:
                    self.signalled_for[snapshot.signalled[r.job.id]].append(r)
        exclusive = cache.running.values("exclusive", _runs_exclusive, np.bool_)[running_rows]
        for i in np.flatnonzero(exclusive).tolist():  # nobody else on their nodes while they run
            r = snapshot.running[i]
            self._block_nodes(r.assignments, max(r.expected_end, now + 1))
        self.horizon_wake: int | None = None  # see _cut_off
        self.strict_blocked: set[str] = set()  # partitions stopped without backfill
        self.waiting: set[str] = set()  # partitions with a job waiting for resources
        self.tested = 0
        self.backfilled = 0
        self.planned_count = 0
        self.rooms: dict[Request, BoolArray] = {}  # nodes with room now; until a start
        # What a runtime-checkable protocol checks, without its cost in every cycle.
        self.bulk = all(callable(getattr(a, "admit_all", None)) for a in profile.admission)
        gate = profile.gate
        # A gate that is quiet for this snapshot is asked only about jobs naming a reservation.
        quiet = getattr(gate, "quiet", None)  # a QuietGate's
        self.quiet_gate = gate is None or (callable(quiet) and bool(quiet(snapshot)))

    # -- the walk ------------------------------------------------------------
    def run(self, settled: Plan | None = None) -> Plan:
        s, plan, table = self.s, self.plan, self.p.cache.pending
        rows = table.rows(s.pending)
        stopped, reasons = self._static_reasons(QueueView(table, rows))
        if len(stopped):
            ids = table.values("id", attrgetter("id"), object)[rows[stopped]]
            plan.reasons.update(zip(ids.tolist(), reasons, strict=True))
            keep = np.setdiff1d(np.arange(len(rows)), stopped, assume_unique=True)
            rows = rows[keep]
            candidates = subset(s.pending, keep)
        else:
            candidates = s.pending
        if candidates:
            prio = np.asarray(self.p.ordering.priorities(s, candidates, self.now), np.float64)
            plan.ranked = Ranked(table.values("id", attrgetter("id"), object)[rows], prio)
            submit = table.values("submit_time", attrgetter("submit_time"))[rows]
            # A backfill pass of its own is Slurm's backfill thread: bf_max_job_test
            # bounds it, not the main scheduler's default_queue_depth.
            own_pass = self.backfill is not None and self.backfill.own_pass
            depth = 0 if own_pass else self.p.queue_depth
            cache = self.p.cache
            order = queue_order(prio, candidates, submit, depth, cache.cut)
            if depth and len(candidates) > depth:
                plan.stats["beyond_depth"] = float(len(candidates) - depth)
                last = order[-1]
                plan.cut = (-float(prio[last]), int(submit[last]), candidates[last].id)
                cache.cut = plan.cut[:2]
            walked = rows[order]
            ids = table.values("id", attrgetter("id"), object)[walked].tolist()
            plan.considered = tuple(ids)
            if settled is not None and self._unchanged(settled):
                plan.reasons.update((i, settled.reasons[i]) for i in ids if i in settled.reasons)
                plan.expected_start.update(settled.expected_start)
                plan.expected_nodes.update(settled.expected_nodes)
            else:
                self._walk(walked)
        if not plan.clocked:  # else the walk's own reasons wake it any time
            wakes: list[int | None] = [] if self.horizon_wake is None else [self.horizon_wake]
            if self.p.clocked():
                wakes.append(self.p.wake(self.now))
            if wakes:
                plan.clocked = True
                plan.wake = None if None in wakes else min(w for w in wakes if w is not None)
        plan.stats.update(
            tested=float(self.tested),
            started=float(len(plan.starts)),
            backfilled=float(self.backfilled),
            planned=float(len(plan.expected_start)),
            preempted=float(len(plan.preemptions)),
        )
        return plan

    def _unchanged(self, settled: Plan) -> bool:
        """Whether this cycle's walk would start and stop nobody, as the ``settled`` plan
        (see ``run_cycle``) did: it considered the same jobs in the same order, on the
        same cluster (this profile's last cycle's: no node came, left, failed or
        changed partition), in the same kind of pass, and only the ordering reads the
        clock."""
        return (
            self.same_cluster
            and settled.considered == self.plan.considered
            and settled.backfilled == self.plan.backfilled
            and self.p.clock_moves_only_the_order()
        )

    def _static_reasons(self, queue: QueueView) -> tuple[IntArray, list[str]]:
        """The jobs held, of an unknown QoS or partition, not yet at their begin time, or
        waiting on a job still queued or running (positions in ``queue``), and each one's
        reason, in that precedence.

        Only the jobs held, with a begin time ahead or dependencies, or of a QoS or
        partition the snapshot lacks, can be stopped: columns over every row find them.
        """
        s, table, rows = self.s, queue.table, queue.rows
        begin = table.values("begin_time", attrgetter("begin_time"))[rows]
        suspect = table.values("may_stop", _may_stop, np.bool_)[rows] | (begin > self.now)
        for attr, defined in (("qos", s.qos), ("partition", s.partitions)):
            codes, keys = table.codes(attr, attrgetter(attr))
            unknown = np.array([k not in defined for k in keys], dtype=np.bool_)
            if unknown.any():
                suspect |= unknown[codes[rows]]
        at = np.flatnonzero(suspect)
        if not len(at):
            return at, []
        stopped, reasons = self._judge_static(QueueView(table, rows[at]))
        return at[stopped], reasons

    def _judge_static(self, queue: QueueView) -> tuple[IntArray, list[str]]:
        """``_static_reasons`` over the jobs of ``queue``."""
        s = self.s
        jobs = self.p.cache.pending.objects
        dependent = np.zeros(len(queue), dtype=np.bool_)
        deps = np.flatnonzero(
            queue.table.values("has_dependencies", _has_deps, np.bool_)[queue.rows]
        )
        if len(deps):
            in_queue = {j.id for j in s.pending} | {r.job.id for r in s.running}
            for i in deps.tolist():
                dependent[i] = any(d in in_queue for d in jobs[queue.rows[i]].dependencies)
        checks = (
            (HELD, queue.column("hold", np.bool_)),
            (INVALID_QOS, ~_known(queue, "qos", s.qos)),
            (INVALID_PARTITION, ~_known(queue, "partition", s.partitions)),
            (BEGIN_TIME, queue.column("begin_time") > self.now),
            (DEPENDENCY, dependent),
        )
        stopped = np.flatnonzero(np.logical_or.reduce([hit for _, hit in checks]))
        if not len(stopped):
            return stopped, []
        said = np.select([hit[stopped] for _, hit in checks], [r for r, _ in checks], "")
        return stopped, said.tolist()

    def _walk(self, queue: IntArray) -> None:
        """Consider the jobs at rows ``queue`` in order.

        Runs of jobs that change nothing but the walk's memos are walked in
        windows, compiled (``_walk_window``), up to the first job that might
        change more (start, preempt, ask a plugin), which is considered
        alone. A window stopped within ``CALM`` jobs marks the walk as
        eventful there, so the next ``CALM`` jobs are considered alone too;
        windows double while they walk every job.
        """
        table = self.p.cache.pending
        jobs, view = table.objects, QueueView(table, queue)
        if not self.bulk:  # the admission plugins judge one job at a time
            for row in queue.tolist():
                self._consider(jobs[row])
            return
        pos, alone, window = 0, 0, WINDOW
        while pos < len(queue):
            if alone:
                self._consider(jobs[queue[pos]])
                pos, alone = pos + 1, alone - 1
                continue
            part = view.window(pos, pos + window)
            walked = self._walk_window(part)
            pos += walked
            if walked == len(part):
                window *= 2
                continue
            self._consider(jobs[queue[pos]])
            pos += 1
            alone = CALM if walked < CALM else 0
            window = max(WINDOW, 2 * walked)

    def _walk_window(self, queue: QueueView) -> int:
        """Walk the jobs of ``queue`` as ``_consider`` would (``core.walk``), up to the
        first one it must consider alone; returns how many were walked."""
        n, bf = len(queue), self.backfill
        said = np.full(n, "", dtype=object)
        for a in reversed(self.p.admission):  # the first plugin's reason wins
            found = cast(BulkAdmission, a).admit_all(self.s, queue, self.tally)
            said = np.where(found != "", found, said)
        admitted = said == ""
        codes, keys = queue.codes("request", "partition", "reservation", "constraints")
        kinds, kind = compact(codes)
        shape_keys = [keys[k] for k in kinds.tolist()]
        part_codes, part_keys = queue.codes("partition")
        parts, part = compact(part_codes)
        names = [part_keys[p] for p in parts.tolist()]
        blocked = np.array([p in self.strict_blocked for p in names], dtype=np.bool_)
        exclusive = np.array([k[3][3] for k in shape_keys], dtype=np.bool_)
        alone = admitted & self._alone(queue, exclusive[kind])
        requests = [k[0] for k in shape_keys]
        shapes = [self.shapes.setdefault(k, _Shape()) for k in shape_keys]
        has_unfit = np.array([shape.unfit is not None for shape in shapes], dtype=np.bool_)
        failed = np.array([shape.failed_at for shape in shapes], dtype=np.int64)
        unplanned = np.array([shape.unplanned_at for shape in shapes], dtype=np.int64)
        facts = self.p.cache.facts
        f = facts.rows(shape_keys, self._shape_facts)
        columns = facts.columns
        nodes, never, plain_fit = columns["nodes"][f], columns["never"][f], columns["plain"][f]
        fit_needs, models = columns["fit_needs"][f], columns["models"][f]
        needs, gpu_ok = columns["needs"][f], columns["gpu_ok"][f]
        width = self.state.num_nodes
        unfit = np.zeros((len(shapes), width), dtype=np.bool_)
        room = np.zeros((len(shapes), width), dtype=np.bool_)
        has_room = np.zeros(len(shapes), dtype=np.bool_)
        for i in _kinds_of(kind, admitted & ~alone & ~blocked[part]):
            if shapes[i].unfit is not None:
                unfit[i] = shapes[i].unfit
            if requests[i] in self.rooms:
                room[i], has_room[i] = self.rooms[requests[i]], True
        # The pass finds the room of shapes but MIG itself.
        fitted = plain_fit & ~has_room
        times = np.zeros((len(shapes), width), dtype=np.int64)
        has_times = np.zeros(len(shapes), dtype=np.bool_)
        # The pass computes the node times of planned starts, but with MIG or an estimate.
        releases, computed = NO_RELEASES, np.zeros(len(shapes), dtype=np.bool_)
        if bf is not None and self.timeline.will_run is None:
            releases, computed = self.timeline.releases(), plain_fit
        waiting = np.array([p in self.waiting for p in names], dtype=np.bool_)
        counters = np.array([self.tested, self.planned_count, bool(self.waiting), 0, NEVER])
        limits = np.zeros(2, dtype=np.int64)
        if bf is not None:
            limits[0] = _first_refused(bf.may_test, self.tested, n)
            limits[1] = _first_refused(bf.wants_planned_start, self.planned_count, n)
        flags = np.array(
            [
                bf is not None,
                self.timeline.will_run is None,
                not self.p.placement.filters,
                self.p.preemption is not None,
            ]
        )
        length = queue.column(self.length_attr)
        gang = np.array([r.nodes for r in requests], dtype=np.int64)
        reason = np.zeros(n, dtype=np.int64)
        start = np.full(n, -2, dtype=np.int64)
        chosen = np.empty(int(gang[kind].sum()), dtype=np.int64)
        horizon = bf.horizon(self.now) if bf is not None else NEVER
        blocks = self.planned
        at = written = 0
        while True:
            at, why, need, written, blocks.node, blocks.start, blocks.end = walk_run(
                at, alone, admitted, kind, part, length, gang, never, nodes,
                failed, unplanned, unfit, has_unfit, room, has_room, fit_needs, models, fitted,
                fit_state(self.state), times, has_times, needs, gpu_ok, computed, releases,
                waiting, blocked, counters, limits, flags,
                self.now, horizon, self.timeline.resolution, blocks.node, blocks.start, blocks.end,
                reason, start, chosen, written,
            )  # fmt: skip
            if why not in (ROOM, TIMES):
                break
            # What the rest of the window may need of the same kind, found at once.
            rest = np.zeros(n, dtype=np.bool_)
            rest[at:] = admitted[at:] & ~alone[at:] & ~blocked[part[at:]]
            if why == ROOM:  # without backfill a partition's first test that fails blocks it
                rest &= (length < failed[kind]) & ~has_room[kind]
                for k in _kinds_of(kind, rest) if bf is not None else [need]:
                    room[k], has_room[k] = self._room(requests[k]), True
            else:
                rest &= (length < unplanned[kind]) & ~has_times[kind]
                several = limits[1] - counters[PLANNED] > 1
                for k in _kinds_of(kind, rest) if several else [need]:
                    times[k], has_times[k] = self.timeline.times_on(requests[k], nodes[k]), True
        for i in np.flatnonzero(fitted & has_room).tolist():  # kept until a start
            self.rooms[requests[i]] = room[i]
        w = slice(0, at)
        ids = queue.column("id", object)[w]
        self._walked(ids, said[w], reason[w], start[w], gang[kind[w]], chosen[:written])
        for i, shape in enumerate(shapes):
            shape.failed_at, shape.unplanned_at = int(failed[i]), int(unplanned[i])
            if has_unfit[i]:
                shape.unfit = unfit[i]
        self.waiting.update(p for p, yes in zip(names, waiting.tolist(), strict=True) if yes)
        self.strict_blocked.update(p for p, yes in zip(names, blocked.tolist(), strict=True) if yes)
        self.tested, self.planned_count = int(counters[TESTED]), int(counters[PLANNED])
        if counters[CUT_UNKNOWN]:
            self._cut_off(None, horizon)
        if counters[CUT_AT] < NEVER:
            self._cut_off(int(counters[CUT_AT]), horizon)
        return int(at)

    def _alone(self, queue: QueueView, exclusive: BoolArray) -> BoolArray:
        """Which jobs of ``queue`` only ``_consider`` may judge (once admitted): exclusive
        ones, those a gate answers, and those with victims' room of their own."""
        if not self.quiet_gate:
            return np.ones(len(queue), dtype=np.bool_)
        alone = exclusive
        if self.p.gate is not None:
            alone = alone | (queue.column("reservation", object) != "")
        if self.signalled_for or self.promised:
            ids = queue.column("id", object).tolist()
            own = [i in self.signalled_for or i in self.promised for i in ids]
            alone = alone | np.array(own, dtype=np.bool_)
        return alone

    def _shape_facts(self, key: ShapeKey) -> tuple[Any, ...]:
        """A shape's row of ``ShapeFacts``: its nodes, whether it never fits them, whether
        it is without MIG, and but with MIG its ``fit_need``, ``model_mask`` and
        ``Timeline.task_needs``."""
        r = key[0]
        nodes = self._nodes(key[1], _where(*key[3][:3]))
        never = np.bool_(not self._fits_idle(r, nodes))
        if r.mig_profile:
            return (
                nodes, never, np.False_, np.zeros(6, dtype=np.int64),
                np.zeros(len(self.state.models) + 1, dtype=np.bool_), np.zeros(5, dtype=np.int64),
                np.zeros(self.state.gpu_milli_free.shape, dtype=np.bool_),
            )  # fmt: skip
        need, gpu_ok = self.timeline.task_needs(r)
        return nodes, never, np.True_, fit_need(r), model_mask(self.state, r), need, gpu_ok

    def _walked(
        self,
        ids: ObjectArray,
        said: ObjectArray,
        reason: IntArray,
        start: IntArray,
        gangs: IntArray,
        nodes: IntArray,
    ) -> None:
        """Record what ``walk_run`` found for the jobs ``ids`` (of ``gangs`` nodes): their
        reasons (``said``: the admission plugins'), planned starts, and the planned
        ones' ``nodes`` one after another."""
        words = np.where(reason == walk.ADMISSION, said, _WORDS[reason])
        self.plan.reasons.update(zip(ids.tolist(), words.tolist(), strict=True))
        planned = np.flatnonzero(start >= 0)
        planned_ids = ids[planned].tolist()
        self.plan.expected_start.update(zip(planned_ids, start[planned].tolist(), strict=True))
        ends = np.cumsum(gangs[planned]).tolist()
        flat = nodes.tolist()
        chosen = (tuple(flat[lo:hi]) for lo, hi in zip([0, *ends], ends, strict=False))
        self.plan.expected_nodes.update(zip(planned_ids, chosen, strict=True))

    def _consider(self, job: Job) -> None:
        plan = self.plan
        for admission in self.p.admission:
            reason = admission.admit(self.s, job, self.tally)
            if reason:
                plan.reasons[job.id] = reason
                return
        # A job's own room (its victims', or promised) is no one else's: a job ahead of it
        # that blocks the partition could not use it, so it does not keep the job out.
        blocked = job.partition in self.strict_blocked
        if blocked and job.id not in self.signalled_for and job.id not in self.promised:
            plan.reasons[job.id] = PRIORITY
            return
        access = self._access(job)
        if access.reason:
            plan.reasons[job.id] = access.reason
            return
        if self.now < access.not_before:
            plan.reasons[job.id] = RESERVATION
            return
        key = (job.request, job.partition, job.reservation, job.constraints)
        shape = self.shapes.get(key)
        if shape is None:
            shape = self.shapes[key] = _Shape()
        if shape.never is None:
            shape.never = not self._fits_idle(job.request, access.nodes)
        if shape.never:
            plan.reasons[job.id] = NODE_NOT_AVAIL
            return
        if self._start_in_victims_room(job, access):  # its own room: no shape memo applies
            return
        if blocked:
            plan.reasons[job.id] = PRIORITY
            return
        backfill = self.backfill
        length = self._length(job)
        if length < shape.failed_at and not (
            backfill and self.waiting and not backfill.may_test(self.tested)
        ):
            self.tested += 1
            usable = self._usable_now(job, access)
            if job.exclusive:
                usable = usable & idle_nodes(self.state)
            if not (self.p.preemption is None and _covered(shape, usable, job.request.nodes)):
                if self._start(job, usable, shape):
                    return
                if self._preempt(job, access):
                    self._forget_failures()  # victims freed room: retry every shape
                    for other in self.shapes.values():
                        other.failed_at = NEVER
                    return
            shape.failed_at = min(shape.failed_at, length)
        self._wait(job, access, shape)

    def _access(self, job: Job) -> Access:
        where = _where(job.nodelist, job.exclude, job.constraint)
        if self.p.gate is None or (self.quiet_gate and not job.reservation):
            return self._plain_access(job.partition, where)
        access = self.p.gate.access(self.s, job, self._nodes(job.partition, where), self.now)
        return replace(access, blocks=access.blocks.merged(self.planned))

    def _nodes(self, partition: str, where: NodeChoice | None) -> BoolArray:
        """The nodes of ``partition`` that the constraints ``where`` allow."""
        nodes = self.partition_masks.get(partition)
        if nodes is None:
            nodes = partition_nodes(self.state, self.s.partitions[partition])
            self.partition_masks[partition] = nodes
        if where is not None:
            mask = self.constraint_masks.get(where)
            if mask is None:
                mask = self.constraint_masks[where] = node_mask(self.state, *where)
            nodes = nodes & mask
        return nodes

    def _plain_access(self, partition: str, where: NodeChoice | None) -> Access:
        """Access without a gate's word: the nodes, around the cycle's planned starts."""
        access = self.plain_access.get((partition, where))
        if access is None:
            access = Access(self._nodes(partition, where), self.planned)
            self.plain_access[partition, where] = access
        return access

    def _placer(self, mask: BoolArray) -> Placer:
        pp = self.p.placement
        return Placer(replace(pp, filters=[*pp.filters, NodeMask(mask)]))

    def _fits_idle(self, r: Request, nodes: BoolArray) -> bool:
        """Whether ``r`` fits the ``nodes`` of the idle cluster.

        Without profile filters the fit reads only the request, the nodes'
        health and what the state's shape fixes (totals, models, MIG
        layouts: its ``epoch``), so answers are kept across cycles.
        """
        state, cache = self.state, self.p.cache
        if self.p.placement.filters:
            return self._test_idle(r, nodes)
        key = (r, nodes.tobytes(), state.healthy.tobytes())
        fits = cache.idle_fits.get(key)
        if fits is None:
            if len(cache.idle_fits) >= 4096:  # health changing often: keep it bounded
                cache.idle_fits.clear()
            fits = cache.idle_fits[key] = self._test_idle(r, nodes)
        return fits

    def _room(self, r: Request) -> BoolArray:
        """The nodes with room for one task of ``r`` now (the built-in fit, no filter)."""
        room = self.rooms.get(r)
        if room is None:
            room = self.rooms[r] = self.fitter.fit(self.state, r, Mode.NOW)[0]
        return room

    def _test_idle(self, r: Request, nodes: BoolArray) -> bool:
        ctx = self._placer(nodes).context(self.state, r, Mode.TEST)
        return int(ctx.feasible.sum()) >= r.nodes

    def _length(self, job: Job) -> int:
        return job.expected_runtime_s if self.p.estimates else job.time_limit_s

    def _usable_now(self, job: Job, access: Access) -> BoolArray:
        return access.nodes & access.blocks.usable(self.now, self._length(job))

    def _start(self, job: Job, usable: BoolArray, shape: _Shape) -> bool:
        """Place ``job`` now on the ``usable`` nodes."""
        r = job.request
        if _covered(shape, usable, r.nodes):
            return False
        if not self.p.placement.filters:
            # Then a placement succeeds exactly when enough usable nodes have room (a
            # gang's members take distinct nodes): a failure costs one fit, no placement.
            room = self._room(r)
            if int((room & usable).sum()) < r.nodes:
                shape.unfit = ~room
                return False
        placed = self._placer(usable).place(self.state, r)
        if placed is None:
            return False
        for a in placed:
            self.journal.log.append((1, a))  # the placer allocated it; undo at the end
        self._record_start(job, placed)
        return True

    def _start_in_victims_room(self, job: Job, access: Access) -> bool:
        """Place ``job`` where the victims already signalled for it will let go, or where
        they have let go (the room promised to it).

        Their room is the job's: no other job may use it, and the job takes
        it rather than new victims. The driver starts the job once they are gone.
        """
        victims = self.signalled_for.get(job.id)
        room = self.promised.get(job.id)
        if not victims and room is None:
            return False
        mark = self.journal.mark()
        for a in [a for v in victims or () for a in v.assignments] + list(room or ()):
            self.journal.release(a)
        usable = self._usable_now(job, access)
        if job.exclusive:
            usable = usable & idle_nodes(self.state)
        placed = self._placer(usable).place(self.state, job.request)
        if placed is None:
            self.journal.rollback(mark)
            return False
        for a in placed:
            self.journal.log.append((1, a))
        for v in victims or ():
            self.tally.add(v.job, -1)
            self.timeline.remove(v.job.id)
        if room is not None:
            self.timeline.remove(_PROMISE + job.id)
        self._forget_failures()  # what the job left of the room is free
        self._record_start(job, placed)
        return True

    def _forget_failures(self) -> None:
        """Capacity grew: a node where a placement failed may now fit it."""
        for shape in self.shapes.values():
            shape.unfit = None

    def _take_promised(self) -> dict[str, Sequence[Assignment]]:
        """Allocate the rooms promised to pending jobs, so no other job takes them first."""
        pending = {j.id: j for j in self.s.pending} if self.s.promised else {}
        taken: dict[str, Sequence[Assignment]] = {}
        for job_id, room in self.s.promised.items():
            job = pending.get(job_id)
            if job is None:
                continue
            mark = self.journal.mark()
            try:
                for a in room:
                    self.journal.allocate(a)
            except OverAllocation:  # no longer free: the job competes like any other
                self.journal.rollback(mark)
                continue
            taken[job_id] = room
            self.timeline.add(_PROMISE + job_id, room, self.now + self._length(job))
        return taken

    def _record_start(self, job: Job, placed: list[Assignment]) -> None:
        self.rooms.clear()
        if job.partition in self.waiting:
            self.backfilled += 1  # ahead of a job its partition keeps waiting, as Slurm counts
        self.plan.starts[job.id] = placed
        self.tally.add(job)
        end = self.now + self._length(job)
        self.timeline.add(job.id, placed, end)
        if job.exclusive:
            self._block_nodes(placed, end)

    def _block_nodes(self, placed: Sequence[Assignment], end: int) -> None:
        """Keep every other job off these nodes from now until ``end`` (an exclusive job's)."""
        self.planned.add(np.array([a.node for a in placed], dtype=np.int64), self.now, end)

    # -- preemption ----------------------------------------------------------
    def _preempt(self, job: Job, access: Access) -> bool:
        if self.p.preemption is None:
            return False
        # Victims already signalled keep their room for the job they were picked for.
        taken = {p.job_id for p in self.plan.preemptions} | self.s.signalled.keys()
        running = [r for r in self.s.running if r.job.id not in taken]
        trial = partial(self._trial, whole=job.exclusive)
        req = PreemptionRequest(
            job, self.s, self.now, self._usable_now(job, access), running, self.state, trial
        )
        victims = list(self.p.preemption.victims(req))
        if not victims:
            return False
        mark = self.journal.mark()
        for v in victims:
            for a in v.assignments:
                self.journal.release(a)
        nodes = req.nodes & idle_nodes(self.state) if job.exclusive else req.nodes
        placed = self._placer(nodes).place(self.state, job.request)
        if placed is None:
            self.journal.rollback(mark)
            return False
        for a in placed:
            self.journal.log.append((1, a))
        for v in victims:
            qos = self.s.qos[v.job.qos]
            self.plan.preemptions.append(
                Preemption(v.job.id, qos.preempt_mode, qos.grace_s, for_job=job.id)
            )
            self.tally.add(v.job, -1)
            self.timeline.remove(v.job.id)
        self._record_start(job, placed)
        return True

    def _trial(
        self, victims: Sequence[RunningJob], nodes: BoolArray, r: Request, *, whole: bool
    ) -> BoolArray:
        """``Trial`` for the preemptor; ``whole``: the job is exclusive, so nodes must empty."""
        mark = self.journal.mark()
        try:
            for v in victims:
                for a in v.assignments:
                    self.journal.release(a)
            if whole:
                nodes = nodes & idle_nodes(self.state)
            return self._placer(nodes).context(self.state, r, Mode.NOW).feasible.copy()
        finally:
            self.journal.rollback(mark)

    # -- waiting -------------------------------------------------------------
    def _wait(self, job: Job, access: Access, shape: _Shape) -> None:
        plan, backfill = self.plan, self.backfill
        if job.partition in self.waiting:
            plan.reasons[job.id] = PRIORITY
        else:
            self.waiting.add(job.partition)
            plan.reasons[job.id] = RESOURCES
        if backfill is None:
            self.strict_blocked.add(job.partition)
            return
        length = self._length(job)
        if length >= shape.unplanned_at or not backfill.wants_planned_start(self.planned_count):
            return
        horizon = backfill.horizon(self.now)
        exact = self.timeline.will_run is None  # then a start past the horizon is found too
        planned = self.timeline.earliest(
            job.request,
            access.nodes,
            length,
            access.blocks,
            horizon=NEVER if exact else horizon,
            whole_nodes=job.exclusive,
        )
        if planned is None or planned.start > horizon:
            # Longer jobs of the shape, around only more planned starts, would find none either.
            shape.unplanned_at = length
            self._cut_off(planned.start if planned is not None else None, horizon)
        else:
            self._plan_start(job, planned)

    def _cut_off(self, start: int | None, horizon: int) -> None:
        """A job found no planned start by the ``horizon``, which moves with the clock: a
        later cycle may plan it, once the horizon reaches its ``start`` (None: unknown)."""
        if start is None:
            self.plan.clocked = True  # any time
        else:
            wake = self.now + start - horizon
            self.horizon_wake = wake if self.horizon_wake is None else min(self.horizon_wake, wake)

    def _plan_start(self, job: Job, planned: PlannedStart) -> None:
        self.planned_count += 1
        self.planned.add(planned.nodes, *planned.hold)
        self.plan.expected_start[job.id] = planned.start
        self.plan.expected_nodes[job.id] = tuple(planned.nodes.tolist())


def beyond_cut(
    plan: Plan, profile: SchedulingProfile, snapshot: Snapshot, job: Job, now: int
) -> bool:
    """Whether ``job``, queued at ``now`` after ``plan`` was made from ``snapshot``, sorts
    after every job the plan considered, so a cycle with it considers the same jobs.

    Only when the queue depth cut the queue and the plan still holds at
    ``now`` (it is not clocked, or its ``wake`` is still ahead: the ordering's
    priorities have not moved).
    """
    if plan.cut is None or (plan.clocked and (plan.wake is None or now >= plan.wake)):
        return False
    prio = float(profile.ordering.priorities(snapshot, [job], snapshot.now)[0])
    cut_prio, cut_submit, cut_id = plan.cut
    return (-prio, job.submit_time, id_order(job.id)) > (cut_prio, cut_submit, id_order(cut_id))


def gpu_hours_at_risk(r: RunningJob, now: int) -> float:
    """GPU-hours a preemption would throw away: since the last checkpoint, else since start."""
    job = r.job
    since = job.start_time if job.start_time is not None else now
    if job.checkpoint_interval_s is not None and job.last_checkpoint is not None:
        since = max(since, job.last_checkpoint)
    return gpu_milli_equivalent(job.request) / 1000 * max(0, now - since) / 3600
