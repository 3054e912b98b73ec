"""How long does one scheduling cycle take on a large, busy cluster?

The cluster: 1,024 nodes x 8 A100-80GB GPUs (8,192 GPUs), 64 of the nodes
MIG-partitioned. 5,000 jobs are running and 20,000 wait, of mixed shapes:
fractions of a GPU, 1 to 8 whole GPUs, 2- and 4-node gangs, and MIG slices,
from 400 users in 40 accounts under three QoSes with per-user and per-account
GPU limits. The profile: multifactor priority with fairshare, QoS and
partition limits, EASY backfill testing every pending job, best-fit placement.

* full cycle: ``run_cycle`` on that snapshot (it changes nothing, so every
  repetition sees the same queue and judges all of it);
* incremental cycle: the previous plan carried out by the job book
  (``engine.JobBook``, as the drivers do), then 5 jobs finish and 5 arrive;
  the next cycle;
* peak RSS of the process.

As a driver does, every cycle runs with the same profile, whose cache keeps
what each job fixes (its columns) across cycles; the first, cold cycle,
which fills that cache, is printed apart without ``--json``.

``python benchmarks/cycle.py --json`` prints the result as JSON on its last line.
``--quick`` does the same on 64 nodes with 300 running and 1,200 pending jobs.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from gpufleet.core.cycle import SchedulingProfile, run_cycle
from gpufleet.core.job import Job, JobState, Partition, QoS, RunningJob
from gpufleet.core.model import GPU, Node, Request
from gpufleet.core.placement import PlacementProfile, Placer
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.engine.book import JobBook
from gpufleet.policies.backfill import Backfill, BackfillArgs
from gpufleet.policies.limits import PartitionLimits, QosLimits
from gpufleet.policies.placement.fit import BestFit
from gpufleet.policies.priority import Multifactor

NODES, GPUS, MIG_NODES = 1024, 8, 64
RUNNING, PENDING = 5_000, 20_000
QUICK = {"nodes": 64, "running": 300, "pending": 1_200}
MODEL = "A100-80GB"
MIG_LAYOUT = (("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))

# (request, weight among pending, weight among running): the shapes users submit, as
# templates, the way clusters see them. Running jobs lean small: 5,000 of them take
# about 1.4 GPUs each, most of the cluster.
SHAPES: list[tuple[Request, float, float]] = [
    (Request(cpu_milli=2_000, memory_mib=8_192, gpu_milli=250), 0.10, 0.15),
    (Request(cpu_milli=4_000, memory_mib=16_384, gpu_milli=500), 0.10, 0.15),
    (Request(cpu_milli=8_000, memory_mib=32_768, gpus=1), 0.30, 0.36),
    (Request(cpu_milli=16_000, memory_mib=65_536, gpus=2), 0.15, 0.15),
    (Request(cpu_milli=32_000, memory_mib=131_072, gpus=4), 0.12, 0.07),
    (Request(cpu_milli=64_000, memory_mib=262_144, gpus=8), 0.08, 0.03),
    (Request(cpu_milli=64_000, memory_mib=262_144, gpus=8, nodes=2), 0.04, 0.01),
    (Request(cpu_milli=64_000, memory_mib=262_144, gpus=8, nodes=4), 0.02, 0.0),
    (Request(cpu_milli=4_000, memory_mib=16_384, mig_profile="1g.10gb", mig_count=1), 0.05, 0.04),
    (Request(cpu_milli=8_000, memory_mib=32_768, mig_profile="3g.40gb", mig_count=1), 0.04, 0.04),
]
LIMITS_S = (600, 3_600, 4 * 3_600, 12 * 3_600, 24 * 3_600)


def scale_to(nodes: int, running: int, pending: int) -> None:
    """Build ``nodes`` nodes (at most an eighth of them MIG-partitioned), ``running``
    running jobs and ``pending`` pending ones from now on (``--quick``, other scripts)."""
    global NODES, RUNNING, PENDING, MIG_NODES
    NODES, RUNNING, PENDING = nodes, running, pending
    MIG_NODES = min(MIG_NODES, nodes // 8)


def build_nodes() -> list[Node]:
    nodes = []
    for i in range(NODES):
        mig = MIG_LAYOUT if i >= NODES - MIG_NODES else None
        gpus = tuple(GPU(g, MODEL, 80 * 1024, mig=mig) for g in range(GPUS))
        nodes.append(Node(f"n{i:04d}", 128_000, 1_024 * 1_024, gpus, switch=f"s{i // 32}"))
    return nodes


class Workload:
    """A seeded generator of jobs over the shape templates."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.count = 0
        pending = np.array([s[1] for s in SHAPES])
        running = np.array([s[2] for s in SHAPES])
        self.p = {False: pending / pending.sum(), True: running / running.sum()}

    def job(self, submit: int, **state: object) -> Job:
        self.count += 1
        p = self.p[state.get("state") is JobState.RUNNING]
        shape = SHAPES[int(self.rng.choice(len(SHAPES), p=p))][0]
        user = int(self.rng.integers(400))
        qos = ("normal", "normal", "normal", "high", "scavenger")[int(self.rng.integers(5))]
        return Job(
            id=f"j{self.count:06d}",
            user=f"u{user:03d}",
            account=f"a{user % 40:02d}",
            qos=qos,
            partition="gpu",
            request=shape,
            submit_time=submit,
            time_limit_s=int(self.rng.choice(LIMITS_S)),
            priority_nice=int(self.rng.integers(0, 3)) * 100,
            **state,  # type: ignore[arg-type]
        )


