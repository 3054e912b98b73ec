"""The what-if simulator: a discrete-event driver of the scheduling cycle in virtual time.

It is the controller's twin. Both hand ``core.cycle.run_cycle`` a snapshot and
apply the plan it returns; this one applies it to a ``ClusterState`` and
advances a virtual clock from event to event (``sim.events``) instead of
reading a wall clock. There is no policy here: who runs, where, and whom to
preempt all come from the profile's plugins.

**Trace jobs become core jobs** (``to_job``): the QoS is the job's priority
class (``high``, ``normal``, ``low``) or ``preemptible`` for a preemptible
job; the partition and account default to ``default`` and the user to the
account. A job without a time limit gets its duration rounded up to
``limit_round_s`` (an hour by default: users ask for round numbers), or
exactly its duration with ``oracle_limits`` (what SJF-with-an-oracle needs).

**Events**: arrival, end of a run, checkpoint, the end of a preemption's
grace time (then requeue or cancel), node failure and repair (``sim.faults``),
and reservation start and end. A cycle runs after every instant with an
event that may change a decision, at most once per ``min_gap_s``, and every
``interval_s`` while jobs wait, as the controller's loop does.

**Work.** A run lasts the job's remaining work or its time limit, whichever
is less; a run cut by its limit ends the job as timed out. A run stopped by
preemption or a node failure keeps the work up to its last checkpoint (a
checkpoint every ``checkpoint_interval_s`` of the run; none without one) and
loses the rest; the job goes back to the queue with its original submit
time. So every allocated GPU-second is either work of a completed job or
lost (to preemption, failures, or an end without completion).
"""

from __future__ import annotations

import time as wallclock
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from gpufleet.core.accounts import Account, AccountTree, AccountUsage, User
from gpufleet.core.cycle import Plan, SchedulingProfile, Snapshot, run_cycle
from gpufleet.core.fragmentation import FragmentationMeter, Workload
from gpufleet.core.job import Job, JobState, Partition, QoS, Reservation, RunningJob
from gpufleet.core.model import MILLI, Node
from gpufleet.core.placement import Placer
from gpufleet.core.state import Assignment, ClusterState, OverAllocation
from gpufleet.policies.fairshare import FairshareArgs, accrue, charge
from gpufleet.sim.events import Event, EventQueue, Kind
from gpufleet.sim.faults import FaultModel
from gpufleet.sim.traces.record import TraceJob

PREEMPTIBLE_QOS = "preemptible"
"""The QoS of preemptible trace jobs; the others' QoS is their priority class."""

DEFAULT_ACCOUNT = "default"


def default_qos(*, preempt: bool) -> dict[str, QoS]:
    """The built-in QoS table: one per priority class, and the preemptible one.

    With ``preempt`` every class may preempt ``preemptible`` jobs (Slurm's
    preempt/qos with a scavenger QoS).
    """
    victims = (PREEMPTIBLE_QOS,) if preempt else ()
    return {
        "high": QoS("high", priority=100, preempt=victims),
        "normal": QoS("normal", priority=10, preempt=victims),
        "low": QoS("low", priority=1, preempt=victims),
        PREEMPTIBLE_QOS: QoS(PREEMPTIBLE_QOS, priority=0),
    }


