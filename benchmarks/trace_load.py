"""How fast are public-format traces read?

A seeded, made-up log in Helios' ``cluster_log.csv`` format (100,000 rows,
ISO datetimes, an eighth of them CPU jobs that the loader skips) is written
to a temporary directory and read three ways, each timed three times:

* **philly**: ``philly:FILE``, the Helios/Philly loader;
* **generic mapped**: ``generic:FILE`` under an inline mapping of the same
  columns (renames, ISO times, a unit, a constant; unmapped columns as
  labels), which keeps the CPU jobs;
* **generic native**: the same jobs written in gpufleet's own generic columns
  (seconds), read with no mapping.

``python benchmarks/trace_load.py --json`` prints the medians (seconds and
rows per second) as JSON on its last line; ``--rows N`` changes the size, and
``--quick`` makes it 2,000.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from gpufleet.sim.traces import load_trace

HEADER = (
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)
MAPPING = (
    "time=iso,columns.id=job_id,columns.account=vc,columns.gpus=gpu_num,"
    "columns.duration_s=duration,columns.cpu_milli=cpu_num,units.cpu_milli=cores,"
    "constants.partition=gpu"
)


def write_logs(folder: Path, rows: int) -> tuple[Path, Path]:
    """The Helios-style log and the same jobs in gpufleet's generic columns."""
    rng = random.Random(1)
    origin = datetime(2020, 4, 1)
    helios, native = folder / "cluster_log.csv", folder / "generic.csv"
    with helios.open("w", newline="") as h, native.open("w", newline="") as n:
        log, own = csv.writer(h), csv.writer(n)
        log.writerow(HEADER.split(","))
        own.writerow(["id", "submit_time", "duration_s", "gpus", "account", "user"])
        for i in range(rows):
            submit = origin + timedelta(seconds=30 * i)
            gpus = rng.choice([0, 1, 1, 1, 2, 4, 8, 8])
            runtime = rng.randint(1, 20_000)
            end = submit + timedelta(seconds=runtime)
            who = [f"job{i}", f"u{i % 300}", f"vc{i % 20}"]
            times = [submit, submit, end, runtime, 0]
            log.writerow([*who, gpus, 6 * gpus or 4, 1, "COMPLETED", *times])
            if gpus:
                own.writerow([f"job{i}", 30 * i, runtime, gpus, f"vc{i % 20}", f"u{i % 300}"])
    return helios, native


def median_seconds(spec: str, repeats: int = 3) -> tuple[float, int]:
    times, jobs = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        jobs = len(load_trace(spec))
        times.append(time.perf_counter() - start)
    return statistics.median(times), jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, help="rows (default 100,000; 2,000 with --quick)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="2,000 rows")
    args = parser.parse_args()
    rows = args.rows or (2_000 if args.quick else 100_000)
    result: dict[str, object] = {"rows": rows}
    with tempfile.TemporaryDirectory() as tmp:
        helios, native = write_logs(Path(tmp), rows)
        cases = {
            "philly": f"philly:{helios}",
            "generic_mapped": f"generic:{helios},{MAPPING}",
            "generic_native": f"generic:{native}",
        }
        for name, spec in cases.items():
            seconds, jobs = median_seconds(spec)
            result[name] = {
                "seconds": round(seconds, 2),
                "rows_per_s": round(rows / seconds),
                "jobs": jobs,
            }
            if not args.json:
                print(f"{name}: {jobs} jobs in {seconds:.2f} s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
