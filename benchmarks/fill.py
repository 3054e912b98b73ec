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
``--quick`` fills every tenth openb node (``quick.py``) with seed 42 only, in one process.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import quick  # benchmarks/quick.py, beside this script
from gpufleet.core.model import Node
from gpufleet.sim.fill import run_fill
from gpufleet.sim.openb import DEFAULT_PODS, bundled, load_pods
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


def timed_runs(nodes: list[Node], policy: str, seeds: list[int]) -> dict[str, float]:
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
    parser.add_argument("--seeds", help="FIRST-LAST (default 42-51; 42 with --quick)")
    parser.add_argument("--workers", type=int, help="processes (default: CPUs; 1 with --quick)")
    parser.add_argument("--timing-seeds", type=int, help="timed runs a policy (3; 1 with --quick)")
    parser.add_argument(
        "--anchors",
        type=Path,
        default=Path(__file__).resolve().parent / "data/fgd_published_alloc_at_100.csv",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="every tenth node, seed 42, 1 process")
    args = parser.parse_args()
    policies = args.policies.split(",")
    seeds = quick.fill_seeds(args.seeds, args.quick)
    workers = args.workers or (1 if args.quick else os.cpu_count() or 1)
    timing_seeds = args.timing_seeds or (1 if args.quick else 3)

    with tempfile.TemporaryDirectory() as tmp:
        trace = Trace(quick.openb_nodes_file(args.quick, Path(tmp)), bundled(DEFAULT_PODS))
        start = time.perf_counter()
        runs = run_sweep(trace, policies, seeds, workers=workers)
        sweep_s = time.perf_counter() - start
    nodes = quick.openb_nodes(args.quick)
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
            **{k: round(v, 3) for k, v in timed_runs(nodes, policy, seeds[:timing_seeds]).items()},
        }
        if not args.json:
            print(policy, results[policy], flush=True)
    out = {
        "results": results,
        "sweep_s": round(sweep_s, 1),
        "workers": workers,
        "runs": len(runs),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
