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
shape already failed and the start is planned. So once a run of jobs changed
nothing, the walk judges the following ones in windows, with whole-queue
columns and ``BulkAdmission`` plugins, up to the first job that might change
something (be tested, get a planned start, be the first of its partition to
wait), which it considers alone. The plan is exactly the job-by-job walk's. The
profile's ``CycleCache`` keeps what each job fixes across cycles, by object
identity, so a cycle after a few arrivals reads columns instead of jobs.

The cycle never changes the snapshot: every allocation goes through a
journal that is rolled back before the plan is returned. After the walk, a
profile's ``Repartitioner`` may add MIG layout changes for idle GPUs to the
plan (``Plan.relayouts``), judging by the jobs the walk left waiting.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from operator import attrgetter
from typing import Literal, cast

import numpy as np

from gpufleet.core.columns import Entries, Rows
from gpufleet.core.constraints import idle_nodes, node_mask
from gpufleet.core.job import Job, Partition, RunningJob, gpu_milli_equivalent
from gpufleet.core.model import Request
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
    QuietGate,
    Repartitioner,
)
from gpufleet.core.snapshot import FloatArray, ObjectArray, QueueView, Snapshot, Tally
from gpufleet.core.state import Assignment, BoolArray, ClusterState, IntArray, OverAllocation
from gpufleet.core.timeline import NEVER, Blocks, PlannedStart, RunningEvents, Timeline

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


def _subset(jobs: Sequence[Job], indices: IntArray) -> Sequence[Job]:
    """The jobs at ``indices``; a log's view stays one (``core.columns.Entries``)."""
    if isinstance(jobs, Entries):
        return jobs.take(indices)
    return [jobs[i] for i in indices.tolist()]


@dataclass
class CycleCache:
    """What queued and running jobs fix, kept across cycles by identity (``core.columns``).

    It saves work only: a cycle's plan is the same with a fresh cache.
    """

    pending: Rows[Job] = field(default_factory=Rows)
    running: RunningEvents = field(default_factory=RunningEvents)
    idle_fits: dict[tuple[Request, bytes, bytes], bool] = field(default_factory=dict)
    """Whether a request fits nodes of the idle cluster, by request, nodes and their health,
    for the state and epoch of ``idle_of`` (see ``_Cycle._fits_idle``)."""
    idle_of: tuple[ClusterState, int] | None = None


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
        if self.estimates:
            return True
        plugins: list[object] = [self.ordering, *self.admission]
        optional = (self.gate, self.backfill, self.preemption, self.repartition)
        plugins += [p for p in optional if p is not None]
        return any(getattr(p, "clocked", True) for p in plugins)

    def wake(self, now: int) -> int | None:
        """The first time after ``now`` at which a plugin's answer may change while only
        the clock moves; None when that may be any time.

        A clocked plugin tells with ``next_change(now) -> int | None`` (None: any
        time); one that does not say may change at any time.
        """
        if self.estimates:
            return None
        plugins: list[object] = [self.ordering, *self.admission]
        optional = (self.gate, self.backfill, self.preemption, self.repartition)
        plugins += [p for p in optional if p is not None]
        times = []
        for p in plugins:
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
) -> list[int]:
    """Indices of ``pending`` by priority (higher first), then submit time, then id.

    ``submit``, when given, is the jobs' submit times, already gathered.
    ``first`` > 0 returns only the first that many.
    """
    if submit is None:
        submit = np.fromiter((j.submit_time for j in pending), dtype=np.int64, count=len(pending))
    if first and 2 * first < len(pending):
        # Only jobs that may sort among the first few are sorted: those of a higher priority
        # than the first-th's, and of its priority those submitted no later than its.
        chosen = _leading(priorities, submit, first)
        inner = _sorted(priorities[chosen], _subset(pending, chosen), submit[chosen], first)
        return [int(chosen[i]) for i in inner]
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
        result[lo:hi] = sorted(result[lo:hi], key=lambda i: pending[i].id)
    return result[:cut]


