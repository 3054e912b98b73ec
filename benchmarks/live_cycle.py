"""How long does a scheduling cycle take in the live controller, against the bare cycle?

The cluster and queue are ``benchmarks/cycle.py``'s (its builders, imported):
1,024 nodes x 8 GPUs, 5,000 running and 20,000 pending jobs. They are
written to a fresh SQLite store (nodes up, running jobs with their
placements, pending jobs), and a ``Controller`` started on it rebuilds its
job book from the store as after a restart. Its cycles then run through the
service's own path, ``run_cycle_now`` (what the loop thread calls): expire
nodes, backstop, sync the queue, snapshot the book, ``run_cycle``, apply the
plan, persist its effects in one transaction, notify. A manual clock stands
at cycle.py's ``NOW``, so time does not move between cycles.

* cycle.py full and cold: its full cycle (``run_cycle`` on the book's
  snapshot, warm profile, median of ``--repeat``) and its cold one (a fresh
  profile each time, median of 3), measured here in the same process so
  that every figure sees the same machine load;
* live first: a fresh controller's first cycle on a fresh copy of the store
  (cold profile; it plans about the same starts as cycle.py's cycle and
  persists them), median of 3;
* live: the cycles after it (warm profile, nothing more fits, the whole
  queue judged again), median of ``--repeat``;
* same state bare: ``run_cycle`` on that controller's own book with a warm
  profile, so ``live_to_same_state_bare`` is the live path's overhead.

The target is a live cycle within 1.5x of cycle.py's figure. With
``--profile``, one warm and one first live cycle run under cProfile and
their top functions are printed.

``python benchmarks/live_cycle.py --json`` prints the result as JSON on its last line.
``--quick`` does the same on ``cycle.py --quick``'s cluster and queue, 3 cycles a measurement.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cycle as bare  # benchmarks/cycle.py, beside this script
from gpufleet.adapters.store import Store, sqlite_url
from gpufleet.adapters.store import tables as t
from gpufleet.controller.clock import ManualClock
from gpufleet.controller.jobspec import request_to_json
from gpufleet.controller.live import start_row
from gpufleet.controller.service import Controller
from gpufleet.controller.setup import ControllerSetup
from gpufleet.core.cycle import run_cycle
from gpufleet.core.job import Job
from gpufleet.engine.book import JobBook

FOREVER = 1e12  # no node loses its heartbeat and no run meets the backstop while measured


def job_row(pk: int, job: Job) -> dict[str, Any]:
    """The store row of a pending job (numeric ids, as the controller gives them)."""
    return {
        "id": pk,
        "job_id": str(pk),
        "job_num": pk,
        "name": job.id,
        "user": job.user,
        "account": job.account,
        "partition": job.partition,
        "qos": job.qos,
        "state": "PENDING",
        "nice": job.priority_nice,
        "submit_time": float(job.submit_time),
        "time_limit_s": job.time_limit_s,
        "request": request_to_json(job.request),
        "spec": {"command": ["true"], "workdir": "/tmp"},
    }


def fill_store(store: Store, book: JobBook) -> None:
    """Write the book's nodes (up), running jobs (placed, run 1) and pending jobs."""
    nodes = [
        {"name": n.name, "inventory": {}, "gpu_uuids": [], "source": "config", "state": "up"}
        for n in book.state.nodes
    ]
    running = []
    pk = 0
    for r in book.running.values():
        pk += 1
        start = float(r.job.start_time or 0)
        placed = start_row(book.placements(r.assignments), r.assignments, run=1, start_time=start)
        running.append(job_row(pk, r.job) | placed)
    pending = [job_row(pk + k, job) for k, job in enumerate(book.pending.values(), 1)]
    with store.write() as conn:
        conn.execute(t.nodes.insert(), nodes)
        # Apart: one insert's rows must have the same columns, and pending rows have fewer.
        for rows in (running, pending):
            for i in range(0, len(rows), 5_000):
                conn.execute(t.jobs.insert(), rows[i : i + 5_000])


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def controller_on(template: Path, where: Path, book: JobBook) -> Controller:
    """A controller started (no loop thread) on a copy of the template store."""
    where.mkdir()
    shutil.copy(template / "gpufleet.db", where / "gpufleet.db")
    setup = ControllerSetup(
        profile_factory=lambda _recent: bare.profile(),
        nodes=bare.build_nodes(),
        qos=book.qos,
        partitions=book.partitions,
        heartbeat_timeout_s=FOREVER,
        backstop_s=FOREVER,
    )
    controller = Controller(
        setup=setup, db_url=sqlite_url(where), clock=ManualClock(float(bare.NOW))
    )
    controller.start(loop=False)
    return controller


