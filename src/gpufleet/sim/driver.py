"""The what-if simulator: a discrete-event driver of the scheduling cycle in virtual time.

It is the controller's twin. Both keep an ``engine.JobBook``, hand
``core.cycle.run_cycle`` its snapshot and let the book apply the plan; this
one turns the book's effects into events and advances a virtual clock from
event to event (``sim.events``) instead of reading a wall clock. What it
adds is its own bookkeeping: per-job records (work done and lost) and the
time series. There is no policy here: who runs, where, and whom to preempt
all come from the profile's plugins.

**Trace jobs become core jobs** (``to_job``): the QoS is ``preemptible`` for
a preemptible job, else the trace's own QoS when the QoS table defines it
(a Slurm export's ``QOS``), else the job's priority class (``high``,
``normal``, ``low``); the partition and account default to ``default`` and
the user to the account. A job without a time limit gets its duration rounded up to
``limit_round_s`` (an hour by default: users ask for round numbers), or
exactly its duration with ``oracle_limits`` (what SJF-with-an-oracle needs).

**Closed-loop arrivals** (``TraceJob.after``, after Zakay and Feitelson,
MASCOTS 2014): a job that follows another of the trace arrives at the later
of its submit time and that job's end plus its ``think_s``, so a user's
next job waits for what the last one showed them, however long the
scheduler made it wait. Its wait and JCT count from that arrival
(``JobRecord.submit_time``). A job that follows one that never ends (it
fits no node, or the replay stops first) is never submitted: its state is
``"unsubmitted"``. The references are checked first (``follow_problems``).

**Events**: arrival, end of a run, checkpoint, the end of a preemption's
grace time (then requeue or cancel), node failure and repair (``sim.faults``),
and reservation start and end. A cycle runs after every instant with an
event that may change a decision, at most once per ``min_gap_s``, and every
``interval_s`` while jobs wait, as the controller's loop does. A periodic
cycle after a cycle that started and preempted nobody, with no event since,
would decide the same unless the plan says the clock alone may change it
(``Plan.clocked``): such a cycle is counted but not run. So is one after
arrivals only, each sorting after the last job the queue depth let that
cycle consider (``core.cycle.beyond_cut``).

**Steering** (``steer``, ``wake``): a function may replace each cycle's
plan before the book carries it out, and ``wake`` adds cycles at given
times. So a replay can follow another scheduler's starts (its jobs, nodes and
times) while the profile still decides, cycle by cycle, what it would have
done in that same state: decisions compared one at a time, without the
cascade that one different decision sets off (``benchmarks/vs_slurm.py``).
A steered replay skips no cycle.

**Predictions** (``engine.estimates``, as the controller keeps them): with
a predictor, a job carries its runtime estimate from its arrival, and the
predictor is told of each job when it finishes, so no estimate uses a job
that had not finished yet. Before a cycle that follows new finishes, the
waiting jobs are estimated again.

**MIG re-partitioning** (``policies.migplan``): the job book begins a
plan's layout change once nothing runs on the GPU (it drains meanwhile);
the GPU then takes no work for the planner's ``reconfigure_s``, and has its
new layout after. The result counts the changes. With a planner, a MIG job
that no GPU is cut to hold is not unschedulable when some GPU could be
re-cut for it.

**Windows** (``policies.windows.WindowSwitch``, as the controller keeps
them): at each time the open windows change, the scheduling profile, QoS,
partitions and the fleet's autoscaler switch to that set's (``Regime``),
and the result lists the switches.

**Autoscaling** (``sim.autoscale``): with a ``Fleet``, the pools' nodes
come and go. The pools' ``min_nodes`` are up from the start; after each
instant with a cycle, a run's end, a booted node or the autoscaler's wake
time, the fleet decides, a node asked for comes up ``boot_s`` later, and an
idle node deleted leaves at once. Every job is checked against the cluster
at the pools' full size, so one only a pool node can hold waits for it, and
the result's capacity (what utilisation is measured against) is that size.

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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from pydantic import Field, field_validator

from gpufleet.core.accounts import ROOT, Account, AccountTree, User
from gpufleet.core.cycle import SchedulingProfile, Snapshot, beyond_cut, run_cycle
from gpufleet.core.fragmentation import FragmentationMeter, Workload
from gpufleet.core.job import Job, JobState, Partition, QoS, Reservation, RunningJob
from gpufleet.core.model import MILLI, Node
from gpufleet.core.placement import Placer
from gpufleet.core.plan import Plan
from gpufleet.core.state import Assignment, ClusterState
from gpufleet.engine.book import JobBook, RunEnd, Started
from gpufleet.engine.estimates import Estimates
from gpufleet.engine.fleet import Fleet
from gpufleet.engine.ledger import UsageLedger
from gpufleet.policies.autoscale import Autoscaler
from gpufleet.policies.fairshare import FairshareArgs
from gpufleet.policies.migplan import recut_for
from gpufleet.policies.tables import StrictTable
from gpufleet.policies.windows import WindowSwitch
from gpufleet.sim.autoscale import SimProvider
from gpufleet.sim.events import Event, EventQueue, Kind
from gpufleet.sim.faults import FaultModel
from gpufleet.sim.traces.record import TraceJob, follow_problems

PREEMPTIBLE_QOS = "preemptible"
"""The QoS of preemptible trace jobs; the others' QoS is their priority class."""