NOW = 100_000


def build_book(seed: int) -> tuple[JobBook, Workload, dict[str, float]]:
    """The busy cluster in a job book, the workload that made it, and each user's fairshare."""
    wl = Workload(seed)
    nodes = build_nodes()
    state = ClusterState(nodes)
    placer = Placer(PlacementProfile("best-fit", [(BestFit(), 1.0)]))
    running: list[RunningJob] = []
    for _ in range(3 * RUNNING):
        if len(running) == RUNNING:
            break
        start = NOW - int(wl.rng.integers(0, 20_000))
        job = wl.job(start - 60, state=JobState.RUNNING, start_time=start)
        placed = placer.place(state, job.request)
        if placed is not None:
            running.append(RunningJob(job, tuple(placed), start + job.time_limit_s))
    else:
        raise RuntimeError(f"only {len(running)} of {RUNNING} running jobs fit")
    book = JobBook(
        nodes,
        {
            "normal": QoS("normal", priority=10, max_gpus_per_user=64, max_gpus_per_account=512),
            "high": QoS("high", priority=100, max_gpus_per_user=32, preempt=("scavenger",)),
            "scavenger": QoS("scavenger", priority=0),
        },
        {"gpu": Partition("gpu", max_time_s=48 * 3_600)},
    )
    for r in running:
        book.restore(r)
    for _ in range(PENDING):
        book.submit(wl.job(NOW - int(wl.rng.integers(0, 200_000))))
    users = {f"u{u:03d}" for u in range(400)}
    return book, wl, {u: float(wl.rng.random()) for u in sorted(users)}


def profile() -> SchedulingProfile:
    return SchedulingProfile(
        ordering=Multifactor(),
        placement=PlacementProfile("best-fit", [(BestFit(), 1.0)]),
        admission=[PartitionLimits(), QosLimits()],
        backfill=Backfill(BackfillArgs(mode="easy", max_job_test=PENDING)),
    )


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def snapshot(book: JobBook, now: int, fairshare: dict[str, float]) -> Snapshot:
    return replace(book.snapshot(now), fairshare=fairshare)


def incremental(book: JobBook, wl: Workload, now: int) -> None:
    """What happens in the 10 s before the next cycle: 5 running jobs finish, 5 arrive."""
    for _ in range(5):
        running = list(book.running)
        book.finish(running[int(wl.rng.integers(len(running)))], now)
    for _ in range(5):
        book.submit(wl.job(now))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--repeat", type=int, default=5, help="cycles per measurement (>= 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="64 nodes and 1,500 jobs")
    args = parser.parse_args()
    if args.quick:
        scale_to(**QUICK)
    book, wl, fairshare = build_book(args.seed)
    prof = profile()
    now = NOW
    snap = snapshot(book, now, fairshare)
    cold = timed(lambda: run_cycle(snap, prof))  # also the warm-up: kernels, caches
    full = [timed(lambda: run_cycle(snap, prof)) for _ in range(max(5, args.repeat))]
    plan = run_cycle(snap, prof)
    first = plan
    inc = []
    for _ in range(max(5, args.repeat)):
        book.apply(plan, now)
        now += 10
        incremental(book, wl, now)
        snap = snapshot(book, now, fairshare)
        t0 = time.perf_counter()
        plan = run_cycle(snap, prof)
        inc.append(time.perf_counter() - t0)
    result = {
        "full_cycle_median_s": round(statistics.median(full), 4),
        "incremental_cycle_median_s": round(statistics.median(inc), 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "pending": PENDING,
        "gpus": NODES * GPUS,
    }
    if not args.json:
        print(f"first cycle: {first.stats}; last incremental cycle: {plan.stats}")
        print(f"cold cycle (empty cache) (s): {round(cold, 4)}")
        print(f"full cycles (s): {[round(t, 4) for t in full]}")
        print(f"incremental cycles (s): {[round(t, 4) for t in inc]}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