def profiled(fn: Any) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(fn)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--repeat", type=int, help="cycles a measurement (5; 3 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="print live cycles' profiles")
    parser.add_argument("--quick", action="store_true", help="64 nodes and 1,500 jobs")
    args = parser.parse_args()
    repeat = max(3, args.repeat or (3 if args.quick else 5))
    if args.quick:
        bare.scale_to(**bare.QUICK)
    load = os.getloadavg()[0]

    book, _, fairshare = bare.build_book(args.seed)
    snap = bare.snapshot(book, bare.NOW, fairshare)
    cold = [timed(lambda: run_cycle(snap, bare.profile())) for _ in range(3)]
    prof = bare.profile()
    bare_plan = run_cycle(snap, prof)  # also the warm-up: kernels, the profile's cache
    full = [timed(lambda: run_cycle(snap, prof)) for _ in range(repeat)]

    root = Path(tempfile.mkdtemp(prefix="gpufleet-live-cycle-"))
    profiles = []
    try:
        template = root / "template"
        store = Store(sqlite_url(template))
        store.migrate()
        t0 = time.perf_counter()
        fill_store(store, book)
        store.close()
        fill_s = time.perf_counter() - t0
        first = []
        for rep in range(3):
            controller = controller_on(template, root / f"run{rep}", book)
            before = controller.writer.batches if controller.writer else 0
            first.append(timed(controller.run_cycle_now))
            started = len(controller.book.running)
            commits = (controller.writer.batches if controller.writer else 0) - before
            if rep < 2:
                controller.stop()
        # The same controller goes on: warm cycles on the queue its first cycle left.
        live = [timed(controller.run_cycle_now) for _ in range(repeat)]
        inow = bare.NOW
        same = bare.profile()
        run_cycle(controller.book.snapshot(inow), same, inow)
        same_state = [
            timed(lambda: run_cycle(controller.book.snapshot(inow), same, inow))
            for _ in range(repeat)
        ]
        pending = len(controller.book.pending)
        if args.profile:
            profiles.append(("warm live cycle", profiled(controller.run_cycle_now)))
        controller.stop()
        if args.profile:
            controller = controller_on(template, root / "profiled", book)
            profiles.append(("first live cycle", profiled(controller.run_cycle_now)))
            controller.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = statistics.median
    result = {
        "cycle_py_full_s": round(med(full), 4),
        "cycle_py_cold_s": round(med(cold), 4),
        "live_first_cycle_s": round(med(first), 4),
        "live_cycle_s": round(med(live), 4),
        "same_state_bare_s": round(med(same_state), 4),
        "first_to_cycle_py_full": round(med(first) / med(full), 2),
        "first_to_cycle_py_cold": round(med(first) / med(cold), 2),
        "live_to_same_state_bare": round(med(live) / med(same_state), 2),
        "starts_planned_bare": len(bare_plan.starts),
        "running_after_first": started,
        "first_cycle_commits": commits,
        "pending_in_book": pending,
        "store_fill_s": round(fill_s, 2),
        "loadavg_1m": round(load, 2),
    }
    if not args.json:
        for name, values in (
            ("cycle.py full", full),
            ("cycle.py cold", cold),
            ("live first", first),
            ("live warm", live),
            ("same state bare", same_state),
        ):
            print(f"{name} (s): {[round(x, 4) for x in values]}")
    for name, text in profiles:
        print(f"-- {name}\n{text}", file=sys.stderr if args.json else sys.stdout)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