DEFAULT_ACCOUNT = "default"
WINDOW_PATIENCE_S = 8 * 86_400
"""With policy windows, how long a replay waits for one to let a stuck queue run."""
FRUITLESS_PER_JOB = 10
"""Preemptions in a row, per job waiting or running, with no job ending and no run
reaching a checkpoint meanwhile, after which a replay stops as a livelock (``NoProgress``)."""


class NoProgress(ValueError):
    """The replay preempts jobs over and over and none of them gets anywhere."""


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


class SimConfig(StrictTable):
    """The driver's settings (the ``[sim]`` table of a policy file)."""

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
        300, ge=0, description="fairshare recomputed at each multiple of this (PriorityCalcPeriod)"
    )
    sample_s: int | None = Field(
        None, gt=0, description="time series step; None: about 500 samples over the trace"
    )
    time_origin: str | None = Field(
        None,
        description="what the trace's time 0 is, for policy windows: 'epoch' (its times are "
        "Unix seconds) or an ISO 8601 date and time",
    )

    @field_validator("time_origin")
    @classmethod
    def _origin(cls, value: str | None) -> str | None:
        if value is not None and value != "epoch":
            try:
                datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(
                    "must be 'epoch' or an ISO 8601 time such as 2026-03-02T00:00:00Z, "
                    f"got {value!r}"
                ) from None
        return value

    def origin(self) -> int | None:
        """The Unix time of the trace's time 0 (None: not given); a time without a zone is UTC."""
        if self.time_origin is None:
            return None
        if self.time_origin == "epoch":
            return 0
        at = datetime.fromisoformat(self.time_origin)
        return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp())