def _leading(priorities: FloatArray, submit: IntArray, first: int) -> IntArray:
    """Indices of a superset of the ``first`` jobs by (priority desc, submit), ties included."""
    neg = -priorities
    kth = np.partition(neg, first - 1)[first - 1]
    ahead = np.flatnonzero(neg < kth)
    tied = np.flatnonzero(neg == kth)
    need = first - len(ahead)
    if len(tied) > need:
        at = submit[tied]
        tied = tied[at <= np.partition(at, need - 1)[need - 1]]
    return np.concatenate([ahead, tied])


CALM = 8
"""Jobs in a row that changed nothing before the walk judges the rest in windows."""
WINDOW = 64
"""The first window's length; it doubles while windows settle every job."""


def _known(queue: QueueView, attr: str, defined: Mapping[str, object]) -> BoolArray:
    """Whether each job's ``attr`` names something ``defined``."""
    codes, keys = queue.codes(attr)
    return np.array([k in defined for k in keys], dtype=np.bool_)[codes] if keys else codes > 0


def _member(queue: QueueView, attr: str, names: set[str]) -> BoolArray:
    """Whether each job's ``attr`` is one of ``names``."""
    codes, keys = queue.codes(attr)
    return np.array([k in names for k in keys], dtype=np.bool_)[codes] if keys else codes > 0