class SimConfig(BaseModel):
    """The driver's settings (the ``[sim]`` table of a policy file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interval_s: int = Field(60, ge=0, description="periodic cycle while jobs wait; 0: none")
    min_gap_s: int = Field(
        0, ge=0, description="event-triggered cycles at most once per this many seconds"
    )
    limit_round_s: int = Field(3600, gt=0, description="no time limit: duration rounded up")
    oracle_limits: bool = Field(False, description="time limit = duration for every job")
    checkpoint_interval_s: int | None = Field(
        None, gt=0, description="for jobs whose trace gives none; None: they never checkpoint"
    )
    deadline_factor: float = Field(2.0, gt=0, description="deadline = submit + factor x duration")
    mtbf_s: float | None = Field(None, gt=0, description="mean time between failures per node")
    mttr_s: float = Field(3600.0, gt=0, description="mean time to repair a failed node")
    seed: int = Field(0, ge=0, description="seeds fault injection and random placement")
    priority_calc_s: int = Field(
        300, ge=0, description="fairshare recomputed at most this often (PriorityCalcPeriod)"
    )
    sample_s: int | None = Field(
        None, gt=0, description="time series step; None: about 500 samples over the trace"
    )


def to_job(t: TraceJob, config: SimConfig) -> Job:
    """The core job a trace job becomes (see the module docstring)."""
    if config.oracle_limits:
        limit = max(1, t.duration_s)
    elif t.time_limit_s is not None:
        limit = t.time_limit_s
    else:
        step = config.limit_round_s
        limit = max(step, -(-t.duration_s // step) * step)
    account = t.account or t.user or DEFAULT_ACCOUNT
    return Job(
        id=t.id,
        user=t.user or account,
        account=account,
        qos=PREEMPTIBLE_QOS if t.preemptible else t.priority_class,
        partition=t.partition or DEFAULT_ACCOUNT,
        request=t.request,
        submit_time=t.submit_time,
        time_limit_s=limit,
        checkpoint_interval_s=t.checkpoint_interval_s or config.checkpoint_interval_s,
    )


@dataclass(slots=True)
class JobRecord:
    """Everything the driver knows about one job, and what metrics read afterwards.

    ``state`` is a ``JobState`` value, or ``"timeout"`` for a job whose run
    reached its time limit, or ``"unschedulable"`` for one that fits no node
    of the cluster even when idle. GPU-second counters are in GPU-seconds.
    ``assignments`` is where the current run holds resources (empty between
    runs); ``last_assignments`` where the latest run was placed, kept after it.
    """

    trace: TraceJob
    job: Job
    gpus: float
    remaining: int
    state: str = JobState.PENDING.value
    run: int = 0
    run_start: int = -1
    last_checkpoint: int = -1
    first_start: int = -1
    end: int = -1
    assignments: tuple[Assignment, ...] = ()
    last_assignments: tuple[Assignment, ...] = ()
    signalled: bool = False
    cancel: bool = False
    preemptions: int = 0
    failures: int = 0
    requeues: int = 0
    allocated_gpu_s: float = 0.0
    saved_gpu_s: float = 0.0
    lost_preemption_gpu_s: float = 0.0
    lost_failure_gpu_s: float = 0.0
    lost_other_gpu_s: float = 0.0

    @property
    def finished(self) -> bool:
        return self.state not in (JobState.PENDING.value, JobState.RUNNING.value)


@dataclass
class Sample:
    """The cluster at one time: milli-GPU allocated, queue, and FGD fragmentation."""

    time: int
    alloc_milli: int
    pending: int
    running: int
    frag_milli: float
    nodes_down: int
    accounts: dict[str, int] = field(default_factory=dict)
    """Milli-GPU held per account with jobs running or waiting (0: waiting only)."""


@dataclass
class SimResult:
    """What a replay produced: per-job records, the time series and integrals."""

    profile: str
    jobs: list[JobRecord]
    samples: list[Sample]
    capacity_milli: int
    start: int
    end: int
    alloc_milli_s: float  # integral of allocated milli-GPU over [start, end]
    cycles: int
    wall_s: float
    entitlement: dict[str, float] = field(default_factory=dict)
    node_failures: int = 0


class UsageLedger:
    """Fairshare usage between cycles, charged as ``policies.fairshare.charge`` bills.

    A running job bills at a constant rate, so the ledger keeps the billed
    GPU-seconds per second of every association and decays and charges the
    usage in one vector step whenever that rate changes. Each job's rate is
    what ``charge`` bills it for one second, cached by what it depends on.
    Orderings see a new ``AccountUsage`` at most every ``recalc_s`` seconds,
    as Slurm recomputes fairshare every PriorityCalcPeriod.
    """

    def __init__(
        self,
        tree: AccountTree,
        args: FairshareArgs,
        state: ClusterState,
        qos: dict[str, QoS],
        recalc_s: int,
    ) -> None:
        self.tree, self.args, self.state, self.qos = tree, args, state, qos
        self.recalc_s = recalc_s
        self.usage = np.zeros(len(tree))
        self.rate = np.zeros(len(tree))
        self.index = np.arange(len(tree))
        self.at = 0
        self.snapshot = AccountUsage(tree, self.usage)
        self.snapshot_at: int | None = None
        self._rates: dict[tuple[str, str, str, int, str], npt.NDArray[np.float64]] = {}

    def _accrue(self, now: int) -> None:
        if now > self.at:
            elapsed = now - self.at
            self.usage = accrue(
                self.usage, elapsed, self.args.half_life_s, self.index, self.rate * elapsed
            )
            self.at = now

    def _job_rate(self, r: RunningJob) -> npt.NDArray[np.float64]:
        j = r.job
        model = self.state.nodes[r.assignments[0].node].gpu_model if r.assignments else ""
        key = (j.account, j.user, j.qos, j.gpu_milli, model)
        rate = self._rates.get(key)
        if rate is None:
            zero = AccountUsage(self.tree, np.zeros(len(self.tree)))
            rate = charge(zero, [r], self.state, self.qos, 1, self.args).usage
            self._rates[key] = rate
        return rate

    def start(self, r: RunningJob, now: int) -> None:
        self._accrue(now)
        self.rate += self._job_rate(r)

    def stop(self, r: RunningJob, now: int) -> None:
        self._accrue(now)
        self.rate -= self._job_rate(r)

    def view(self, now: int) -> AccountUsage:
        """The usage orderings see at ``now``."""
        self._accrue(now)
        if self.snapshot_at is None or now - self.snapshot_at >= self.recalc_s:
            # Subtracting rates can leave -1e-12 where a rate went back to 0.
            self.snapshot = AccountUsage(self.tree, np.maximum(self.usage, 0.0))
            self.snapshot_at = now
        return self.snapshot


ProgressFn = Callable[[int, int], None]
"""Called with (jobs finished, jobs in all) as the replay advances."""


class Simulation:
    """One replay of ``jobs`` on ``nodes`` under a scheduling profile.

    ``qos`` defaults to ``default_qos``; ``partitions`` are laid over one
    partition (of all nodes) per name the jobs use. ``shares`` maps an
    account to its fairshare shares (its entitlement; 1 when absent).
    ``reservations`` become the snapshot's advance reservations, each
    starting and ending with an event.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[TraceJob],
        scheduling: SchedulingProfile,
        *,
        name: str = "",
        config: SimConfig | None = None,
        qos: dict[str, QoS] | None = None,
        partitions: dict[str, Partition] | None = None,
        reservations: Sequence[Reservation] = (),
        shares: dict[str, float] | None = None,
        fairshare: FairshareArgs | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.name = name or scheduling.ordering.NAME
        self.state = ClusterState(nodes)
        self.sched = scheduling
        self.qos = qos or default_qos(preempt=scheduling.preemption is not None)
        self.reservations = list(reservations)
        self.fairshare = fairshare
        self.progress = progress
        self.queue = EventQueue()
        self.records: dict[str, JobRecord] = {}
        self.pending: dict[str, Job] = {}
        self.running: dict[str, RunningJob] = {}
        self.on_node: list[set[str]] = [set() for _ in nodes]
        self.now = 0
        self.done = 0
        self._build_records(jobs)
        self._build_accounts(shares or {})
        names = sorted({r.job.partition for r in self.records.values()})
        self.partitions = {**{n: Partition(n) for n in names}, **(partitions or {})}
        self.faults = (
            FaultModel(self.config.mtbf_s, self.config.mttr_s, self.config.seed)
            if self.config.mtbf_s
            else None
        )
        self.meter = self._meter(jobs)
        self.alloc_milli = 0
        self.held: defaultdict[str, int] = defaultdict(int)  # milli-GPU per account
        self.waiting: defaultdict[str, int] = defaultdict(int)  # pending jobs per account
        self.alloc_area = 0.0
        self.last_advance = 0
        self.last_cycle = -(10**18)
        self.deferred = False
        self.tick_at: int | None = None
        self.cycles = 0
        self.failures = 0
        self.samples: list[Sample] = []
        self.next_sample = 0
        self.sample_s = self.config.sample_s or self._default_sample_s(jobs)

    # -- set-up ----------------------------------------------------------------
    def _build_records(self, jobs: Sequence[TraceJob]) -> None:
        idle = ClusterState(self.state.nodes)
        placer = Placer(self.sched.placement)
        fits: dict[object, bool] = {}
        for t in jobs:
            if t.id in self.records:
                raise ValueError(f"job {t.id}: id appears twice in the trace")
            job = to_job(t, self.config)
            rec = JobRecord(t, job, job.gpu_milli / MILLI, t.duration_s)
            if t.request not in fits:
                fits[t.request] = placer.fits_empty(idle, t.request)
            if not fits[t.request]:
                rec.state = "unschedulable"
                self.done += 1
            else:
                self.queue.push(t.submit_time, Kind.ARRIVAL, t.id)
            self.records[t.id] = rec
        for res in self.reservations:
            self.queue.push(res.start, Kind.RESERVATION)
            self.queue.push(res.end, Kind.RESERVATION)

    def _build_accounts(self, shares: dict[str, float]) -> None:
        pairs = sorted({(r.job.account, r.job.user) for r in self.records.values()})
        names = sorted({a for a, _ in pairs})
        tree = AccountTree(
            [Account(a, shares=shares.get(a, 1.0)) for a in names],
            [User(u, a) for a, u in pairs],
        )
        norm = tree.normalized_shares()
        self.entitlement = {a: float(norm[tree.account(a)]) for a in names}
        self.ledger = (
            None
            if self.fairshare is None
            else UsageLedger(
                tree, self.fairshare, self.state, self.qos, self.config.priority_calc_s
            )
        )

    def _meter(self, jobs: Sequence[TraceJob]) -> FragmentationMeter | None:
        requests = [t.request for t in jobs if not t.request.mig_profile]
        if not requests or not self.state.models:
            return None
        return FragmentationMeter(self.state, Workload.from_requests(requests, self.state.models))

    @staticmethod
    def _default_sample_s(jobs: Sequence[TraceJob]) -> int:
        if not jobs:
            return 60
        span = max(t.submit_time + t.duration_s for t in jobs) - min(t.submit_time for t in jobs)
        return max(1, span // 500)

    # -- the loop --------------------------------------------------------------
    def run(self) -> SimResult:
        """Replay until every job has finished (or nothing more can happen)."""
        started = wallclock.perf_counter()
        total = len(self.records)
        if self.faults is not None:
            for node, at in enumerate(self.faults.first_failures(self.state.num_nodes)):
                self.queue.push(int(at), Kind.NODE_FAIL, node)
        first = self.queue.peek_time()
        self.now = self.last_advance = first or 0
        self.next_sample = self.now
        reported = -1
        while len(self.queue) and self.done < total:
            t = self.queue.peek_time()
            assert t is not None
            self._advance(t)
            wanted = False
            while len(self.queue) and self.queue.peek_time() == t:
                wanted |= self._handle(self.queue.pop())
            if wanted:
                self._maybe_cycle(t)
            self._sample()
            if self.progress is not None and self.done != reported:
                reported = self.done
                self.progress(self.done, total)
            if self._stalled():
                break
        end = max((r.end for r in self.records.values() if r.end >= 0), default=self.now)
        self._advance(max(end, self.now))
        self._sample(force=True)
        start = min((r.trace.submit_time for r in self.records.values()), default=0)
        return SimResult(
            profile=self.name,
            jobs=list(self.records.values()),
            samples=self.samples,
            capacity_milli=self.state.gpu_milli_capacity,
            start=start,
            end=end,
            alloc_milli_s=self.alloc_area,
            cycles=self.cycles,
            wall_s=wallclock.perf_counter() - started,
            entitlement=self.entitlement,
            node_failures=self.failures,
        )

    def _stalled(self) -> bool:
        """Nothing runs, nothing more arrives, and the last cycle started nobody."""
        if self.running or self.deferred or not self.pending:
            return False
        if self.faults is not None and not bool(self.state.healthy.all()):
            return False
        return self.cycles > 0 and not self.queue.holds(
            {Kind.ARRIVAL, Kind.RESERVATION, Kind.NODE_REPAIR}
        )

    def _advance(self, t: int) -> None:
        self.alloc_area += self.alloc_milli * (t - self.last_advance)
        self.last_advance = t
        self.now = t

    def _maybe_cycle(self, t: int) -> None:
        if not self.pending:
            return  # with nobody waiting a cycle can start or preempt nothing
        due = self.last_cycle + self.config.min_gap_s
        if t >= due:
            self.cycle()
        elif not self.deferred:
            self.deferred = True
            self.queue.push(due, Kind.SCHEDULE, "deferred")

    def _handle(self, ev: Event) -> bool:
        """Apply one event; True when a scheduling cycle should follow."""
        match ev.kind:
            case Kind.ARRIVAL:
                rec = self.records[str(ev.key)]
                self._queue(rec.job)
                return True
            case Kind.JOB_END:
                rec = self.records[str(ev.key)]
                if rec.run != ev.run or rec.state != JobState.RUNNING.value:
                    return False
                self._finish(rec)
                return True
            case Kind.PREEMPT:
                rec = self.records[str(ev.key)]
                if rec.run != ev.run or rec.state != JobState.RUNNING.value:
                    return False
                self._stop(rec, cause="preemption")
                return True
            case Kind.CHECKPOINT:
                self._checkpoint(str(ev.key), ev.run)
                return False
            case Kind.NODE_FAIL:
                self._fail(int(ev.key))
                return True
            case Kind.NODE_REPAIR:
                self._repair(int(ev.key))
                return True
            case Kind.RESERVATION:
                return True
            case _:  # Kind.SCHEDULE
                if ev.key == "deferred":
                    self.deferred = False
                else:
                    self.tick_at = None
                return True

    def _queue(self, job: Job) -> None:
        self.pending[job.id] = job
        self.waiting[job.account] += 1

    # -- the cycle -------------------------------------------------------------
    def cycle(self) -> Plan:
        """Run one scheduling cycle now and apply its plan."""
        now = self.now
        snapshot = Snapshot(
            state=self.state,
            running=list(self.running.values()),
            pending=list(self.pending.values()),
            qos=self.qos,
            partitions=self.partitions,
            now=now,
            reservations=[r for r in self.reservations if r.end > now],
            accounts=self.ledger.view(now) if self.ledger is not None else None,
        )
        plan = run_cycle(snapshot, self.sched, now)
        self.cycles += 1
        self.last_cycle = now
        for p in plan.preemptions:
            rec = self.records[p.job_id]
            if rec.signalled or rec.state != JobState.RUNNING.value:
                continue
            rec.signalled = True
            rec.preemptions += 1
            rec.cancel = p.mode == "cancel"
            if p.grace_s == 0:
                self._stop(rec, cause="preemption")
            else:
                # Backfill sees the victim let go when its grace time ends.
                r = self.running[rec.job.id]
                self.running[rec.job.id] = replace(r, expected_end=now + p.grace_s)
                self.queue.push(now + p.grace_s, Kind.PREEMPT, rec.job.id, rec.run)
        for job_id, assignments in plan.starts.items():
            self._start(self.records[job_id], assignments)
        if self.config.interval_s and self.pending and self.tick_at is None:
            self.tick_at = now + self.config.interval_s
            self.queue.push(self.tick_at, Kind.SCHEDULE, "tick")
        return plan

    # -- runs ------------------------------------------------------------------
    def _start(self, rec: JobRecord, assignments: list[Assignment]) -> None:
        done: list[Assignment] = []
        try:
            for a in assignments:
                self.state.allocate(a)
                done.append(a)
        except OverAllocation:
            # A victim in its grace time still holds what the plan gave this job.
            for a in reversed(done):
                self.state.release(a)
            return
        now = self.now
        del self.pending[rec.job.id]
        self.waiting[rec.job.account] -= 1
        rec.run += 1
        rec.state = JobState.RUNNING.value
        rec.run_start = now
        rec.last_checkpoint = -1
        rec.signalled = False
        rec.assignments = rec.last_assignments = tuple(assignments)
        if rec.first_start < 0:
            rec.first_start = now
        job = replace(rec.job, state=JobState.RUNNING, start_time=now, last_checkpoint=None)
        length = min(rec.remaining, job.time_limit_s)
        r = RunningJob(job, rec.assignments, now + job.time_limit_s)
        self.running[job.id] = r
        if self.ledger is not None:
            self.ledger.start(r, now)
        for a in assignments:
            self.on_node[a.node].add(job.id)
        self.alloc_milli += job.gpu_milli
        self.held[job.account] += job.gpu_milli
        self.queue.push(now + length, Kind.JOB_END, job.id, rec.run)
        interval = job.checkpoint_interval_s
        if interval is not None and interval < length:
            self.queue.push(now + interval, Kind.CHECKPOINT, job.id, rec.run)

    def _checkpoint(self, job_id: str, run: int) -> None:
        rec = self.records[job_id]
        if rec.run != run or rec.state != JobState.RUNNING.value:
            return
        rec.last_checkpoint = self.now
        r = self.running[job_id]
        self.running[job_id] = replace(r, job=replace(r.job, last_checkpoint=self.now))
        interval = rec.job.checkpoint_interval_s
        assert interval is not None
        if self.now + interval < rec.run_start + min(rec.remaining, rec.job.time_limit_s):
            self.queue.push(self.now + interval, Kind.CHECKPOINT, job_id, run)

    def _release(self, rec: JobRecord) -> int:
        """Take the job off its nodes; return how long this run lasted."""
        r = self.running.pop(rec.job.id)
        if self.ledger is not None:
            self.ledger.stop(r, self.now)
        for a in r.assignments:
            self.state.release(a)
            self.on_node[a.node].discard(rec.job.id)
        self.alloc_milli -= rec.job.gpu_milli
        self.held[rec.job.account] -= rec.job.gpu_milli
        elapsed = self.now - rec.run_start
        rec.allocated_gpu_s += rec.gpus * elapsed
        rec.assignments = ()
        return elapsed

    def _finish(self, rec: JobRecord) -> None:
        elapsed = self._release(rec)
        rec.end = self.now
        if elapsed >= rec.remaining:
            rec.state = JobState.COMPLETED.value
            rec.saved_gpu_s += rec.gpus * elapsed
        else:
            rec.state = "timeout"
            rec.lost_other_gpu_s += rec.gpus * elapsed + rec.saved_gpu_s
            rec.saved_gpu_s = 0.0
        rec.remaining = max(0, rec.remaining - elapsed)
        self.done += 1

    def _stop(self, rec: JobRecord, *, cause: str) -> None:
        """End a run early (preemption or failure): keep the checkpointed work, requeue."""
        elapsed = self._release(rec)
        kept = rec.last_checkpoint - rec.run_start if rec.last_checkpoint >= 0 else 0
        lost = rec.gpus * (elapsed - kept)
        if cause == "preemption":
            rec.lost_preemption_gpu_s += lost
        else:
            rec.lost_failure_gpu_s += lost
        rec.saved_gpu_s += rec.gpus * kept
        rec.remaining -= kept
        rec.signalled = False
        if rec.cancel and cause == "preemption":
            rec.state = JobState.CANCELLED.value
            rec.end = self.now
            rec.lost_other_gpu_s += rec.saved_gpu_s
            rec.saved_gpu_s = 0.0
            self.done += 1
            return
        rec.state = JobState.PENDING.value
        rec.requeues += 1
        # rec.job is the job as queued; only the service it attained has grown.
        attained = rec.job.gpu_seconds_attained + rec.gpus * elapsed
        rec.job = replace(rec.job, gpu_seconds_attained=attained)
        self._queue(rec.job)

    # -- faults ----------------------------------------------------------------
    def _fail(self, node: int) -> None:
        assert self.faults is not None
        if not self.state.healthy[node]:
            return
        self.failures += 1
        for job_id in sorted(self.on_node[node]):
            rec = self.records[job_id]
            rec.failures += 1
            self._stop(rec, cause="failure")
        self.state.healthy[node] = False
        self.state.version[node] += 1
        self.queue.push(self.now + self.faults.repair_after(), Kind.NODE_REPAIR, node)

    def _repair(self, node: int) -> None:
        assert self.faults is not None
        self.state.healthy[node] = True
        self.state.version[node] += 1
        self.queue.push(self.now + self.faults.fail_after(), Kind.NODE_FAIL, node)

    # -- time series -----------------------------------------------------------
    def _sample(self, *, force: bool = False) -> None:
        if not force and self.now < self.next_sample:
            return
        frag = self.meter.total() if self.meter is not None else 0.0
        self.samples.append(
            Sample(
                self.now,
                self.alloc_milli,
                len(self.pending),
                len(self.running),
                frag,
                int((~self.state.healthy).sum()),
                {a: m for a, m in self.held.items() if m or self.waiting[a]}
                | {a: 0 for a, n in self.waiting.items() if n and a not in self.held},
            )
        )
        self.next_sample = self.now + self.sample_s
