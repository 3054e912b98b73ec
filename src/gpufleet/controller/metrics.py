"""What ``/metrics`` reports about the scheduler: counters bumped as things happen,
and an ``Observation`` of the controller's memory taken at scrape time.

The counters live in ``SchedulerMetrics`` (prometheus_client's, thread-safe,
in no global registry, so that several controllers in one process never
share them). The controller records around its cycle and its changes,
never inside a policy: a cycle's duration, its starts, backfilled starts and
preemptions (from ``Plan.stats`` and the effects), submissions and requeues.
They count since the controller started, as Prometheus counters do.

``observe`` reads the in-memory job book, nodes and fairshare ledger under
the controller's lock and returns plain values; it never touches the
store, so a scrape costs one pass over the active jobs and the nodes.
``adapters.prometheus`` turns an observation into metric families.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from gpufleet.controller import fairshare
from gpufleet.controller.live import LiveJob, NodeInfo
from gpufleet.controller.views import FairshareRow
from gpufleet.core.cycle import partition_nodes
from gpufleet.core.job import Partition
from gpufleet.core.model import MILLI
from gpufleet.core.state import ClusterState
from gpufleet.engine.ledger import UsageLedger

CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: a cycle of a small site takes milliseconds, 20,000 pending jobs about a second."""

NO_REASON = "None"
"""A pending job's reason before its first cycle, as Slurm shows it."""


class SchedulerMetrics:
    """The controller's counters and cycle histogram; every method is thread-safe."""

    def __init__(self) -> None:
        self.cycle_seconds = Histogram(
            "gpufleet_scheduler_cycle_duration_seconds",
            "Wall time of one scheduling cycle, its commit included.",
            buckets=CYCLE_BUCKETS,
            registry=None,
        )
        self.submitted = _counter("submitted", "Jobs submitted (each array task counts).")
        self.started = _counter("started", "Job runs started.")
        self.preempted = _counter("preempted", "Running jobs chosen as preemption victims.")
        self.requeued = _counter("requeued", "Runs that ended and went back to the queue.")
        self.backfilled = Counter(
            "gpufleet_jobs_backfilled",
            "Job runs started ahead of a higher-priority job left waiting in their partition.",
            registry=None,
        )

        self.window_open = Gauge(
            "gpufleet_policy_window_open",
            "1 for each policy window in force, 0 for each other one the policy names.",
            ["window"],
            registry=None,
        )
        self.window_switches = Counter(
            "gpufleet_policy_window_switches",
            "Times the policy in force changed at a window boundary.",
            registry=None,
        )

    def windows(self, names: Iterable[str], open_now: Iterable[str]) -> None:
        """Record which of the windows ``names`` are open."""
        now = set(open_now)
        for name in names:
            self.window_open.labels(name).set(1 if name in now else 0)

    def partitions(self, names: Iterable[str]) -> None:
        """Start the per-partition counters of ``names`` at 0, so that their series exist
        (and a first increase is seen) before anything happens in a partition."""
        for name in names:
            for counter in (self.submitted, self.started, self.preempted, self.requeued):
                counter.labels(name)

    def cycle(
        self,
        seconds: float,
        stats: Mapping[str, float],
        started: Iterable[str],
        preempted: Iterable[str],
    ) -> None:
        """Record one cycle: its duration, its plan's stats and the partitions of the jobs
        it started and of the victims it chose."""
        self.cycle_seconds.observe(seconds)
        self.backfilled.inc(stats.get("backfilled", 0.0))
        for partition in started:
            self.started.labels(partition).inc()
        for partition in preempted:
            self.preempted.labels(partition).inc()

    def collect(self) -> Iterator[Metric]:
        for metric in (
            self.cycle_seconds,
            self.submitted,
            self.started,
            self.backfilled,
            self.preempted,
            self.requeued,
            self.window_open,
            self.window_switches,
        ):
            yield from metric.collect()


def _counter(what: str, doc: str) -> Counter:
    return Counter(f"gpufleet_jobs_{what}", doc, ["partition"], registry=None)


@dataclass(frozen=True, slots=True)
class Holder:
    """A job holding (a share or MIG slice of) a GPU."""

    job_id: str
    user: str
    account: str


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU of the inventory: its allocated fraction (0..1) and its holders."""

    node: str
    index: int
    uuid: str
    model: str
    allocated: float
    holders: tuple[Holder, ...]


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node: ``state`` as the node list shows it, ``up`` while its agent syncs."""

    name: str
    state: str
    up: bool
    heartbeat_age_s: float | None


@dataclass(frozen=True, slots=True)
class PartitionView:
    """GPUs on a partition's usable nodes (up, not drained), and those wholly free."""

    name: str
    gpus: int
    idle_gpus: int


@dataclass(frozen=True, slots=True)
class PoolView:
    """A node pool: its nodes booting and up, and what they have cost since the start."""

    name: str
    booting: int
    up: int
    cost: float


