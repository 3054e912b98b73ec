"""The fill experiment of the FGD paper: how much of the cluster a policy can fill.

Protocol (Weng et al., USENIX ATC'23, section 6): sample pods from the trace
at random with replacement until the GPUs they request reach ``tune`` (1.3)
times the cluster's capacity, shuffle them, and place them one by one with
no departures. At every 1% of arrived load, record the share of GPU capacity
allocated and the share fragmented (``core.fragmentation``). A policy is as
good as its allocation curve stays on the diagonal. MIG-partitioned GPUs count
in the capacity and a MIG pod in demand and allocation by its share of the
GPU's compute slices (``core.job.gpu_milli_equivalent``), as in replays.

A curve's average hides *who* is turned away, so each run also counts the
pods refused by request type (``request_type``: GPUs, share of each GPU, CPU
and memory class), how many of each type arrived by 100% arrived, and the
arrived level of the first refusal.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.core.fragmentation import FragmentationMeter, Workload
from gpufleet.core.job import gpu_milli_equivalent
from gpufleet.core.model import Node, Request
from gpufleet.core.placement import Placer
from gpufleet.core.state import ClusterState, IntArray
from gpufleet.core.workload import or_typical
from gpufleet.policies.registry import placement_profile
from gpufleet.sim.openb import TracePod

PLACEMENT_COLUMNS = ("pod", "node", "gpus", "gpu_milli", "cpu_milli", "memory_mib")


@dataclass
class FillRun:
    """One policy on one seed. Curves are indexed by arrived load in percent."""

    policy: str
    seed: int
    alloc_pct: list[float]
    frag_pct: list[float]
    seconds: float
    arrivals: int
    placed: int
    placements: list[tuple[str, str, str, int, int, int]] = field(default_factory=list)
    arrived_by_type: dict[str, int] = field(default_factory=dict)
    """Pods of each request type that arrived by 100% arrived."""
    refused_by_type: dict[str, int] = field(default_factory=dict)
    """Of those, the pods refused."""
    first_refusal_pct: int | None = None
    """Arrived level (whole %) at the run's first refusal; None if every pod was placed."""
    refused_curve: dict[str, list[int]] = field(default_factory=dict)
    """Refused pods so far at each arrived level, per type refused at least once."""

    def at(self, level: int) -> float:
        """Allocation % when arrived load reached ``level`` % (the last point if beyond)."""
        return self.alloc_pct[min(level, len(self.alloc_pct) - 1)]

    @property
    def first_gap_level(self) -> int | None:
        """First arrived-load level where allocation trails arrival by a point or more."""
        return next((k for k, a in enumerate(self.alloc_pct) if a <= k - 1), None)


