"""Runtime prediction against limits and an oracle: mean JCT of shortest-job-first three ways.

The workload is the shipped generator with limits as production logs show
them (``limit_per_job``): each job's runtime times a factor of its own from
2 to 10, rounded up to the few values users pick (15 minutes, 1 hour, 4
hours, 1 day, or the partition's maximum of 3 days, which a quarter of users
get for every job by setting none); five scripts per user, none longer than
4 hours, on ``examples/nodes.csv`` (64 GPUs) at about 1.9 times its capacity
(drawn for 12 GPUs at load 10, so no job is wider than a node), a busy
cluster whose queue builds up. Three jobs in ten are failed runs of
debugging bursts (``fail_share``): before some runs of a script, its user
submits it 1 to 3 times with a bug, with the same limit, and each such run
ends within 10 minutes, as production GPU clusters' logs show. A burst is
closed-loop: each later run is submitted only once the run before it has
ended, 1 to 20 minutes of think time later (``think_max_s``, log-uniform)::

    synthetic:n_jobs=800,seed=S,gpus_total=12,load=10,max_duration_s=14400,scripts=5,
              limit_overestimate_min=2,limit_overestimate=10,limit_habits=true,
              limit_per_job=true,limit_default_h=72,fail_share=0.3,fail_burst=3,
              fail_within_s=600

Each seed is replayed under ``examples/sjf.toml`` (SJF by the limits),
``examples/predict.toml`` (SJF by learnt estimates, backfill on them) and
``examples/sjf-oracle.toml`` (SJF by the true runtimes), all with EASY
backfill and best-fit placement. ``pred_jct_over_oracle`` and
``pred_jct_over_limits`` are the medians over the seeds of the estimates'
mean JCT over the oracle's and over the limits'. ``--quick``: 150 jobs, one
seed. ``python benchmarks/elastic_predict.py --json`` prints the figures and
each seed's as JSON on its last line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from gpufleet.sim.cluster import load_cluster_arg
from gpufleet.sim.metrics import summarize
from gpufleet.sim.profile import load_profile, replay
from gpufleet.sim.traces import load_trace

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WORKLOAD = (
    "synthetic:n_jobs={n},seed={seed},gpus_total=12,load=10,max_duration_s=14400,scripts=5,"
    "limit_overestimate_min=2,limit_overestimate=10,limit_habits=true,limit_per_job=true,"
    "limit_default_h=72,fail_share=0.3,fail_burst=3,fail_within_s=600"
)
PROFILES = {"limits": "sjf.toml", "predicted": "predict.toml", "oracle": "sjf-oracle.toml"}
SEEDS = (1, 2, 3, 4, 5)


def mean_jcts(seed: int, n_jobs: int) -> dict[str, float]:
    """Mean JCT (s) of each profile on the workload of ``seed``."""
    nodes = load_cluster_arg(str(EXAMPLES / "nodes.csv"))
    jobs = load_trace(WORKLOAD.format(n=n_jobs, seed=seed))
    return {
        name: float(summarize(replay(nodes, jobs, load_profile(EXAMPLES / file)))["jct_mean_s"])
        for name, file in PROFILES.items()
    }


def per_seed(quick: bool) -> dict[int, dict[str, float]]:
    seeds = SEEDS[:1] if quick else SEEDS
    return {seed: mean_jcts(seed, 150 if quick else 800) for seed in seeds}


def ratios(jcts: dict[int, dict[str, float]]) -> dict[str, float]:
    """The medians over seeds of predicted over oracle and predicted over limits."""
    runs = jcts.values()
    return {
        "pred_jct_over_oracle": statistics.median(j["predicted"] / j["oracle"] for j in runs),
        "pred_jct_over_limits": statistics.median(j["predicted"] / j["limits"] for j in runs),
    }


def measure(quick: bool) -> dict[str, float]:
    """``pred_jct_over_oracle`` and ``pred_jct_over_limits`` (see the module docstring)."""
    return ratios(per_seed(quick))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--quick", action="store_true", help="150 jobs, one seed")
    args = parser.parse_args()
    jcts = per_seed(args.quick)
    for seed, j in jcts.items():
        line = ", ".join(f"{name} {value:,.0f} s" for name, value in j.items())
        print(f"seed {seed}: mean JCT {line}", file=sys.stderr)
    out = {**ratios(jcts), "seeds": {str(s): j for s, j in jcts.items()}}
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