def to_job(t: TraceJob, config: SimConfig, qos: Collection[str] = ()) -> Job:
    """The core job a trace job becomes (see the module docstring); ``qos``: the
    QoS names the replay defines."""
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
        qos=PREEMPTIBLE_QOS if t.preemptible else t.qos if t.qos in qos else t.priority_class,
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
    of the cluster even when idle, or ``"unsubmitted"`` for one that follows
    a job that never ended. ``submit_time`` is when it was submitted: the
    trace's, or for a follower the time its predecessor's end set (until that
    end, the trace's). GPU-second counters are in GPU-seconds.
    ``assignments`` is where the current run holds resources (empty between
    runs); ``last_assignments`` where the latest run was placed, kept after it.
    """

    trace: TraceJob
    job: Job
    gpus: float
    remaining: int
    submit_time: int
    state: str = JobState.PENDING.value
    run: int = 0
    run_start: int = -1
    last_checkpoint: int = -1
    first_start: int = -1
    end: int = -1
    assignments: tuple[Assignment, ...] = ()
    last_assignments: tuple[Assignment, ...] = ()
    preemptions: int = 0
    failures: int = 0
    requeues: int = 0
    allocated_gpu_s: float = 0.0
    saved_gpu_s: float = 0.0
    lost_preemption_gpu_s: float = 0.0
    lost_failure_gpu_s: float = 0.0
    lost_other_gpu_s: float = 0.0
    predicted_s: int = -1  # the runtime estimate it first started with (-1: none)

    @property
    def name(self) -> str:
        """The job's name, when the trace gives one (a prediction feature)."""
        return self.trace.labels.get("name", "")

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
    capacity_milli: int  # every GPU, MIG-enabled ones included (core.state.gpu_milli_installed)
    start: int
    end: int
    alloc_milli_s: float  # integral of allocated milli-GPU over [start, end]
    cycles: int
    wall_s: float
    cycles_skipped: int = 0  # periodic cycles known to decide nothing (see the module docstring)
    entitlement: dict[str, float] = field(default_factory=dict)
    node_failures: int = 0
    windows: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    """Each time the open policy windows changed, and the windows open from then."""
    reconfigurations: int = 0
    """MIG layout changes begun (``policies.migplan``)."""
    fleet: FleetReport | None = None


@dataclass(frozen=True)
class FleetReport:
    """What the pools' nodes cost over a replay with autoscaling (billed to its end)."""

    cost: float
    gpu_hours: float
    created: int
    deleted: int


@dataclass(frozen=True)
class Regime:
    """The policy in force while a set of windows is open."""

    scheduling: SchedulingProfile
    qos: dict[str, QoS]
    partitions: dict[str, Partition]
    autoscaler: Autoscaler


SCALE_AFTER = frozenset({Kind.JOB_END, Kind.PREEMPT, Kind.NODE_BOOT, Kind.SCALE})
"""Events after which the fleet may decide differently (besides a cycle)."""

ProgressFn = Callable[[int, int], None]
"""Called with (jobs finished, jobs in all) as the replay advances."""

Steer = Callable[[Snapshot, Plan], Plan]
"""Given a cycle's snapshot and the plan the profile made from it, the plan to carry out."""


class Simulation:
    """One replay of ``jobs`` on ``nodes`` under a scheduling profile.

    ``qos`` defaults to ``default_qos``; ``partitions`` are laid over one
    partition (of all nodes) per name the jobs use. ``shares`` maps an
    account to its fairshare shares (its entitlement; 1 when absent).
    ``reservations`` become the snapshot's advance reservations, each
    starting and ending with an event. ``estimates`` estimates each job's
    runtime at its arrival; ``windows`` switches the policy by the hour;
    ``fleet`` grows and shrinks its node pools (``nodes`` are the others).
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
        associations: tuple[Sequence[Account], Sequence[User]] = ((), ()),
        fairshare: FairshareArgs | None = None,
        progress: ProgressFn | None = None,
        estimates: Estimates | None = None,
        windows: WindowSwitch[Regime] | None = None,
        fleet: Fleet | None = None,
        steer: Steer | None = None,
        wake: Collection[int] = (),
    ) -> None:
        self.config = config or SimConfig()
        self.queue = EventQueue()
        self.fleet = fleet
        self.provider = SimProvider(self.queue)
        self.scale_at: int | None = None  # the SCALE event due, if any
        pools = fleet.order if fleet is not None else ()
        initial = [p.node(p.node_name(k)) for p in pools for k in range(1, p.min_nodes + 1)]
        nodes = [*nodes, *initial]
        more = [range(p.min_nodes + 1, p.max_nodes + 1) for p in pools]
        every = [
            *nodes,
            *(p.node(p.node_name(k)) for p, ks in zip(pools, more, strict=True) for k in ks),
        ]
        # Utilisation is measured against the cluster at the pools' full size.
        self.full_milli = sum(len(n.gpus) for n in every) * MILLI if pools else None
        self.estimates = estimates
        self.windows = windows
        self.name = name or scheduling.ordering.NAME
        self.sched = scheduling
        self.qos = qos or default_qos(preempt=scheduling.preemption is not None)
        self.fairshare = fairshare
        self.progress = progress
        self.steer = steer
        self.wake_until = max(wake, default=None)  # cycles are due until then
        for at in sorted(set(wake)):
            self.queue.push(at, Kind.SCHEDULE, "wake")
        self.records: dict[str, JobRecord] = {}
        self.followers: defaultdict[str, list[str]] = defaultdict(list)  # by the job they follow
        self.now = 0
        self.done = 0
        self._build_records(every, jobs, reservations)
        names = sorted({r.job.partition for r in self.records.values()})
        self.trace_partitions = {n: Partition(n) for n in names}
        self.book = JobBook(
            nodes,
            self.qos,
            {**self.trace_partitions, **(partitions or {})},
            ledger=self._build_ledger(shares or {}, associations),
            reservations=reservations,
            estimates=scheduling.estimates,
        )
        self.faults = (
            FaultModel(self.config.mtbf_s, self.config.mttr_s, self.config.seed)
            if self.config.mtbf_s
            else None
        )
        self.meter = self._meter(jobs)
        self.alloc_milli = 0
        self.held_milli: defaultdict[str, int] = defaultdict(int)  # allocated, per account
        self.waiting: defaultdict[str, int] = defaultdict(int)  # pending jobs per account
        self.alloc_area = 0.0
        self.last_advance = 0
        self.last_cycle = -(10**18)
        self.deferred = False
        self.tick_at: int | None = None
        self.settled = False  # the last cycle decided nothing and nothing happened since
        self.last: tuple[Snapshot, Plan] | None = None  # the last cycle's snapshot and plan
        self.cycles = 0
        self.skipped = 0
        self.failures = 0
        self.fruitless: dict[str, int] = defaultdict(int)  # job -> preemptions since progress
        self.fruitless_count = 0  # their sum
        self.fruitless_since = 0  # the last job's end or checkpoint
        self.fruitless_longest = 0  # the longest of those preempted runs, in seconds
        self.reconfigurations = 0
        self.last_start = 0
        self.samples: list[Sample] = []
        self.next_sample = 0
        self.sample_s = self.config.sample_s or self._default_sample_s(jobs)

    @property
    def state(self) -> ClusterState:
        return self.book.state

    @property
    def pending(self) -> Mapping[str, Job]:
        return self.book.pending

    @property
    def running(self) -> Mapping[str, RunningJob]:
        return self.book.running

    # -- set-up ----------------------------------------------------------------
    def _build_records(
        self, nodes: Sequence[Node], jobs: Sequence[TraceJob], reservations: Sequence[Reservation]
    ) -> None:
        idle = ClusterState(nodes)
        placer = Placer(self.sched.placement)
        fits: dict[object, bool] = {}
        for t in jobs:
            if t.id in self.records:
                raise ValueError(f"job {t.id}: id appears twice in the trace")
            job = to_job(t, self.config, self.qos)
            rec = JobRecord(t, job, job.gpu_milli / MILLI, t.duration_s, t.submit_time)
            r = t.request
            if r not in fits:
                fits[r] = placer.fits_empty(idle, r) or (
                    self.sched.repartition is not None
                    and bool(r.mig_profile)
                    and placer.fits_empty(ClusterState(recut_for(nodes, r.mig_profile)), r)
                )
            if not fits[t.request]:
                rec.state = "unschedulable"
                self.done += 1
            elif t.after is None:
                self.queue.push(t.submit_time, Kind.ARRIVAL, t.id)
            self.records[t.id] = rec
        self._link_followers()
        for res in reservations:
            self.queue.push(res.start, Kind.RESERVATION)
            self.queue.push(res.end, Kind.RESERVATION)

    def _link_followers(self) -> None:
        """Index followers by the job they follow; those of a job that never runs, and
        theirs, are never submitted. ValueError names a job whose ``after`` is wrong."""
        traces = [r.trace for r in self.records.values()]
        problems = follow_problems(traces)
        if problems:
            i, reason = problems[0]
            raise ValueError(f"job {traces[i].id}: after: {reason}")
        for t in traces:
            if t.after is not None:
                self.followers[t.after].append(t.id)
        never = [t.id for t in traces if self.records[t.id].state == "unschedulable"]
        while never:
            for job_id in self.followers[never.pop()]:
                rec = self.records[job_id]
                if rec.state == JobState.PENDING.value:
                    rec.state = "unsubmitted"
                    self.done += 1
                    never.append(job_id)

    def _build_ledger(
        self, shares: dict[str, float], associations: tuple[Sequence[Account], Sequence[User]]
    ) -> UsageLedger | None:
        """The fairshare ledger (None without fairshare); sets ``entitlement``.

        The tree is the profile's accounts and users (its hierarchy, shares and
        ``FairShare=parent`` users), plus the trace's other associations: their
        accounts under the root with ``shares`` (1 when absent), their users with
        one share. Slurm's own ``root`` account holds no association, so its
        jobs bill nobody.
        """
        accounts, users = associations
        jobs = self.records.values()
        pairs = sorted({(r.job.account, r.job.user) for r in jobs if r.job.account != ROOT})
        names = sorted({a for a, _ in pairs})
        defined = {a.name for a in accounts}
        held = {(u.account, u.name) for u in users}
        more = [Account(a, shares=shares.get(a, 1.0)) for a in names if a not in defined]
        tree = AccountTree(
            [*accounts, *more], [*users, *(User(u, a) for a, u in pairs if (a, u) not in held)]
        )
        norm = tree.normalized_shares()
        self.entitlement = {a: float(norm[tree.account(a)]) for a in names}
        if self.fairshare is None:
            return None
        return UsageLedger(tree, self.fairshare, self.qos, self.config.priority_calc_s)

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
        self.now = self.last_advance = self.last_start = first or 0
        if self.windows is not None:
            self._switch_windows()
        if self.fleet is not None:
            for member in self.state.nodes:
                self.fleet.adopt(member.name, self.now)
        self.next_sample = self.now
        reported = -1
        while len(self.queue) and self.done < total:
            t = self.queue.peek_time()
            assert t is not None
            self._advance(t)
            wanted = scale = False
            while len(self.queue) and self.queue.peek_time() == t:
                ev = self.queue.pop()
                scale |= ev.kind in SCALE_AFTER
                if self._handle(ev):
                    wanted = True
                    # Once unsettled, no arrival needs testing against the last cut.
                    self.settled = self.settled and (
                        ev.kind is Kind.SCHEDULE or self._beyond_cut(ev)
                    )
            if wanted:
                cycles = self.cycles
                self._maybe_cycle(t)
                scale |= self.cycles != cycles
            if scale and self.fleet is not None:
                self._scale()
            self._sample()
            if self.progress is not None and self.done != reported:
                reported = self.done
                self.progress(self.done, total)
            if self._stalled():
                break
        for r in self.records.values():
            after = r.trace.after
            if after is None or r.state != JobState.PENDING.value:
                continue
            if self.records[after].end < 0:  # it still waits for a job that never ended
                r.state = "unsubmitted"
        end = max((r.end for r in self.records.values() if r.end >= 0), default=self.now)
        self._advance(max(end, self.now))
        self._sample(force=True)
        start = min((r.submit_time for r in self.records.values()), default=0)
        fleet = self.fleet
        return SimResult(
            fleet=None
            if fleet is None
            else FleetReport(fleet.cost(end), fleet.gpu_hours(end), fleet.created, fleet.deleted),
            profile=self.name,
            jobs=list(self.records.values()),
            samples=self.samples,
            capacity_milli=self.full_milli or self.state.gpu_milli_installed,
            start=start,
            end=end,
            windows=self.windows.switches if self.windows is not None else [],
            alloc_milli_s=self.alloc_area,
            cycles=self.cycles,
            wall_s=wallclock.perf_counter() - started,
            cycles_skipped=self.skipped,
            entitlement=self.entitlement,
            node_failures=self.failures,
            reconfigurations=self.reconfigurations,
        )

    def _stalled(self) -> bool:
        """Nothing runs, nothing more arrives, and the last cycle started nobody."""
        if self.running or self.deferred or not self.pending:
            return False
        if self.wake_until is not None and self.now < self.wake_until:
            return False
        if self.faults is not None and not bool(self.state.healthy.all()):
            return False
        if self.now - self.last_start < WINDOW_PATIENCE_S and (
            self.windows is not None or self.sched.repartition is not None
        ):
            return False  # a window opening later, or a GPU re-cut later, may let them run
        return self.cycles > 0 and not self.queue.holds(
            {
                Kind.ARRIVAL,
                Kind.RESERVATION,
                Kind.NODE_REPAIR,
                Kind.MIG_READY,
                Kind.NODE_BOOT,
                Kind.SCALE,
            }
        )

    def _advance(self, t: int) -> None:
        self.alloc_area += self.alloc_milli * (t - self.last_advance)
        self.last_advance = t
        self.now = t

    def _maybe_cycle(self, t: int) -> None:
        if not self.pending:
            return  # with nobody waiting a cycle can start or preempt nothing
        due = self.last_cycle + self.config.min_gap_s
        if t >= due and self.settled and self._holds(t) and self.steer is None:
            self.cycles += 1
            self.skipped += 1
            self.last_cycle = t
            self._arm_tick()
        elif t >= due:
            self.cycle()
        elif not self.deferred:
            self.deferred = True
            self.queue.push(due, Kind.SCHEDULE, "deferred")

    def _handle(self, ev: Event) -> bool:
        """Apply one event; True when a scheduling cycle should follow."""
        match ev.kind:
            case Kind.ARRIVAL:
                rec = self.records[str(ev.key)]
                if self.estimates is not None:
                    rec.job = self.estimates.stamp(rec.job, rec.name)
                self.book.submit(rec.job)
                self.waiting[rec.job.account] += 1
                return True
            case Kind.JOB_END:
                rec = self.records[str(ev.key)]
                if rec.run != ev.run or rec.state != JobState.RUNNING.value:
                    return False
                self._finished(rec, self.book.finish(rec.job.id, self.now))
                return True
            case Kind.PREEMPT:
                rec = self.records[str(ev.key)]
                if rec.run != ev.run or rec.state != JobState.RUNNING.value:
                    return False
                requeue = self.book.signals[rec.job.id].mode == "requeue"
                end = self.book.stop(rec.job.id, self.now, requeue=requeue)
                self._stopped(rec, end, cause="preemption")
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
            case Kind.WINDOW:
                self._switch_windows()
                return True
            case Kind.MIG_READY:
                node, _, gpu = str(ev.key).rpartition(":")
                self.book.reconfigured(node, int(gpu))
                return True
            case Kind.NODE_BOOT:
                return self._booted(str(ev.key))
            case Kind.SCALE:
                if ev.time == self.scale_at:
                    self.scale_at = None
                return False
            case _:  # Kind.SCHEDULE
                if ev.key == "deferred":
                    self.deferred = False
                elif ev.key == "tick":
                    self.tick_at = None
                return True

    # -- the cycle -------------------------------------------------------------
    def cycle(self) -> Plan:
        """Run one scheduling cycle now and let the book apply its plan."""
        now = self.now
        if self.estimates is not None:
            for job in self.estimates.revise(self.book, self._name):
                self.records[job.id].job = job
        snapshot = self.book.snapshot(now)
        # Only the clock moved since a plan that changed nothing (see run_cycle).
        steady = self.settled and self.steer is None
        settled = self.last[1] if steady and self.last is not None else None
        plan = run_cycle(snapshot, self.sched, now, settled)
        if self.steer is not None:
            plan = self.steer(snapshot, plan)
        self.last = snapshot, plan
        self.cycles += 1
        self.last_cycle = now
        effects = self.book.apply(plan, now)
        for end in effects.stopped:
            rec = self.records[end.job_id]
            rec.preemptions += 1
            self._stopped(rec, end, cause="preemption")
        for sig in effects.signalled:
            self.records[sig.job_id].preemptions += 1
            self.queue.push(sig.deadline, Kind.PREEMPT, sig.job_id, sig.run)
        for started in effects.started:
            self._started(self.records[started.job_id], started)
        if effects.relayouts:
            assert self.sched.repartition is not None
            ready = now + self.sched.repartition.reconfigure_s
            for change in effects.relayouts:
                self.queue.push(ready, Kind.MIG_READY, f"{change.node}:{change.gpu}")
            self.reconfigurations += len(effects.relayouts)
        self.settled = not (
            plan.starts
            or plan.preemptions
            or (plan.clocked and plan.wake is None)
            or effects.deferred
            or plan.relayouts
        )
        self._arm_tick()
        return plan

    def _holds(self, t: int) -> bool:
        """Whether the last plan, if clocked, still holds at ``t``: its wake time is
        ahead, and so is the next fairshare usage its ordering would see."""
        if self.last is None or not self.last[1].clocked:
            return True
        wake, ledger = self.last[1].wake, self.book.ledger
        if wake is None or t >= wake:
            return False
        view = ledger.next_view() if ledger is not None else None
        return ledger is None or (view is not None and t < view)

    def _beyond_cut(self, ev: Event) -> bool:
        """An arrival the last cycle's queue depth would have left out changes nothing."""
        if ev.kind is not Kind.ARRIVAL or self.last is None:
            return False
        snapshot, plan = self.last
        return beyond_cut(plan, self.sched, snapshot, self.records[str(ev.key)].job, self.now)

    def _arm_tick(self) -> None:
        if self.config.interval_s and self.pending and self.tick_at is None:
            self.tick_at = self.now + self.config.interval_s
            self.queue.push(self.tick_at, Kind.SCHEDULE, "tick")

    def _name(self, job_id: str) -> str:
        return self.records[job_id].name

    # -- runs ------------------------------------------------------------------
    def _started(self, rec: JobRecord, started: Started) -> None:
        now, job = self.now, rec.job
        self.waiting[job.account] -= 1
        rec.run = started.run
        rec.state = JobState.RUNNING.value
        rec.run_start = now
        rec.last_checkpoint = -1
        rec.assignments = rec.last_assignments = started.assignments
        if rec.first_start < 0:
            rec.first_start = now
            if self.estimates is not None:
                rec.predicted_s = job.expected_runtime_s
        self.last_start = now
        length = min(rec.remaining, job.time_limit_s)
        self.alloc_milli += job.gpu_milli
        self.held_milli[job.account] += job.gpu_milli
        self.queue.push(now + length, Kind.JOB_END, job.id, rec.run)
        interval = job.checkpoint_interval_s
        if interval is not None and interval < length:
            self.queue.push(now + interval, Kind.CHECKPOINT, job.id, rec.run)

    def _checkpoint(self, job_id: str, run: int) -> None:
        rec = self.records[job_id]
        if rec.run != run or rec.state != JobState.RUNNING.value:
            return
        rec.last_checkpoint = self.now
        self._progressed()
        self.book.checkpoint(job_id, self.now)
        interval = rec.job.checkpoint_interval_s
        assert interval is not None
        if self.now + interval < rec.run_start + min(rec.remaining, rec.job.time_limit_s):
            self.queue.push(self.now + interval, Kind.CHECKPOINT, job_id, run)

    def _ended(self, rec: JobRecord, end: RunEnd) -> int:
        """The record's share of a run's end; return how long the run lasted."""
        self.alloc_milli -= rec.job.gpu_milli
        self.held_milli[rec.job.account] -= rec.job.gpu_milli
        rec.allocated_gpu_s += rec.gpus * end.elapsed
        rec.assignments = ()
        return end.elapsed

    def _finished(self, rec: JobRecord, end: RunEnd) -> None:
        elapsed = self._ended(rec, end)
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
        self._release(rec)
        if self.estimates is not None:  # learnt now, when the job is known to be over
            # A run the trace says failed fails when it reaches its end (not its limit).
            failed = rec.trace.failed and not rec.remaining
            ran = rec.trace.duration_s - rec.remaining
            self.estimates.finished(rec.job, rec.name, ran, failed=failed)

    def _release(self, rec: JobRecord) -> None:
        """The job has ended: its followers are submitted after their think time."""
        self._progressed()
        for job_id in self.followers[rec.job.id]:
            follower = self.records[job_id]
            if follower.state != JobState.PENDING.value:
                continue  # it fits no node
            at = max(follower.trace.submit_time, self.now + follower.trace.think_s)
            follower.submit_time = at
            follower.job = replace(follower.job, submit_time=at)
            self.queue.push(at, Kind.ARRIVAL, job_id)

    def _stopped(self, rec: JobRecord, end: RunEnd, *, cause: str) -> None:
        """A run ended early (preemption or failure): keep the checkpointed work."""
        elapsed = self._ended(rec, end)
        kept = rec.last_checkpoint - rec.run_start if rec.last_checkpoint >= 0 else 0
        lost = rec.gpus * (elapsed - kept)
        if cause == "preemption":
            rec.lost_preemption_gpu_s += lost
            self._fruitless(rec, elapsed)
        else:
            rec.lost_failure_gpu_s += lost
        rec.saved_gpu_s += rec.gpus * kept
        rec.remaining -= kept
        if end.outcome == "cancelled":
            rec.state = JobState.CANCELLED.value
            rec.end = self.now
            rec.lost_other_gpu_s += rec.saved_gpu_s
            rec.saved_gpu_s = 0.0
            self.done += 1
            self._release(rec)
            return
        rec.state = JobState.PENDING.value
        rec.requeues += 1
        rec.job = end.job  # the job as queued again, its attained service grown
        self.waiting[rec.job.account] += 1

    def _progressed(self) -> None:
        if self.fruitless:
            self.fruitless.clear()
            self.fruitless_count = self.fruitless_longest = 0
        self.fruitless_since = self.now

    def _fruitless(self, rec: JobRecord, elapsed: int) -> None:
        """Count a preemption since the last progress; NoProgress once they are so many
        that the jobs only take turns losing their work (a LAS quantum shorter than
        their checkpoint interval: each run is stopped before it saves anything)."""
        job = rec.job
        self.fruitless[job.id] += 1
        self.fruitless_count += 1
        self.fruitless_longest = max(self.fruitless_longest, elapsed)
        count = self.fruitless_count
        if count <= FRUITLESS_PER_JOB * (len(self.pending) + len(self.running)):
            return
        worst = max(self.fruitless, key=lambda i: self.fruitless[i])
        interval = self.records[worst].job.checkpoint_interval_s
        saves = f"checkpoints every {interval} s" if interval else "never checkpoints"
        raise NoProgress(
            f"{self.name}: the replay makes no progress: {count} preemptions since "
            f"t={self.fruitless_since} s, with no job ending and no run reaching a "
            f"checkpoint; job {worst} was stopped {self.fruitless[worst]} times, "
            f"after at most {self.fruitless_longest} s each, and {saves}, so it starts over "
            "each time: let jobs run longer before preemption ([preemption] quantum_s well "
            "above the checkpoint interval) or checkpoint more often (checkpoint_interval_s)"
        )

    # -- policy windows --------------------------------------------------------
    def _switch_windows(self) -> None:
        """Put in force the policy of the windows open now; wake at the next change."""
        assert self.windows is not None
        regime = self.windows.switch(self.now)
        if regime is not None:
            self.sched = regime.scheduling
            self.book.qos = regime.qos
            self.book.partitions = {**self.trace_partitions, **regime.partitions}
            if self.fleet is not None:
                self.fleet.scaler = regime.autoscaler
        change = self.windows.next_change(self.now)
        if change is not None:
            self.queue.push(change, Kind.WINDOW)

    # -- faults ----------------------------------------------------------------
    def _fail(self, node: int) -> None:
        assert self.faults is not None
        if not self.state.healthy[node]:
            return
        self.failures += 1
        for end in self.book.node_down(node, self.now):
            rec = self.records[end.job_id]
            rec.failures += 1
            self._stopped(rec, end, cause="failure")
        self.queue.push(self.now + self.faults.repair_after(), Kind.NODE_REPAIR, node)

    def _repair(self, node: int) -> None:
        assert self.faults is not None
        self.book.node_up(node)
        self.queue.push(self.now + self.faults.fail_after(), Kind.NODE_FAIL, node)

    # -- autoscaling -----------------------------------------------------------
    def _scale(self) -> None:
        """Let the fleet decide (module docstring) and carry out its orders."""
        assert self.fleet is not None
        reasons: dict[str, str] = {}
        planned: set[str] = set()
        if self.last is not None:
            snapshot, plan = self.last
            reasons = plan.reasons
            names = snapshot.state.nodes  # the plan's node indices are that state's
            planned = {names[i].name for ix in plan.expected_nodes.values() for i in ix}
        orders = self.fleet.step(self.book, reasons, planned, self.now)
        for pool, name in orders.delete:
            if name in self.state.index:
                self.book.remove_node(name)
            self.provider.delete(pool, name, self.now)
        for pool, node in orders.create:
            self.provider.create(pool, node, self.now)
        wake = orders.wake
        if wake is not None and wake > self.now and (self.scale_at is None or wake < self.scale_at):
            self.scale_at = wake
            self.queue.push(wake, Kind.SCALE)

    def _booted(self, name: str) -> bool:
        """A pool node's boot is over: it joins the cluster (unless deleted meanwhile)."""
        assert self.fleet is not None
        node = self.provider.booted(name)
        if node is None:
            return False
        self.book.add_node(node)
        self.fleet.joined(name, self.now)
        return True

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
                {a: m for a, m in self.held_milli.items() if m or self.waiting[a]}
                | {a: 0 for a, n in self.waiting.items() if n and a not in self.held_milli},
            )
        )
        self.next_sample = self.now + self.sample_s
