"""The neutral job record every trace loader produces.

A ``TraceJob`` says what a job asked for and how long it really ran, nothing
about how any scheduler treated it, so a replay driver can turn it into its
own job type. Times are whole seconds from the trace's origin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.core.model import MAX_AMOUNT, MILLI, InvalidSpec, Request

PRIORITY_CLASSES = ("high", "normal", "low")
"""Coarse priority tiers a trace can express; policies map them to numbers."""
FAILED_STATES = frozenset({"failed", "out_of_memory", "node_fail"})
"""End states (``labels["status"]`` or ``labels["state"]``, any case) of a job that
failed: Slurm's FAILED, OUT_OF_MEMORY and NODE_FAIL, Philly's and PAI's Failed."""
_TIMES = ("submit_time", "duration_s", "time_limit_s", "checkpoint_interval_s", "think_s")


def priority_class_problem(value: str) -> str | None:
    """Why ``value`` is not a priority class; None if it is one."""
    if value in PRIORITY_CLASSES:
        return None
    return f"must be one of {', '.join(PRIORITY_CLASSES)}, got {value!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceJob:
    """One job of a workload trace.

    ``duration_s`` is the runtime the job actually had (what the replay
    charges), ``time_limit_s`` the limit the user asked for (None: no
    limit). ``request`` is one task's share; a gang over ``request.nodes``
    nodes needs it on each. ``checkpoint_interval_s`` (None: never) bounds
    the work lost when the job is preempted or its node fails. ``labels``
    keeps what else the trace says about the job (a column no field takes,
    a GPU type), for reports and for policies that read it.

    ``after`` names the job of the same trace this one follows (None: none):
    its user submits it only once that job has ended, ``think_s`` seconds
    later, and never if that job never runs (closed-loop replay, after
    Zakay and Feitelson, MASCOTS 2014). ``submit_time`` is then the earliest
    it is submitted; the replay submits it at the later of the two.
    ``follow_problems`` checks that the jobs named exist and form no cycle.
    """

    id: str
    submit_time: int
    duration_s: int
    request: Request
    user: str = ""
    account: str = ""
    qos: str = ""
    partition: str = ""
    time_limit_s: int | None = None
    preemptible: bool = False
    priority_class: str = "normal"
    checkpoint_interval_s: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    after: str | None = None
    think_s: int = 0

    def __post_init__(self) -> None:
        if not self.id:
            raise InvalidSpec("id", "must not be empty")
        if self.submit_time < 0:
            raise InvalidSpec("submit_time", f"must be zero or more, got {self.submit_time}")
        if self.duration_s < 0:
            raise InvalidSpec("duration_s", f"must be zero or more, got {self.duration_s}")
        for name in ("time_limit_s", "checkpoint_interval_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidSpec(name, f"must be more than zero (or absent), got {value}")
        # The replay adds and counts times in 64-bit integers, as the core does amounts.
        for name in _TIMES:
            value = getattr(self, name)
            if value is not None and value > MAX_AMOUNT:
                raise InvalidSpec(name, f"must be at most {MAX_AMOUNT} s, got {value}")
        if problem := priority_class_problem(self.priority_class):
            raise InvalidSpec("priority_class", problem)
        if self.after is not None and not self.after:
            raise InvalidSpec("after", "must not be empty (absent: it follows no job)")
        if self.after == self.id:
            raise InvalidSpec("after", f"names the job itself ({self.id!r})")
        if self.think_s < 0:
            raise InvalidSpec("think_s", f"must be zero or more, got {self.think_s}")
        if self.think_s and self.after is None:
            raise InvalidSpec("think_s", "needs after: the time counts from that job's end")

    @property
    def failed(self) -> bool:
        """Whether the trace says the run ended in failure (a runtime predictor learns it)."""
        status = self.labels.get("status") or self.labels.get("state", "")
        return status.lower() in FAILED_STATES

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds the job consumes when it runs to completion (fractions count)."""
        return self.request.total_gpu_milli * self.duration_s / 1000


def follow_problems(jobs: Sequence[TraceJob]) -> list[tuple[int, str]]:
    """What is wrong with the jobs' ``after`` references: (index in ``jobs``, reason),
    by index. A job may name only a job of ``jobs``, and following the names from
    any job must not come back to it (each job on a cycle is listed)."""
    index = {job.id: i for i, job in enumerate(jobs)}
    problems: dict[int, str] = {}
    seen = [False] * len(jobs)
    for start in range(len(jobs)):
        path: list[int] = []
        on_path: dict[int, int] = {}  # index -> position in path
        i: int | None = start
        while i is not None and not seen[i]:
            seen[i] = True
            on_path[i] = len(path)
            path.append(i)
            after = jobs[i].after
            if after is None:
                i = None
            elif after not in index:
                problems[i] = f"no job {after!r} in the trace"
                i = None
            else:
                i = index[after]
        if i is not None and i in on_path:
            cycle = path[on_path[i] :]
            names = " -> ".join(jobs[k].id for k in [*cycle, cycle[0]])
            for k in cycle:
                problems[k] = f"a cycle: {names}"
    return sorted(problems.items())


def whole_gpus(
    gpus: int, gpus_per_node: int, *, cpu_milli: int = 0, memory_mib: int = 0
) -> Request:
    """Request ``gpus`` whole GPUs: on one node when they fit, else a gang of full nodes.

    A job larger than a node takes ``ceil(gpus / gpus_per_node)`` whole nodes,
    so 12 GPUs on 8-GPU nodes become 2 x 8 (rounded up, since a job that big
    is laid out per node). ``cpu_milli`` and ``memory_mib`` are per task.
    """
    if gpus_per_node <= 0:
        raise InvalidSpec("gpus_per_node", f"must be more than zero, got {gpus_per_node}")
    if gpus <= gpus_per_node:
        return Request(gpus=gpus, cpu_milli=cpu_milli, memory_mib=memory_mib)
    nodes = -(-gpus // gpus_per_node)
    return Request(gpus=gpus_per_node, nodes=nodes, cpu_milli=cpu_milli, memory_mib=memory_mib)


def gpu_share(percent: float) -> tuple[int, int]:
    """(whole GPUs, milli of one shared GPU) for ``percent`` of a GPU (100: one GPU).

    Below one GPU it is a share of one, 1..999 milli: a share that rounds to
    1000 milli is the whole GPU, and one that rounds to 0 still asks for a
    GPU (1 milli). From one GPU up, whole GPUs rounded up. 0 or less: none.
    """
    if percent <= 0:
        return 0, 0
    milli = round(percent * MILLI / 100)
    if milli < MILLI:
        return 0, max(1, milli)
    return math.ceil(percent / 100), 0


def by_submit(jobs: list[TraceJob]) -> list[TraceJob]:
    """Jobs ordered by submit time; ties keep the trace's order (the sort is stable)."""
    return sorted(jobs, key=lambda job: job.submit_time)
