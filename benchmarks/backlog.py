"""How fast does a replay stay when thousands of jobs wait?

A seeded synthetic trace of 15,000 jobs offered at ten times what 512 GPUs
(64 nodes x 8 A100-80GB) can serve (``synthetic:n_jobs=15000,seed=1,
gpus_total=512,load=10``): arrivals end while most jobs still wait, so the
queue peaks above 13,000 jobs and drains over the rest of the replay. It is
replayed under three policies, each with Slurm's default queue depth (a cycle
considers the first 100 jobs, ``[ordering] queue_depth``) and backfill's
default ``max_job_test`` (500):

* **fifo-strict**: FIFO, no backfill;
* **fifo-easy**: FIFO with EASY backfill;
* **multifactor-conservative**: multifactor (age, fairshare, QoS) with
  conservative backfill, priorities recomputed every 5 minutes (Slurm's
  default ``PriorityCalcPeriod``, ``[ordering.multifactor] calc_period_s``),
  so the replay can skip the periodic cycles that only the clock separates.

Each replay runs in a fresh process, ``--repeat`` times; the JSON on the
last line gives each policy's median wall time (trace loading excluded) and
median CPU time (on a shared machine wall time measures the share of the
CPUs a run got, CPU time the work it did), the warm-up before them (the
quick trace replayed once, which compiles the numba kernels after an
install or loads them from numba's cache), its cycles (and how many periodic
ones were skipped), and the queue: the mean and peak number of waiting jobs
and the share of the replay's time with at least 10,000 waiting. ``--only
NAME`` runs one policy. ``--quick`` replays 100 jobs of the same kind on 8
nodes (``gpus_total=64``), in seconds; ``--jobs N`` replays the first trace's
kind with N jobs (for profiling). ``decisions`` is a checksum of every job's
start, end and nodes: a change that only makes the replay faster keeps it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from itertools import pairwise
from typing import Any

from gpufleet.core.model import GPU, Node
from gpufleet.sim.driver import SimResult
from gpufleet.sim.profile import SimProfile, profile_from_dict, replay
from gpufleet.sim.traces import load_trace

TRACE = "synthetic:n_jobs=15000,seed=1,gpus_total=512,load=10"
QUICK_TRACE = "synthetic:n_jobs=100,seed=1,gpus_total=64,load=10"
DEPTH = {"queue_depth": 100}
POLICIES: dict[str, dict[str, Any]] = {
    "fifo-strict": {"ordering": {"plugin": "fifo", **DEPTH}},
    "fifo-easy": {"ordering": {"plugin": "fifo", **DEPTH}, "backfill": {"mode": "easy"}},
    "multifactor-conservative": {
        "ordering": {"plugin": "multifactor", **DEPTH, "multifactor": {"calc_period_s": 300}},
        "backfill": {"mode": "conservative"},
    },
}
DEEP = 10_000


def nodes(count: int) -> list[Node]:
    gpus = tuple(GPU(index=i, model="A100-80GB", memory_mib=80 * 1024) for i in range(8))
    return [Node(f"node{i:02d}", 128_000, 1024 * 1024, gpus) for i in range(count)]


def decisions(result: SimResult) -> str:
    """A checksum of when and where each job started and when it ended."""
    digest = hashlib.sha256()
    for r in sorted(result.jobs, key=lambda r: r.job.id):
        nodes = ",".join(str(a.node) for a in r.last_assignments)
        digest.update(f"{r.job.id} {r.first_start} {r.end} {r.state} {nodes}\n".encode())
    return digest.hexdigest()[:16]


def one(name: str, quick: bool, jobs_n: int | None) -> dict[str, Any]:
    """Replay the trace (or the quick one, or one of ``jobs_n`` jobs) under one policy,
    in this process."""
    trace = QUICK_TRACE if quick else TRACE
    if jobs_n is not None:
        trace = trace.replace("n_jobs=15000", f"n_jobs={jobs_n}")
    jobs = load_trace(trace)

    def profile() -> SimProfile:  # a fresh one: plugins and caches keep state
        return profile_from_dict({**POLICIES[name], "placement": {"plugin": "best-fit"}}, name)

    # The quick trace first: numba compiles the kernels the policy uses on their first
    # call (about 16 s for all of them after an install, cached on disk after that).
    warm = time.perf_counter()
    replay(nodes(8), load_trace(QUICK_TRACE), profile())
    warmup = time.perf_counter() - warm
    start, cpu = time.perf_counter(), time.process_time()
    result = replay(nodes(8 if quick else 64), jobs, profile())
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    samples = result.samples
    spans = [(b.time - a.time, a.pending) for a, b in pairwise(samples)]
    span = sum(d for d, _ in spans) or 1
    return {
        "warmup_s": round(warmup, 2),
        "wall_s": round(seconds, 2),
        "cpu_s": round(cpu, 2),
        "cycles": result.cycles,
        "cycles_skipped": result.cycles_skipped,
        "waiting_mean": round(sum(d * n for d, n in spans) / span),
        "waiting_peak": max(s.pending for s in samples),
        "share_deep": round(sum(d for d, n in spans if n >= DEEP) / span, 3),
        "decisions": decisions(result),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--only", choices=sorted(POLICIES))
    parser.add_argument("--repeat", type=int, default=1, help="runs per policy (median)")
    parser.add_argument("--child", choices=sorted(POLICIES), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="100 jobs on 8 nodes")
    parser.add_argument("--jobs", type=int, help="replay this many jobs (of the same kind)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(args.child, args.quick, args.jobs)))
        return
    out: dict[str, Any] = {}
    for name in [args.only] if args.only else list(POLICIES):
        runs = []
        for _ in range(args.repeat):
            child = [sys.executable, __file__, "--child", name]
            child += ["--quick"] if args.quick else []
            child += ["--jobs", str(args.jobs)] if args.jobs is not None else []
            done = subprocess.run(child, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.splitlines()[-1]))
        medians = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s")}
        out[name] = {**runs[-1], **medians}
        print(f"{name}: {out[name]['wall_s']} s, {out[name]['cycles']} cycles", file=sys.stderr)
    if args.json:
        print(json.dumps(out))
    else:
        for name, figures in out.items():
            print(name, figures)


if __name__ == "__main__":
    main()