def run_cycle(snapshot: Snapshot, profile: SchedulingProfile, now: int | None = None) -> Plan:
    """Decide starts, preemptions, planned starts and pending reasons; see the module docstring."""
    cycle = _Cycle(snapshot, profile, snapshot.now if now is None else now)
    try:
        plan = cycle.run()
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
            self.state, now, resolution, snapshot.running, cache.running, will_run, running_rows
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
        self.events = 0  # steps that changed what later jobs would see; see _walk
        # What a runtime-checkable protocol checks, without its cost in every cycle.
        self.bulk = all(callable(getattr(a, "admit_all", None)) for a in profile.admission)
        gate = profile.gate
        # A gate that is quiet for this snapshot is asked only about jobs naming a reservation.
        self.quiet_gate = gate is None or (isinstance(gate, QuietGate) and gate.quiet(snapshot))

    # -- the walk ------------------------------------------------------------
    def run(self) -> Plan:
        s, plan, table = self.s, self.plan, self.p.cache.pending
        rows = table.rows(s.pending)
        stopped, reasons = self._static_reasons(QueueView(table, rows))
        if len(stopped):
            ids = table.values("id", attrgetter("id"), object)[rows[stopped]]
            plan.reasons.update(zip(ids.tolist(), reasons, strict=True))
            keep = np.setdiff1d(np.arange(len(rows)), stopped, assume_unique=True)
            rows = rows[keep]
            candidates = _subset(s.pending, keep)
        else:
            candidates = s.pending
        if candidates:
            prio = np.asarray(self.p.ordering.priorities(s, candidates, self.now), np.float64)
            submit = table.values("submit_time", attrgetter("submit_time"))[rows]
            depth = self.p.queue_depth
            order = queue_order(prio, candidates, submit, depth)
            if depth and len(candidates) > depth:
                plan.stats["beyond_depth"] = float(len(candidates) - depth)
                last = order[-1]
                plan.cut = (-float(prio[last]), int(submit[last]), candidates[last].id)
            self._walk(rows[order])
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

    def _static_reasons(self, queue: QueueView) -> tuple[IntArray, list[str]]:
        """The jobs held, of an unknown QoS or partition, not yet at their begin time, or
        waiting on a job still queued or running (positions in ``queue``), and each one's
        reason, in that precedence.

        Only the jobs held, with a begin time ahead or dependencies, or of a QoS or
        partition the snapshot lacks, can be stopped: columns over every row find them.
        """
        s, table, rows = self.s, queue.table, queue.rows
        begin = table.values("begin_time", attrgetter("begin_time"))
        suspect = table.values("may_stop", _may_stop, np.bool_) | (begin > self.now)
        for attr, defined in (("qos", s.qos), ("partition", s.partitions)):
            codes, keys = table.codes(attr, attrgetter(attr))
            unknown = np.array([k not in defined for k in keys], dtype=np.bool_)
            if unknown.any():
                suspect = suspect | unknown[codes]
        at = np.flatnonzero(suspect[rows])
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

        Most jobs of a large queue change nothing: a limit keeps them, or a
        job of their shape already failed and the one start is planned. Once
        ``CALM`` jobs in a row changed nothing, the rest are judged in
        windows at once (``_settle``) up to the first job that might change
        something, which is considered alone again; windows double while
        they settle every job, and fit the run last settled otherwise.
        """
        table = self.p.cache.pending
        jobs, view = table.objects, QueueView(table, queue)
        pos, calm, window = 0, 0, WINDOW
        while pos < len(queue):
            if calm < CALM:
                before = self.events
                self._consider(jobs[queue[pos]])
                calm = calm + 1 if self.events == before else 0
                pos += 1
                continue
            part = view.window(pos, pos + window)
            settled, reasons, tried, plannable = self._settle(part)
            stop = len(part) if settled.all() else int(np.argmin(settled))
            if tried[:stop].any():
                self._tried(part, np.flatnonzero(tried[:stop]))
            if plannable[:stop].any():
                self._plan_run(part, np.flatnonzero(plannable[:stop]))
            ids = part.column("id", object)[:stop].tolist()
            self.plan.reasons.update(zip(ids, reasons[:stop].tolist(), strict=True))
            pos += stop
            if stop < len(part):
                calm, window = 0, max(WINDOW, 2 * stop)
            else:
                window *= 2

    def _settle(self, queue: QueueView) -> tuple[BoolArray, ObjectArray, BoolArray, BoolArray]:
        """Which of these jobs ``_consider`` would only give a reason now, the reasons,
        which of them it would test, to fail as a placement of their shape did,
        and which it would ask for a planned start.

        Exact for the cycle's current facts; a job it cannot settle (one that
        would be placed, or change any fact but its shape's failure memo and
        the tested count, see ``_tried``, or the planned starts, see
        ``_plan_run``) reads False.
        """
        reasons = np.full(len(queue), "", dtype=object)
        none = np.zeros(len(queue), dtype=np.bool_)
        if not self.bulk:
            return none, reasons, none, none
        for a in reversed(self.p.admission):  # the first plugin's reason wins
            said = cast(BulkAdmission, a).admit_all(self.s, queue, self.tally)
            reasons = np.where(said != "", said, reasons)
        open_ = reasons == ""
        if not self.quiet_gate:
            return ~open_, reasons, none, none
        blocked = _member(queue, "partition", self.strict_blocked)
        waiting = _member(queue, "partition", self.waiting)
        codes, keys = queue.codes("request", "partition", "reservation", "constraints")
        self._judge_shapes(np.unique(codes[open_ & ~blocked]), keys)
        known = [self.shapes.get(k) for k in keys]
        shapes = [sh if sh is not None else _Shape() for sh in known]
        never = np.array([-1 if sh.never is None else int(sh.never) for sh in shapes])[codes]
        failed = np.array([sh.failed_at for sh in shapes], dtype=np.int64)[codes]
        unplanned = np.array([sh.unplanned_at for sh in shapes], dtype=np.int64)[codes]
        limit = queue.column(self.length_attr)
        bf = self.backfill
        capped = bf is not None and bool(self.waiting) and not bf.may_test(self.tested)
        tries = (limit < failed) & (not capped)
        wants = bf is not None and bf.wants_planned_start(self.planned_count)
        plans = (limit < unplanned) & wants
        nna = open_ & ~blocked & (never == 1)
        behind = open_ & ~blocked & (never == 0) & ~tries & waiting & ~plans
        # A test that would fail as before leaves the job waiting behind the first.
        tried = open_ & ~blocked & (never == 0) & tries & waiting
        if bf is None or self.p.preemption is not None or not tried.any():
            tried = none
        else:
            tried &= self._fail_as_before(tried, codes, keys, limit)
        # Planned starts are found for a run of jobs at once (Timeline.plan_run).
        plannable = none
        if wants and self.timeline.will_run is None:
            plannable = open_ & ~blocked & (never == 0) & waiting & plans & (~tries | tried)
            if plannable.any():
                plannable &= ~np.array([k[3][3] for k in keys], dtype=np.bool_)[codes]
        reasons[open_ & blocked] = PRIORITY
        reasons[nna] = NODE_NOT_AVAIL
        reasons[behind | tried | plannable] = PRIORITY
        settled = ~open_ | blocked | nna | behind | (tried & ~plans) | plannable
        if self.signalled_for or self.promised:  # a job with its own room is considered alone
            ids = queue.column("id", object)
            settled &= ~np.array([i in self.signalled_for or i in self.promised for i in ids])
        if self.p.gate is not None:  # the gate answers these jobs one by one
            settled &= queue.column("reservation", object) == ""
        return settled, reasons, tried & settled, plannable & settled

    def _judge_shapes(self, codes: IntArray, keys: Sequence[ShapeKey]) -> None:
        """Find whether the shapes at ``codes`` of ``keys`` fit an idle cluster, as
        ``_consider`` would for their first job (those a gate answers excepted)."""
        for code in codes.tolist():
            key = keys[code]
            shape = self.shapes.get(key)
            request, partition, reservation, (nodelist, exclude, constraint, _) = key
            gated = self.p.gate is not None and bool(reservation)
            if (shape is None or shape.never is None) and not gated:
                shape = self.shapes.setdefault(key, _Shape())
                access = self._plain_access(partition, _where(nodelist, exclude, constraint))
                shape.never = not self._fits_idle(request, access.nodes)

    def _fail_as_before(
        self, tried: BoolArray, codes: IntArray, keys: Sequence[ShapeKey], limit: IntArray
    ) -> BoolArray:
        """Which of the ``tried`` jobs (codes of ``keys``, lengths ``limit``) a failed
        placement of their shape covers (``_covered``); exclusive jobs are not judged.

        Per shape at once: a job of length L from now may use a node while
        ``now + L`` is within the node's free time (``Blocks.free_until``), so
        counting the nodes with room that stay free long enough is a search
        in their sorted free times.
        """
        out = np.zeros(len(tried), dtype=np.bool_)
        at = np.flatnonzero(tried)
        free_until = self.planned.free_until(self.now)  # the blocks of every plain access
        for code in np.unique(codes[at]).tolist():
            request, partition, _, (nodelist, exclude, constraint, exclusive) = keys[code]
            shape = self.shapes.get(keys[code])
            if shape is None or exclusive:
                continue
            if shape.unfit is None:
                if self.p.placement.filters:
                    continue
                # The memo a failed placement would leave (``_start``), found before it.
                shape.unfit = ~self.fitter.fit(self.state, request, Mode.NOW)[0]
            access = self._plain_access(partition, _where(nodelist, exclude, constraint))
            room = np.sort(free_until[access.nodes & ~shape.unfit])
            mine = at[codes[at] == code]
            usable = len(room) - np.searchsorted(room, self.now + limit[mine])
            out[mine] = usable < request.nodes
        return out

    def _tried(self, queue: QueueView, at: IntArray) -> None:
        """Count the tests the jobs at ``at`` of ``queue`` (settled as failing as before)
        make, in order, and keep their shapes' failure memo, as ``_consider`` would.

        A job is tested when it is shorter than every job of its shape that
        failed before it; the count stops where ``may_test`` first refuses
        (the count only grows, as when ``_plan_run`` asks ``wants_planned_start``).
        """
        codes, keys = queue.codes("request", "partition", "reservation", "constraints")
        code, length = codes[at], queue.column(self.length_attr)[at]
        bf = self.backfill
        assert bf is not None  # _settle judges tests only with backfill
        shapes = {c: self.shapes[keys[c]] for c in np.unique(code).tolist()}
        tests = np.zeros(len(at), dtype=np.bool_)
        for c, shape in shapes.items():
            mine = np.flatnonzero(code == c)
            shortest = np.minimum.accumulate(np.concatenate(([shape.failed_at], length[mine])))
            tests[mine] = length[mine] < shortest[:-1]
        for i in np.flatnonzero(tests).tolist():
            if not bf.may_test(self.tested):
                break
            self.tested += 1
            shapes[int(code[i])].failed_at = int(length[i])

    def _plan_run(self, queue: QueueView, at: IntArray) -> None:
        """Ask planned starts for the jobs at ``at`` of ``queue`` (settled as waiting
        and wanting one) in order, as ``_wait`` would one by one."""
        bf = self.backfill
        assert bf is not None  # _settle plans only with backfill
        codes, keys = queue.codes("request", "partition", "reservation", "constraints")
        kinds, kind = np.unique(codes[at], return_inverse=True)
        shapes, unplanned = [], []
        for code in kinds.tolist():
            request, partition, _, (nodelist, exclude, constraint, _) = keys[code]
            access = self._plain_access(partition, _where(nodelist, exclude, constraint))
            shapes.append((request, access.nodes))
            unplanned.append(self.shapes[keys[code]].unplanned_at)
        allowed = 0
        while allowed < len(at) and bf.wants_planned_start(self.planned_count + allowed):
            allowed += 1
        last = np.array(unplanned, dtype=np.int64)
        starts, nodes = self.timeline.plan_run(
            shapes,
            kind.astype(np.int64),
            queue.column(self.length_attr)[at],
            last,
            allowed,
            self.planned,
            bf.horizon(self.now),
        )
        for code, length in zip(kinds.tolist(), last.tolist(), strict=True):
            self.shapes[keys[code]].unplanned_at = length
        horizon = bf.horizon(self.now)
        cut = starts[(starts == -1) | (starts > horizon)]
        if len(cut):
            self._cut_off(None if (cut == -1).any() else int(cut.min()), horizon)
        ids = queue.column("id", object)[at].tolist()
        for job_id, start, chosen in zip(ids, starts.tolist(), nodes, strict=True):
            if 0 <= start <= horizon:
                self.planned_count += 1
                self.plan.expected_start[job_id] = start
                self.plan.expected_nodes[job_id] = tuple(chosen.tolist())

    def _consider(self, job: Job) -> None:
        plan = self.plan
        for admission in self.p.admission:
            reason = admission.admit(self.s, job, self.tally)
            if reason:
                plan.reasons[job.id] = reason
                return
        if job.partition in self.strict_blocked:
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
        if shape.never is None:  # not an event: windows judge shapes too (_judge_shapes)
            shape.never = not self._fits_idle(job.request, access.nodes)
        if shape.never:
            plan.reasons[job.id] = NODE_NOT_AVAIL
            return
        if self._start_in_victims_room(job, access):  # its own room: no shape memo applies
            self.events += 1
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
            # A test that fails as a placement of its shape did changes only the memo below;
            # a failed one changes no more than that memo, which windows read (not an event).
            if not (self.p.preemption is None and _covered(shape, usable, job.request.nodes)):
                if self._start(job, usable, shape):
                    self.events += 1
                    return
                if self._preempt(job, access):
                    self.events += 1
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
        self.events += 1  # a gate's answer is per job
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
        if cache.idle_of != (state, state.epoch):  # the same state object, in the same shape
            cache.idle_fits.clear()
            cache.idle_of = (state, state.epoch)
        key = (r, nodes.tobytes(), state.healthy.tobytes())
        fits = cache.idle_fits.get(key)
        if fits is None:
            if len(cache.idle_fits) >= 4096:  # health changing often: keep it bounded
                cache.idle_fits.clear()
            fits = cache.idle_fits[key] = self._test_idle(r, nodes)
        return fits

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
            room = self.fitter.fit(self.state, r, Mode.NOW)[0]
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
            self.events += 1
            self.waiting.add(job.partition)
            plan.reasons[job.id] = RESOURCES
        if backfill is None:
            self.strict_blocked.add(job.partition)
            return
        length = self._length(job)
        if length >= shape.unplanned_at or not backfill.wants_planned_start(
            self.planned_count
        ):
            return
        # Not an event: windows plan starts too (_plan_run).
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
    return (-prio, job.submit_time, job.id) > plan.cut


def gpu_hours_at_risk(r: RunningJob, now: int) -> float:
    """GPU-hours a preemption would throw away: since the last checkpoint, else since start."""
    job = r.job
    since = job.start_time if job.start_time is not None else now
    if job.checkpoint_interval_s is not None and job.last_checkpoint is not None:
        since = max(since, job.last_checkpoint)
    return gpu_milli_equivalent(job.request) / 1000 * max(0, now - since) / 3600
