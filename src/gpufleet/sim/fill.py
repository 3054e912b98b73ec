"""The fill experiment of the FGD paper: how much of the cluster a policy can fill.

Protocol (Weng et al., USENIX ATC'23, section 6): sample pods from the trace
at random with replacement until the GPUs they request reach ``tune`` (1.3)
times the cluster's capacity, shuffle them, and place them one by one with
no departures. At every 1% of arrived load, record the share of GPU capacity
allocated and the share fragmented (``core.fragmentation``). A policy is as
good as its allocation curve stays on the diagonal.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.core.fragmentation import FragmentationMeter, Workload
from gpufleet.core.model import Node
from gpufleet.core.placement import Placer
from gpufleet.core.state import ClusterState, IntArray
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

    def at(self, level: int) -> float:
        """Allocation % when arrived load reached ``level`` % (the last point if beyond)."""
        return self.alloc_pct[min(level, len(self.alloc_pct) - 1)]

    @property
    def first_gap_level(self) -> int | None:
        """First arrived-load level where allocation trails arrival by a point or more."""
        return next((k for k, a in enumerate(self.alloc_pct) if a <= k - 1), None)


def sample_arrivals(
    pods: Sequence[TracePod], capacity_milli: int, seed: int, tune: float = 1.3
) -> IntArray:
    """Pod indices: sampled with replacement until GPU demand reaches ``tune`` x capacity,
    then shuffled. Deterministic for a seed."""
    rng = np.random.default_rng(seed)
    demand = np.array([p.request.total_gpu_milli for p in pods], dtype=np.int64)
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
    capacity = state.gpu_milli_capacity
    requests = [p.request for p in pods]
    placer = Placer(placement_profile(policy, workload=requests, seed=seed))
    meter = FragmentationMeter(state, Workload.from_requests(requests, state.models))
    order = sample_arrivals(pods, capacity, seed, tune)

    levels = round(tune * 100)
    alloc_pct: list[float] = []
    frag_pct: list[float] = []
    rows: list[tuple[str, str, str, int, int, int]] = []
    arrived = 0
    allocated = 0
    placed = 0
    start = time.perf_counter()
    for i in order:
        pod = pods[i]
        r = pod.request
        arrived += r.total_gpu_milli
        done = placer.place(state, r)
        if done is None:
            if record:
                rows.append((pod.name, "", "", r.milli_per_gpu, r.cpu_milli, r.memory_mib))
        else:
            placed += 1
            allocated += r.total_gpu_milli
            if record:
                for a in done:
                    gpus = "|".join(str(g) for g in a.gpus)
                    node = nodes[a.node].name
                    rows.append((pod.name, node, gpus, a.gpu_milli, a.cpu_milli, a.memory_mib))
        while len(alloc_pct) <= levels and arrived * 100 >= len(alloc_pct) * capacity:
            alloc_pct.append(100.0 * allocated / capacity)
            frag_pct.append(100.0 * meter.total() / capacity)
    seconds = time.perf_counter() - start
    return FillRun(
        policy=policy,
        seed=seed,
        alloc_pct=alloc_pct,
        frag_pct=frag_pct,
        seconds=seconds,
        arrivals=len(order),
        placed=placed,
        placements=rows,
    )
