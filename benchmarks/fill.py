"""Fill quality and speed on Alibaba's openb trace, against the FGD paper's numbers.

Two measurements:

* **quality**: ``run_sweep`` over the policies and seeds 42-51 (the paper's
  seeds), GPU allocation at 100% arrived, mean over seeds, beside the paper's
  published mean for the same policy. ``--anchors`` names a CSV with columns
  ``sc_policy,seed,100``; the default, ``data/fgd_published_alloc_at_100.csv``,
  holds the FGD artifact's published per-seed results for the default trace
  (tune 1.3) at 100% arrived;
* **speed**: single runs in this process after a warm-up (so numba's compile
  or cache load is not counted), median wall and CPU seconds per policy; and
  the wall time of the whole sweep on ``--workers`` processes.

``python benchmarks/fill.py --json`` prints the result as JSON on its last line.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import time
from pathlib import Path

from gpufleet.sim.fill import run_fill
from gpufleet.sim.openb import DEFAULT_NODES, DEFAULT_PODS, bundled, load_nodes, load_pods
from gpufleet.sim.sweep import Trace, run_sweep

# The published simulator's policy names for ours.
PAPER_NAMES = {
    "random": "01-Random",
    "dot-product": "02-DotProd",
    "packing": "04-GpuPacking",
    "best-fit": "05-BestFit",
    "fgd": "06-FGD",
}


def published(anchors: Path | None) -> dict[str, float]:
    """Mean allocation % at 100% arrived per policy, from the published per-seed curves."""
    if anchors is None or not anchors.exists():
        return {}
    by_policy: dict[str, list[float]] = {}
    with anchors.open(newline="") as f:
        for row in csv.DictReader(f):
            by_policy.setdefault(row["sc_policy"], []).append(float(row["100"]))
    return {
        ours: statistics.mean(by_policy[theirs])
        for ours, theirs in PAPER_NAMES.items()
        if theirs in by_policy
    }


def timed_runs(policy: str, seeds: list[int]) -> dict[str, float]:
    nodes = load_nodes(bundled(DEFAULT_NODES))
    pods = load_pods(bundled(DEFAULT_PODS))
    run_fill(nodes, pods, policy, seeds[0] - 1, record=False)  # warm-up: numba cache, imports
    wall, cpu = [], []
    for seed in seeds:
        c0 = time.process_time()
        run = run_fill(nodes, pods, policy, seed, record=False)
        cpu.append(time.process_time() - c0)
        wall.append(run.seconds)
    return {"wall_s": statistics.median(wall), "cpu_s": statistics.median(cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="random,best-fit,fgd,default")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timing-seeds", type=int, default=3)
    parser.add_argument(
        "--anchors",
        type=Path,
        default=Path(__file__).resolve().parent / "data/fgd_published_alloc_at_100.csv",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    policies = args.policies.split(",")
    lo, _, hi = args.seeds.partition("-")
    seeds = list(range(int(lo), int(hi or lo) + 1))

    start = time.perf_counter()
    runs = run_sweep(
        Trace(bundled(DEFAULT_NODES), bundled(DEFAULT_PODS)), policies, seeds, workers=args.workers
    )
    sweep_s = time.perf_counter() - start
    paper = published(args.anchors)
    results: dict[str, dict[str, object]] = {}
    for policy in policies:
        mine = [r for r in runs if r.policy == policy]
        at100 = [r.at(100) for r in mine]
        results[policy] = {
            "alloc_pct_at_100": round(statistics.mean(at100), 2),
            "alloc_pct_at_130": round(statistics.mean(r.at(130) for r in mine), 2),
            "per_seed_at_100": [round(a, 2) for a in at100],
            "published_at_100": round(paper[policy], 2) if policy in paper else None,
            **{
                k: round(v, 3)
                for k, v in timed_runs(policy, seeds[: args.timing_seeds]).items()
            },
        }
        if not args.json:
            print(policy, results[policy], flush=True)
    out = {"results": results, "sweep_s": round(sweep_s, 1), "workers": args.workers,
           "runs": len(runs), "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
