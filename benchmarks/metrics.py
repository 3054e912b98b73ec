"""How long does a Prometheus scrape of ``/metrics`` take on a large cluster?

The cluster is ``benchmarks/dashboard.py``'s: 1,000 nodes of 8 A100-80GB
GPUs (the last 64 MIG-partitioned), 5,000 jobs running and 5,000 pending
after one cycle, 10,000 finished (20,000 jobs in the SQLite store), 20
nodes drained, and GPU readings from every node. Its API is served by
uvicorn on 127.0.0.1.

* ``scrape_s``: ``GET /metrics`` with a metrics token, as Prometheus
  scrapes it (a new connection, the whole body read); median of
  ``--repeat``. ``bytes`` is the text's size, ``gzip_bytes`` what came
  over the wire (gzip, as Prometheus asks for it), ``samples`` the series.
* ``collect_s``: the text format built in the process alone (the
  controller's observation under its lock, the metric families, the text);
  median of ``--repeat``.
* ``lock_s``: of that, the time the scheduling lock is held
  (``Controller.observe``), which is what a scrape can delay a cycle by.

``--quick`` does the same at 50 nodes (1,000 jobs) for the tests.

``python benchmarks/metrics.py --json`` prints the result as JSON on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import dashboard  # benchmarks/dashboard.py, beside this script: the same cluster
from gpufleet.adapters.prometheus import exposition
from gpufleet.controller.service import Principal

ADMIN = Principal(user="root", role="admin")


def timed(work: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``work()`` over ``repeat`` runs, after one to warm up."""
    work()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--quick", action="store_true", help="50 nodes and 1,000 jobs")
    parser.add_argument("--repeat", type=int, help="scrapes measured (9; 3 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scale = dashboard.QUICK if args.quick else dashboard.FULL
    repeat = max(3, args.repeat or (3 if args.quick else 9))
    load = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="gpufleet-metrics-"))
    try:
        controller = dashboard.build(root, scale, args.seed)
        token = controller.create_token(
            principal=ADMIN, name="bench", user="prometheus", role="metrics"
        ).token
        collect_s = timed(lambda: exposition(controller), repeat)
        lock_s = timed(controller.observe, repeat)
        answers: list[httpx.Response] = []

        def scrape(url: str) -> None:
            with httpx.Client(base_url=url, timeout=60) as client:
                headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "gzip"}
                answer = client.get("/metrics", headers=headers)
                answers.append(answer.raise_for_status())

        with dashboard.served(controller) as url:
            scrape_s = timed(lambda: scrape(url), repeat)
        nodes = len(controller.list_nodes(principal=ADMIN))
        controller.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = answers[-1].text
    result: dict[str, Any] = {
        "collect_s": round(collect_s, 4),
        "lock_s": round(lock_s, 4),
        "bytes": len(answers[-1].content),
        "gzip_bytes": answers[-1].num_bytes_downloaded,
        "samples": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
        "loadavg_1m": round(load, 2),
        "scrape_s": round(scrape_s, 4),
        "nodes": nodes,
        "jobs": scale["running"] + scale["pending"] + scale["finished"],
    }
    if not args.json:
        for key, value in result.items():
            print(f"{key:>12}  {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