@dataclass(frozen=True)
class Observation:
    """The controller's memory at one instant, as ``/metrics`` reports it.

    ``pending`` counts pending jobs by (partition, QoS, account, reason),
    ``running`` running ones (COMPLETING included) by (partition, QoS,
    account); ``oldest_pending`` is the longest wait, in seconds, by
    (partition, reason).
    """

    now: float
    pending: Mapping[tuple[str, str, str, str], int]
    running: Mapping[tuple[str, str, str], int]
    oldest_pending: Mapping[tuple[str, str], float]
    nodes: Sequence[NodeView]
    gpus: Sequence[GpuView]
    partitions: Sequence[PartitionView]
    fairshare: Sequence[FairshareRow]
    heartbeat_interval_s: float
    pools: Sequence[PoolView] = ()

    def holders(self) -> dict[tuple[str, int], tuple[Holder, ...]]:
        """Each held GPU's holders by (node, GPU index)."""
        return {(g.node, g.index): g.holders for g in self.gpus if g.holders}


def observe(
    *,
    now: float,
    jobs: Iterable[LiveJob],
    nodes: Mapping[str, NodeInfo],
    node_state: Callable[[str], str],
    on_node: Mapping[str, Iterable[str]],
    job: Callable[[str], LiveJob],
    state: ClusterState,
    partitions: Iterable[Partition],
    ledger: UsageLedger | None,
    heartbeat_interval_s: float,
) -> Observation:
    """Read the controller's memory (call it holding the controller's lock).

    ``jobs`` are the active jobs; ``on_node`` names the jobs holding room on
    each node and ``job`` finds one of them (active or in cleanup).
    """
    pending: dict[tuple[str, str, str, str], int] = defaultdict(int)
    running: dict[tuple[str, str, str], int] = defaultdict(int)
    oldest: dict[tuple[str, str], float] = {}
    for j in jobs:
        if j.state == "PENDING":
            reason = j.reason or NO_REASON
            pending[j.partition, j.qos, j.account, reason] += 1
            key = (j.partition, reason)
            oldest[key] = max(oldest.get(key, 0.0), now - j.submit_time)
        else:
            running[j.partition, j.qos, j.account] += 1
    node_views = [
        NodeView(
            name=name,
            state=node_state(name),
            up=info.state == "up",
            heartbeat_age_s=None if info.last_heartbeat is None else now - info.last_heartbeat,
        )
        for name, info in nodes.items()
    ]
    return Observation(
        now=now,
        pending=dict(pending),
        running=dict(running),
        oldest_pending=oldest,
        nodes=node_views,
        gpus=_gpus(nodes, on_node, job, state),
        partitions=_partitions(state, partitions),
        fairshare=fairshare.table(ledger, int(now)) if ledger is not None else [],
        heartbeat_interval_s=heartbeat_interval_s,
    )


def _gpus(
    nodes: Mapping[str, NodeInfo],
    on_node: Mapping[str, Iterable[str]],
    job: Callable[[str], LiveJob],
    state: ClusterState,
) -> list[GpuView]:
    fractions = _allocated(state)
    out = []
    for name, info in nodes.items():
        i = state.index.get(name)
        if i is None:
            continue
        holders: dict[int, list[Holder]] = defaultdict(list)
        for job_id in sorted(on_node.get(name, ())):
            live = job(job_id)
            for p in live.placements:
                if p["node"] != name:
                    continue
                # A MIG slice "GPU:PROFILE@START" holds (part of) its GPU.
                indices = {*p["gpus"], *(int(m.partition(":")[0]) for m in p.get("mig") or ())}
                for g in indices:
                    holders[g].append(Holder(live.job_id, live.user, live.account))
        for gpu in info.node.gpus:
            out.append(
                GpuView(
                    node=name,
                    index=gpu.index,
                    uuid=gpu.uuid,
                    model=gpu.model,
                    allocated=fractions[i][gpu.index],
                    holders=tuple(holders.get(gpu.index, ())),
                )
            )
    return out


def _allocated(state: ClusterState) -> list[list[float]]:
    """Each GPU's allocated fraction, by node and GPU index: its milli-GPU in use, or for a
    MIG-partitioned GPU its slices in use (one pass over the arrays, not one per GPU)."""
    total, free = state.gpu_milli_total, state.gpu_milli_free
    width = total.shape[1]
    which = state.mig_node * width + state.mig_gpu
    size = total.size
    slices = np.bincount(which, minlength=size).reshape(total.shape)
    taken = np.bincount(which, weights=~state.mig_free, minlength=size).reshape(total.shape)
    mig = np.divide(taken, slices, out=np.zeros(total.shape), where=slices > 0)
    fraction: list[list[float]] = np.where(total > 0, (total - free) / MILLI, mig).tolist()
    return fraction


def _partitions(state: ClusterState, partitions: Iterable[Partition]) -> list[PartitionView]:
    usable = state.healthy & ~state.removed
    gpus = state.gpu_exists.sum(axis=1)
    idle = (state.gpu_exists & (state.gpu_milli_free == MILLI)).sum(axis=1)
    out = []
    for p in partitions:
        members = partition_nodes(state, p) & usable
        out.append(
            PartitionView(
                name=p.name,
                gpus=int(np.sum(gpus[members])),
                idle_gpus=int(np.sum(idle[members])),
            )
        )
    return out
