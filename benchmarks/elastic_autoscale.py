"""Does the autoscaler save money without slowing jobs down?

The cluster is that of ``examples/elastic-cluster.toml``: one pool of
8-GPU A100 nodes, 1 to 8 of them, a 300 s boot, 2.0 per GPU-hour. The
policy is that of ``examples/autoscale.toml`` (FIFO, EASY backfill; demand
counts after 60 s of waiting, a node idle 600 s goes). Both are written
out below, so the script runs from a copy of ``benchmarks/`` alone.

The workload is the seeded synthetic generator with a daily load cycle:
3,000 jobs (seed 1) sized for the pool's 64 GPUs at a mean offered load of
0.5 that swings by 0.9 over the day (peak at 14:00, ``daily_swing=0.9``),
so about ten days; job sizes from half a GPU to 16 GPUs (two-node gangs),
runtimes log-normal around 20 minutes, at most 4 hours.

The same trace is replayed twice on the same engine: with the pool fixed at
its maximum size (8 nodes all the time) and with the autoscaler.
``autoscale_cost_ratio`` is the autoscaled cost over the fixed one (target
at most 0.7) and ``autoscale_jct_ratio`` its mean job completion time over
the fixed one's (target at most 1.2). Cost is GPU-hours billed (from a
node's request to its deletion, until the last job ends) times the price.

``python benchmarks/elastic_autoscale.py --json`` ends with the figures as
one JSON line; ``--quick`` replays the first 400 jobs' worth (the same
generator with 400 jobs, about a day and a half). ``measure(quick)`` returns
the same figures to other scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from gpufleet.core.model import GPU, Node
from gpufleet.core.pools import NodePool
from gpufleet.sim.autoscale import FIXED, fixed, point
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces.synthetic import WorkloadShape, generate

A100 = tuple(GPU(i, "A100-80GB", 80 * 1024) for i in range(8))
POOL = NodePool(
    "gpu",
    Node("template", 96_000, 768 * 1024, A100),
    min_nodes=1,
    max_nodes=8,
    boot_s=300,
    price_gpu_hour=2.0,
)
POLICY = {
    "ordering": {"plugin": "fifo"},
    "backfill": {"mode": "easy"},
    "autoscale": {"policy": "demand", "pending_s": 60, "idle_s": 600},
}
JOBS, QUICK_JOBS = 3000, 400
SEED = 1
SHAPE = WorkloadShape(
    load=0.5,
    daily_swing=0.9,
    size_mix={0.5: 0.1, 1: 0.5, 2: 0.15, 4: 0.15, 8: 0.08, 16: 0.02},
    duration_median_s=1200,
    max_duration_s=4 * 3600,
)


def measure(quick: bool) -> dict[str, float]:
    """Replay the workload fixed and autoscaled; their cost and mean JCT, and the ratios."""
    profile = profile_from_dict(POLICY, "autoscale")
    gpus = POOL.max_nodes * len(A100)
    jobs = generate(QUICK_JOBS if quick else JOBS, seed=SEED, gpus_total=gpus, shape=SHAPE)
    started = time.perf_counter()
    runs = {
        name: point(name, None, replay([], jobs, profile, pools=these))
        for name, these in ((FIXED, fixed([POOL])), ("autoscaled", [POOL]))
    }
    fix, auto = runs[FIXED], runs["autoscaled"]
    return {
        "autoscale_cost_ratio": round(auto.cost / fix.cost, 4),
        "autoscale_jct_ratio": round(auto.mean_jct_s / fix.mean_jct_s, 4),
        "autoscale_cost": auto.cost,
        "fixed_cost": fix.cost,
        "autoscale_mean_jct_s": auto.mean_jct_s,
        "fixed_mean_jct_s": fix.mean_jct_s,
        "autoscale_gpu_hours": auto.gpu_hours,
        "fixed_gpu_hours": fix.gpu_hours,
        "nodes_created": float(auto.nodes_created),
        "jobs": float(len(jobs)),
        "trace_days": round((jobs[-1].submit_time - jobs[0].submit_time) / 86_400, 2),
        "wall_s": round(time.perf_counter() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS} jobs")
    args = parser.parse_args()
    out = measure(args.quick)
    print(
        f"cost {out['autoscale_cost']:,.0f} vs {out['fixed_cost']:,.0f} fixed "
        f"({out['autoscale_cost_ratio']:.2f}x), mean JCT {out['autoscale_mean_jct_s']:,.0f} s "
        f"vs {out['fixed_mean_jct_s']:,.0f} s ({out['autoscale_jct_ratio']:.2f}x)",
        file=sys.stderr,
    )
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