def _class(amount: int, unit: int) -> int:
    """``amount`` in whole ``unit``s, rounded up to a power of four (0 stays 0)."""
    whole, bound = -(-amount // unit), 1
    while bound < whole:
        bound *= 4
    return bound if whole else 0


def request_type(r: Request) -> str:
    """The request's type for refusal counts: its GPUs (``cpu`` for none, ``share<=N``
    for a fraction of one GPU in quarters, ``Ngpu``, ``mig:PROFILExN``), then CPU cores
    and host memory, each rounded up to a power of four, e.g. ``8gpu cpu<=256 mem<=1024G``.
    Coarse classes keep each type common enough for its refused share to mean something."""
    if r.mig_profile:
        gpus = f"mig:{r.mig_profile}x{r.mig_count}"
    elif r.gpu_milli > 750:
        gpus = "share<1000"
    elif r.gpu_milli:
        gpus = f"share<={-(-r.gpu_milli // 250) * 250}"
    else:
        gpus = f"{r.gpus}gpu" if r.gpus else "cpu"
    return f"{gpus} cpu<={_class(r.cpu_milli, 1000)} mem<={_class(r.memory_mib, 1024)}G"


def sample_arrivals(
    pods: Sequence[TracePod], capacity_milli: int, seed: int, tune: float = 1.3
) -> IntArray:
    """Pod indices: sampled with replacement until GPU demand reaches ``tune`` x capacity,
    then shuffled. Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    demand = np.array([gpu_milli_equivalent(p.request) for p in pods], dtype=np.int64)
    if demand.sum() == 0:
        raise ValueError("the pod list requests no GPUs, so it can never fill the cluster")
    target = tune * capacity_milli
    chunk = int(target / max(demand.mean(), 1) * 1.2) + 16
    picks = rng.integers(0, len(pods), size=chunk)
    cum = np.cumsum(demand[picks])
    while cum[-1] < target:
        more = rng.integers(0, len(pods), size=chunk)
        picks = np.concatenate([picks, more])
        cum = np.cumsum(demand[picks])
    end = int(np.searchsorted(cum, target)) + 1
    return rng.permutation(picks[:end])


def run_fill(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    *,
    tune: float = 1.3,
    record: bool = True,
) -> FillRun:
    """Fill a fresh cluster with one seed's arrivals under ``policy``."""
    state = ClusterState(nodes)
    capacity = state.gpu_milli_installed
    requests = [p.request for p in pods]
    placer = Placer(placement_profile(policy, workload=requests, seed=seed))
    meter = FragmentationMeter(state, Workload.from_requests(or_typical(requests), state.models))
    order = sample_arrivals(pods, capacity, seed, tune)

    levels = round(tune * 100)
    alloc_pct: list[float] = []
    frag_pct: list[float] = []
    rows: list[tuple[str, str, str, int, int, int]] = []
    kinds = [request_type(p.request) for p in pods]
    arrived_by: Counter[str] = Counter()
    refused_by: Counter[str] = Counter()
    refused_at: list[Counter[str]] = []  # refused so far, per level
    at_100: tuple[Counter[str], Counter[str]] | None = None
    first_refusal: int | None = None
    arrived = 0
    allocated = 0
    placed = 0
    start = time.perf_counter()
    for i in order:
        pod = pods[i]
        r = pod.request
        demand = gpu_milli_equivalent(r)
        came_at = arrived  # a pod that takes arrivals to 100% is one of those by 100%
        arrived += demand
        arrived_by[kinds[i]] += 1
        done = placer.place(state, r)
        if done is None:
            refused_by[kinds[i]] += 1
            if first_refusal is None:
                first_refusal = came_at * 100 // capacity
            if record:
                rows.append((pod.name, "", "", r.milli_per_gpu, r.cpu_milli, r.memory_mib))
        else:
            placed += 1
            allocated += demand
            if record:
                for a in done:
                    node = nodes[a.node].name
                    if a.mig:  # each instance on its GPU, as its share of the GPU's slices
                        gpus = "|".join(str(state.mig_gpu[m]) for m in a.mig)
                        milli = demand // (r.mig_count * r.nodes)
                    else:
                        gpus, milli = "|".join(str(g) for g in a.gpus), a.gpu_milli
                    rows.append((pod.name, node, gpus, milli, a.cpu_milli, a.memory_mib))
        while len(alloc_pct) <= levels and arrived * 100 >= len(alloc_pct) * capacity:
            if len(alloc_pct) == 100:
                at_100 = (arrived_by.copy(), refused_by.copy())
            alloc_pct.append(100.0 * allocated / capacity)
            frag_pct.append(100.0 * meter.total() / capacity)
            refused_at.append(refused_by.copy())
        if len(alloc_pct) > levels:  # the last level is in: the run ends there
            break
    seconds = time.perf_counter() - start
    arrived_100, refused_100 = at_100 or (arrived_by, refused_by)
    return FillRun(
        policy=policy,
        seed=seed,
        alloc_pct=alloc_pct,
        frag_pct=frag_pct,
        seconds=seconds,
        arrivals=len(order),
        placed=placed,
        placements=rows,
        arrived_by_type=dict(sorted(arrived_100.items())),
        refused_by_type={k: refused_100[k] for k in sorted(arrived_100)},
        first_refusal_pct=first_refusal,
        refused_curve={k: [c[k] for c in refused_at] for k in sorted(refused_by)},
    )
