"""Jobs and the queue's vocabulary: QoS, partitions and advance reservations.

These are immutable values handed to the scheduling cycle. Times are integer
seconds on the driver's clock (virtual in the simulator, wall-clock in the
controller); the core never reads a clock itself. Names follow Slurm's where
one exists, so an operator's settings carry over.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Literal

from gpufleet.core.constraints import parse_constraint
from gpufleet.core.model import MILLI, InvalidSpec, Request
from gpufleet.core.state import Assignment

PreemptMode = Literal["requeue", "cancel"]
PartitionState = Literal["up", "down", "drain", "inactive"]
"""Slurm's partition states: ``down`` and ``inactive`` start no job ("PartitionDown",
"PartitionInactive"); ``drain`` and ``inactive`` take no new submissions (a driver's
concern), ``drain`` still starts what is queued."""


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


def _non_negative(name: str, value: float | None) -> None:
    if value is not None and value < 0:
        raise InvalidSpec(name, f"must be zero or more, got {value}")


@dataclass(frozen=True, slots=True)
class Job:
    """One job: who asks, under which QoS and partition, for what and how long.

    ``request`` is one task's shape; a gang (``request.nodes`` > 1) runs one
    task on each of that many nodes. ``time_limit_s`` is the wall-time limit
    the user asked for (backfill plans with it); ``runtime_estimate_s`` is a
    predictor's estimate when there is one (shortest-job-first prefers it).
    ``gpu_seconds_attained`` is the GPU service received so far, over all
    previous runs (least-attained-service ordering); ``requeued_at`` when a
    requeue last put the job back in the queue (None: never). ``checkpoint_interval_s``
    is None for a job that does not checkpoint; ``last_checkpoint`` is the
    time of the latest checkpoint while it runs. ``dependencies`` are ids of
    jobs that must have left the queue and finished first (Slurm's afterany).

    Node constraints (``core.constraints``; sbatch's options): ``nodelist``
    names the nodes the job may run on, ``exclude`` nodes it may not,
    ``constraint`` selects nodes by feature (labels, with ``&`` and ``|``).
    An ``exclusive`` job takes whole nodes: it goes only where nothing runs,
    and nothing else goes where it runs. ``begin_time`` is the earliest
    start (``--begin``; 0: none); before it the job waits with "BeginTime".
    """

    id: str
    user: str
    account: str
    qos: str
    partition: str
    request: Request
    submit_time: int
    time_limit_s: int
    priority_nice: int = 0
    state: JobState = JobState.PENDING
    start_time: int | None = None
    gpu_seconds_attained: float = 0.0
    requeued_at: int | None = None
    checkpoint_interval_s: int | None = None
    last_checkpoint: int | None = None
    reservation: str = ""
    hold: bool = False
    dependencies: tuple[str, ...] = ()
    runtime_estimate_s: int | None = None
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    constraint: str = ""
    exclusive: bool = False
    begin_time: int = 0

    def __post_init__(self) -> None:
        if not self.id:
            raise InvalidSpec("job.id", "must not be empty")
        if self.time_limit_s <= 0:
            raise InvalidSpec(
                "job.time_limit_s", f"must be more than zero, got {self.time_limit_s}"
            )
        _non_negative("job.gpu_seconds_attained", self.gpu_seconds_attained)
        _non_negative("job.runtime_estimate_s", self.runtime_estimate_s)
        if self.checkpoint_interval_s is not None and self.checkpoint_interval_s <= 0:
            raise InvalidSpec("job.checkpoint_interval_s", "must be more than zero when given")
        if self.state is JobState.RUNNING and self.start_time is None:
            raise InvalidSpec("job.start_time", "a running job needs its start time")
        _non_negative("job.begin_time", self.begin_time)
        if self.constraint:
            parse_constraint(self.constraint)  # InvalidSpec names the field

    @property
    def constraints(self) -> tuple[tuple[str, ...], tuple[str, ...], str, bool]:
        """Everything that narrows where the job may go beyond its request (a cache key)."""
        return self.nodelist, self.exclude, self.constraint, self.exclusive

    @property
    def gpu_milli(self) -> int:
        """Milli-GPU the whole job holds, counted as limits and usage count it."""
        return gpu_milli_equivalent(self.request)

    @property
    def expected_runtime_s(self) -> int:
        """How long the job is expected to hold its nodes: its estimate, never past its
        limit (the hard bound); the limit when it has none."""
        if self.runtime_estimate_s is None:
            return self.time_limit_s
        return max(1, min(self.runtime_estimate_s, self.time_limit_s))


@lru_cache(maxsize=4096)  # a queue repeats a few request shapes many times
def gpu_milli_equivalent(r: Request) -> int:
    """Milli-GPU of a request over all its nodes; a MIG slice counts its compute share.

    A MIG instance of profile ``Ng.*`` holds N of the GPU's 7 compute slices,
    so ``3g.40gb`` counts 3000 // 7 = 428 milli per instance.
    """
    if r.mig_profile:
        slices = int(r.mig_profile.split("g.", 1)[0])
        return slices * MILLI // 7 * r.mig_count * r.nodes
    return r.total_gpu_milli


@dataclass(frozen=True, slots=True)
class QoS:
    """A quality of service: priority, limits, and whom it may preempt.

    Limits of 0 mean "no limit" (Slurm's -1). GPU limits are in whole GPUs
    and compared against milli-GPU held (fractions and MIG slices count their
    share). ``group_gpus`` caps all jobs of the QoS together (GrpTRES=gres/gpu).
    ``preempt_exempt_s`` is the minimum run time before a job of this QoS may
    be preempted (PreemptExemptTime); ``grace_s`` is the time between the
    preemption signal and the requeue or cancel (GraceTime).
    """

    name: str
    priority: int = 0
    preempt: tuple[str, ...] = ()
    preempt_mode: PreemptMode = "requeue"
    grace_s: int = 0
    usage_factor: float = 1.0
    preempt_exempt_s: int = 0
    max_jobs_per_user: int = 0
    max_gpus_per_user: int = 0
    max_gpus_per_account: int = 0
    group_gpus: int = 0
    max_wall_s: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidSpec("qos.name", "must not be empty")
        if self.name in self.preempt:
            raise InvalidSpec(f"qos.{self.name}.preempt", "a QoS cannot preempt itself")
        for key in ("grace_s", "usage_factor", "preempt_exempt_s", "max_jobs_per_user"):
            _non_negative(f"qos.{self.name}.{key}", getattr(self, key))
        for key in ("max_gpus_per_user", "max_gpus_per_account", "group_gpus", "max_wall_s"):
            _non_negative(f"qos.{self.name}.{key}", getattr(self, key))


@dataclass(frozen=True, slots=True)
class Partition:
    """A node pool with its own time limits, access list and priority tier.

    The nodes are those named in ``nodes`` plus those whose ``Node.pool`` is
    in ``pools``; with both empty, every node. Empty ``allowed_accounts`` and
    ``allowed_qos`` admit all. ``priority_job_factor`` feeds the multifactor
    partition factor; ``priority_tier`` decides preemption between partitions
    (a higher tier may preempt jobs of a lower, preemptible one).
    ``checkpoint_dir`` is the storage the live controller gives its jobs'
    checkpoint directories under ('' for one under each job's workdir);
    ``nccl`` the ``NCCL_*`` variables its jobs get (their own environment wins).
    ``state`` is Slurm's partition state (``PartitionState``).
    """

    name: str
    nodes: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    default_time_s: int = 3600
    max_time_s: int = 0
    priority_tier: int = 0
    priority_job_factor: int = 1
    allowed_accounts: tuple[str, ...] = ()
    allowed_qos: tuple[str, ...] = ()
    preemptible: bool = True
    checkpoint_dir: str = ""
    nccl: tuple[tuple[str, str], ...] = ()
    state: PartitionState = "up"

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidSpec("partition.name", "must not be empty")
        # A configuration gives a table; kept as sorted pairs, so the partition stays hashable.
        object.__setattr__(self, "nccl", tuple(sorted(dict(self.nccl).items())))
        for key in ("default_time_s", "max_time_s", "priority_job_factor"):
            _non_negative(f"partition.{self.name}.{key}", getattr(self, key))


@dataclass(frozen=True, slots=True)
class Reservation:
    """An advance reservation: nodes (or a GPU count) held for a time window.

    Give ``nodes`` by name, or ``gpus`` to hold that many GPUs on whole nodes
    chosen when the cycle resolves it. During [start, end) only jobs that
    name the reservation, from an allowed user or account, may use those
    nodes; others may use them only if they finish before ``start``. A
    ``maintenance`` reservation admits nobody.
    """

    name: str
    start: int
    end: int
    nodes: tuple[str, ...] = ()
    gpus: int = 0
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    maintenance: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidSpec("reservation.name", "must not be empty")
        if self.end <= self.start:
            raise InvalidSpec(f"reservation.{self.name}.end", "must be after start")
        if bool(self.nodes) == bool(self.gpus):
            raise InvalidSpec(f"reservation.{self.name}", "give either nodes or gpus")
        _non_negative(f"reservation.{self.name}.gpus", self.gpus)

    def admits(self, job: Job) -> bool:
        """May ``job`` run inside this reservation?"""
        if self.maintenance or job.reservation != self.name:
            return False
        return job.user in self.users or job.account in self.accounts


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding resources: where it runs and when it is expected to end.

    ``expected_end`` is start plus time limit unless the driver knows better;
    backfill plans with it.
    """

    job: Job
    assignments: tuple[Assignment, ...]
    expected_end: int
