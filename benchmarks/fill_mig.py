"""Whole, fractional and MIG work on one cluster: the fill with part of openb MIG-partitioned.

openb records no MIG-capable GPU, so this variant makes some: its 39 ``G3``
nodes (8 GPUs, 128 CPUs, 768 GiB, the largest) become ``A100-80GB`` nodes,
and on each the first four GPUs are partitioned (GPUs 0-1 as seven
``1g.10gb``; GPU 2 as ``2g.20gb,2g.20gb,3g.40gb``; GPU 3 as two
``3g.40gb``); the other four stay whole. A pod that asked for ``G3`` asks
for ``A100-80GB``. Of the fractional pods small enough, ``--mig-share``
(30%) ask for the smallest MIG profile that holds their share instead:
``1g.10gb`` up to 1/7 of a GPU, ``2g.20gb`` up to 2/7, ``3g.40gb`` up to 3/7.
The fill counts a MIG pod by its share of the GPU's compute slices
(``core.job.gpu_milli_equivalent``) and the partitioned GPUs in the capacity.

``python benchmarks/fill_mig.py --json`` prints, as its last line, the mean
allocation % at 100% arrived per policy and the share of MIG pods refused by
100% arrived, in all and per request type (``sim fill``'s types). ``--quick``
fills every tenth openb node (``quick.py``) with seed 42 only, in one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
from concurrent.futures import ProcessPoolExecutor

import quick  # benchmarks/quick.py, beside this script
from gpufleet.core.model import GPU, MILLI, Node, Request
from gpufleet.sim.fill import FillRun, run_fill
from gpufleet.sim.openb import DEFAULT_PODS, TracePod, bundled, load_pods

A100 = "A100-80GB"
SEVENTHS = tuple(("1g.10gb", start) for start in range(7))
LAYOUTS = {
    0: SEVENTHS,
    1: SEVENTHS,
    2: (("2g.20gb", 0), ("2g.20gb", 2), ("3g.40gb", 4)),
    3: (("3g.40gb", 0), ("3g.40gb", 4)),
}
PROFILES = ((1, "1g.10gb"), (2, "2g.20gb"), (3, "3g.40gb"))
MIG_SHARE = 0.3  # of the fractional pods small enough for a profile


def mig_nodes(nodes: list[Node]) -> list[Node]:
    out = []
    for n in nodes:
        if n.gpu_model == "G3":
            gpus = tuple(GPU(g.index, A100, 80 * 1024, mig=LAYOUTS.get(g.index)) for g in n.gpus)
            n = dataclasses.replace(n, gpus=gpus)
        out.append(n)
    return out


def mig_pods(pods: list[TracePod], share: float, rng: random.Random) -> list[TracePod]:
    out = []
    for p in pods:
        r = p.request
        if r.gpu_models and "G3" in r.gpu_models:
            r = dataclasses.replace(r, gpu_models=(r.gpu_models - {"G3"}) | {A100})
        profile = next((name for k, name in PROFILES if r.gpu_milli * 7 <= k * MILLI), None)
        if r.gpu_milli and profile and rng.random() < share:
            r = Request(
                cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, mig_profile=profile, mig_count=1
            )
        out.append(dataclasses.replace(p, request=r))
    return out


def one(job: tuple[str, int, float, bool]) -> FillRun:
    policy, seed, share, small = job
    nodes = mig_nodes(quick.openb_nodes(small))
    pods = mig_pods(load_pods(bundled(DEFAULT_PODS)), share, random.Random(7))
    return run_fill(nodes, pods, policy, seed, record=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="best-fit,fgd,default")
    parser.add_argument("--seeds", help="FIRST-LAST (default 42-51; 42 with --quick)")
    parser.add_argument("--mig-share", type=float, default=MIG_SHARE)
    parser.add_argument("--workers", type=int, help="processes (default: CPUs; 1 with --quick)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="1/10 nodes, seed 42")
    args = parser.parse_args()
    seeds = quick.fill_seeds(args.seeds, args.quick)
    policies = args.policies.split(",")
    jobs = [(p, s, args.mig_share, args.quick) for p in policies for s in seeds]
    workers = args.workers or (1 if args.quick else os.cpu_count() or 1)
    with ProcessPoolExecutor(workers) as pool:
        runs = list(pool.map(one, jobs))
    results: dict[str, dict[str, float]] = {}
    for policy in policies:
        group = [r for r in runs if r.policy == policy]
        mig = [k for k in group[0].arrived_by_type if k.startswith("mig:")]
        arrived = sum(r.arrived_by_type.get(k, 0) for r in group for k in mig)
        refused = sum(r.refused_by_type.get(k, 0) for r in group for k in mig)
        by_type = {
            k: round(
                100
                * sum(r.refused_by_type.get(k, 0) for r in group)
                / max(sum(r.arrived_by_type.get(k, 0) for r in group), 1),
                1,
            )
            for k in mig
        }
        results[policy] = {
            "alloc_pct_at_100": round(statistics.fmean(r.at(100) for r in group), 2),
            "mig_refused_pct": round(100 * refused / max(arrived, 1), 2),
            "mig_refused_by_type": by_type,
            "seconds_per_run": round(statistics.median(r.seconds for r in group), 2),
        }
        if not args.json:
            print(policy, results[policy], flush=True)
    print(json.dumps({"results": results, "seeds": seeds, "mig_share": args.mig_share}))


if __name__ == "__main__":
    main()
