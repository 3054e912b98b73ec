"""Does re-cutting MIG GPUs as the slice mix shifts beat the best static layout?

**Workload** (seeded, ``workload``; seed 7): nodes of 8 GPUs, A100-80GB and
H100-80GB in turn (their MIG profiles share names), two days of MIG jobs
only (one instance each, 1 CPU, 4 GiB), Poisson arrivals, exponential
runtimes (at least a minute), time limits 1.5 x the runtime + 60 s:

* **day** (08:00-20:00): 80% ``1g.10gb``, 15% ``2g.20gb``, 5% ``3g.40gb``,
  mean runtime 1 h, arriving at 75% of the cluster's compute slices;
* **night** (20:00-08:00): 10% ``1g.10gb``, 35% ``3g.40gb``, 30%
  ``4g.40gb``, 25% ``7g.80gb``, mean runtime 2 h, arriving at 75% of what
  the cluster runs at once when cut for them (a ``4g`` or ``7g`` takes a
  GPU, a ``3g`` half of one).

The scheduler is FIFO with EASY backfill and best-fit placement, cycles on
events and each minute while jobs wait.

**Static**: no re-cutting, each GPU keeping the layout it starts with. No
single supported layout holds every size asked for, so every uniform one
leaves jobs that never run; the static layouts tried are mixes. The search
starts from the single-size layouts (7 x 1g, 3 x 2g + 1g, 3g + 3g,
4g + 3 x 1g, 7g) in proportion to the slice-seconds each size asks over
the trace, then moves one GPU at a time to another single-size layout or
to a maximal mixed one (holding two sizes asked for or more), taking the
first move that lowers the mean wait, until none does or 16 layouts have
been simulated. **Planner**: ``[mig] repartition = true``,
``min_interval_s = 1800``, ``reconfigure_s = 60``, starting from the best
static layout found.

``mig_wait_ratio`` = mean wait (submit to first start) of the jobs with the
planner / the same under the best static layout. The full run has 2 nodes
(16 GPUs, 1,841 jobs); ``--quick`` one node for one day and at most 3
static layouts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpufleet.core.mig import PROFILES
from gpufleet.core.model import GPU, Node, Request
from gpufleet.policies.migplan import supported_layouts
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces.record import TraceJob

HOUR = 3600
DAY = 24 * HOUR
MODELS = ("A100-80GB", "A100-80GB", "H100-80GB", "H100-80GB")
Cut = tuple[tuple[str, int], ...]
DAY_MIX = {"1g.10gb": 0.80, "2g.20gb": 0.15, "3g.40gb": 0.05}
NIGHT_MIX = {"1g.10gb": 0.10, "3g.40gb": 0.35, "4g.40gb": 0.30, "7g.80gb": 0.25}
# GPUs a job of the profile keeps from others when GPUs are cut for the night's mix.
GPU_SHARE = {"1g.10gb": 1 / 7, "2g.20gb": 2 / 7, "3g.40gb": 0.5, "4g.40gb": 1.0, "7g.80gb": 1.0}
SLICES = {name: p.compute_slices for name, p in PROFILES["A100-80GB"].items()}
LOAD = 0.75
BASE: dict[str, Any] = {
    "ordering": {"plugin": "fifo"},
    "backfill": {"mode": "easy"},
    "placement": {"plugin": "best-fit"},
    "sim": {"interval_s": 60},
}
PLANNER = {"mig": {"repartition": True, "min_interval_s": 1800, "reconfigure_s": 60}}


def cluster(nodes: int, layout: Sequence[Cut]) -> list[Node]:
    """``nodes`` nodes of 8 GPUs; GPU k (over the cluster) cut as ``layout[k]``."""
    out = []
    for n in range(nodes):
        model = MODELS[n % len(MODELS)]
        gpus = tuple(
            GPU(index=i, model=model, memory_mib=80 * 1024, mig=layout[n * 8 + i])
            for i in range(8)
        )
        out.append(Node(f"n{n}", 128_000, 1024 * 1024, gpus))
    return out


def workload(days: int, gpus: int, seed: int) -> list[TraceJob]:
    """The day and night phases (see the module docstring), seeded."""
    rng = np.random.default_rng(seed)
    jobs: list[TraceJob] = []
    phases = [(DAY_MIX, HOUR, 8 * HOUR, 20 * HOUR), (NIGHT_MIX, 2 * HOUR, 20 * HOUR, 32 * HOUR)]
    for d in range(days):
        for mix, mean_s, lo, hi in phases:
            names = list(mix)
            p = np.array([mix[k] for k in names])
            if mix is DAY_MIX:  # jobs at once that fill LOAD of the slices
                per_job = float(p @ [SLICES[k] for k in names]) / (7 * gpus)
            else:  # ... of the GPUs, cut for the night's mix
                per_job = float(p @ [GPU_SHARE[k] for k in names]) / gpus
            rate = LOAD / per_job / mean_s  # arrivals per second
            t = float(d * DAY + lo)
            while True:
                t += rng.exponential(1 / rate)
                if t >= d * DAY + hi:
                    break
                name = names[int(rng.choice(len(names), p=p))]
                duration = max(60, int(rng.exponential(mean_s)))
                jobs.append(
                    TraceJob(
                        id=f"j{len(jobs)}",
                        submit_time=int(t),
                        duration_s=duration,
                        request=Request(
                            cpu_milli=1000, memory_mib=4096, mig_profile=name, mig_count=1
                        ),
                        time_limit_s=int(duration * 1.5) + 60,
                    )
                )
    return jobs


def mean_wait(nodes: list[Node], jobs: list[TraceJob], policy: dict[str, Any]) -> tuple[float, int]:
    """Mean wait of the jobs (s; inf when one never starts) and the reconfigurations."""
    result = replay(nodes, jobs, profile_from_dict(policy, "mig"))
    if any(r.first_start < 0 for r in result.jobs):
        return float("inf"), result.reconfigurations
    waits = [r.first_start - r.submit_time for r in result.jobs]
    return float(np.mean(waits)), result.reconfigurations


def offers(cut: Cut) -> Counter[str]:
    return Counter(p for p, _ in cut)


def maximal_layouts() -> list[Cut]:
    """Every supported layout that no other holds more instances than (per profile)."""
    cuts = supported_layouts(MODELS[0])
    return [
        a for a in cuts if not any(offers(b) > offers(a) for b in cuts)
    ]


def single(profile: str) -> Cut:
    """The maximal layout with the most slices in ``profile``, then the fewest other kinds."""
    return max(maximal_layouts(), key=lambda cut: (offers(cut)[profile], -len(offers(cut))))


def expand(mix: Counter[Cut]) -> list[Cut]:
    """The layout of each GPU, the mix spread over the nodes (so over both models)."""
    flat = [cut for cut, n in sorted(mix.items()) for _ in range(n)]
    nodes = len(flat) // 8
    out: list[Cut] = [()] * len(flat)
    for k, cut in enumerate(flat):
        out[(k % nodes) * 8 + k // nodes] = cut
    return out


def proportional(jobs: list[TraceJob], gpus: int, blocks: dict[str, Cut]) -> Counter[Cut]:
    """GPUs per single-profile layout in proportion to the slice-seconds each profile asks."""
    asked = Counter({p: 0.0 for p in blocks})
    for t in jobs:
        asked[t.request.mig_profile] += SLICES[t.request.mig_profile] * t.duration_s
    total = sum(asked.values())
    share = {p: max(1, round(gpus * asked[p] / total)) for p in blocks}
    while sum(share.values()) > gpus:
        share[max(share, key=lambda p: share[p])] -= 1
    while sum(share.values()) < gpus:
        share[max(asked, key=lambda p: asked[p] / share[p])] += 1
    return Counter({blocks[p]: n for p, n in share.items()})


def holds_all(cuts: Sequence[Cut], profiles: Sequence[str]) -> bool:
    return {p for cut in cuts for p, _ in cut} >= set(profiles)


def measure(quick: bool) -> dict[str, float]:
    """Mean MIG wait with the planner, under the best static layout found, and their ratio."""
    nodes, days = (1, 1) if quick else (2, 2)
    gpus = nodes * 8
    jobs = workload(days, gpus, seed=7)
    started = time.perf_counter()
    tried: dict[tuple[Cut, ...], float] = {}

    def static(mix: Counter[Cut]) -> float:
        key = tuple(sorted(lay for lay, n in mix.items() for _ in range(n)))
        if key not in tried:
            tried[key] = mean_wait(cluster(nodes, expand(mix)), jobs, BASE)[0]
            print(f"static {len(tried)}: {tried[key] / 60:.1f} min", file=sys.stderr, flush=True)
        return tried[key]

    profiles = sorted({t.request.mig_profile for t in jobs})
    maximal = maximal_layouts()
    # A uniform layout must hold every profile asked for, or some jobs never run.
    uniform = [lay for lay in maximal if holds_all([lay], profiles)]
    for lay in uniform:
        static(Counter({lay: gpus}))
    blocks = {p: single(p) for p in profiles}
    best = proportional(jobs, gpus, blocks)
    first = static(best)
    # Moves go to each single-profile layout, and to each maximal one holding two
    # profiles asked for or more (a mixed GPU), one GPU at a time.
    mixed = [cut for cut in maximal if len(offers(cut).keys() & set(profiles)) >= 2]
    moves = list(dict.fromkeys([*blocks.values(), *mixed]))
    budget = 3 if quick else 16  # layouts simulated at most
    improved = True
    while improved and len(tried) < budget:
        improved = False
        for src in sorted(best):
            for dst in moves:
                if dst == src or len(tried) >= budget:
                    continue
                mix = best.copy()
                mix[src] -= 1
                mix[dst] += 1
                if holds_all(list(+mix), profiles) and static(+mix) < static(best):
                    best, improved = +mix, True
                    break
            if improved:
                break
    best_static = static(best)
    # The planner starts from the best static layout: what re-cutting adds to it.
    planned, reconfigurations = mean_wait(cluster(nodes, expand(best)), jobs, {**BASE, **PLANNER})
    print(
        f"planner {planned / 60:.1f} min ({reconfigurations} re-cuts); best static "
        f"{best_static / 60:.1f} min of {len(tried)} tried: "
        + "; ".join(f"{n} x {','.join(p for p, _ in lay)}" for lay, n in sorted(best.items())),
        file=sys.stderr,
    )
    return {
        "mig_wait_ratio": round(planned / best_static, 3),
        "planner_mean_wait_s": round(planned, 1),
        "best_static_mean_wait_s": round(best_static, 1),
        "proportional_static_mean_wait_s": round(first, 1),
        "static_layouts_tried": float(len(tried)),
        "uniform_layouts_usable": float(len(uniform)),
        "reconfigurations": float(reconfigurations),
        "jobs": float(len(jobs)),
        "gpus": float(gpus),
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--quick", action="store_true", help="one day on 2 nodes")
    args = parser.parse_args()
    out = measure(args.quick)
    print(json.dumps(out) if args.json else out)


if __name__ == "__main__":
    main()
