"""How long does the web dashboard take to load the first time, on a large cluster?

The cluster is ``benchmarks/cycle.py``'s at 1,000 nodes (its builders with
``NODES`` set to 1,000): 8 A100-80GB GPUs each, the last 64 MIG-partitioned,
5,000 jobs running in mixed shapes (whole GPUs, shares, MIG slices, gangs)
and 5,000 pending, written to a fresh SQLite store as
``benchmarks/live_cycle.py`` does, plus 10,000 finished jobs: 20,000 jobs in
the store. A controller starts on it and runs one cycle (the pending jobs
get their reasons and backfill's planned starts); 20 nodes are drained, and
every node sends GPU readings, 8 GPUs of them unhealthy. Its API is served
by uvicorn on 127.0.0.1.

* ``first_load_s``: what a browser's first visit fetches, on a new
  connection, in order: the page (``/ui/``), its script and style sheet, and
  the one data request the cluster map makes (``/v1/dashboard/map``, every
  node and GPU, parsed as JSON); median of ``--repeat``. The target is 1 s.
* ``map_s``: that data request alone (median), and ``map_bytes`` its size.
* ``render_s``: with Debian's ``chromium`` and selenium installed, headless
  Chromium's time from navigation to the drawn map (the page marks
  ``data-ready``), the token already in the tab; median of 3; null without a
  browser.

``--quick`` does the same at 50 nodes (1,000 jobs) and 3 first loads for the tests.

``python benchmarks/dashboard.py --json`` prints the result as JSON on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import uvicorn

import cycle as bare  # benchmarks/cycle.py, beside this script
import live_cycle  # benchmarks/live_cycle.py: the store filled from a job book
from gpufleet.adapters.store import Store, sqlite_url
from gpufleet.adapters.store import tables as t
from gpufleet.api.agent_schemas import AgentSync, GpuReading
from gpufleet.api.app import create_app
from gpufleet.controller.service import Controller, Principal

ADMIN = Principal(user="root", role="admin")
FULL = {"nodes": 1_000, "running": 5_000, "pending": 5_000, "finished": 10_000}
QUICK = {"nodes": 50, "running": 250, "pending": 250, "finished": 500}
DRAINED, UNHEALTHY = 20, 8
PAGE = ("/ui/", "/ui/app.js", "/ui/app.css")


def build(root: Path, scale: dict[str, int], seed: int) -> Controller:
    """The store filled and a controller started on it, after one cycle."""
    bare.scale_to(scale["nodes"], scale["running"], scale["pending"])
    book, wl, _ = bare.build_book(seed)
    template = root / "template"
    store = Store(sqlite_url(template))
    store.migrate()
    live_cycle.fill_store(store, book)
    pk = len(book.running) + len(book.pending)
    finished = []
    for k in range(scale["finished"]):
        job = wl.job(bare.NOW - 300_000 + 10 * k)
        start = float(job.submit_time + 60)
        done = {"state": "COMPLETED", "start_time": start, "end_time": start + 600, "exit_code": 0}
        finished.append(live_cycle.job_row(pk + k + 1, job) | done)
    with store.write() as conn:
        for i in range(0, len(finished), 5_000):
            conn.execute(t.jobs.insert(), finished[i : i + 5_000])
    store.close()
    controller = live_cycle.controller_on(template, root / "run", book)
    controller.run_cycle_now()
    names = [n.name for n in book.state.nodes]
    for name in names[:DRAINED]:
        controller.drain_node(principal=ADMIN, name=name, reason="benchmark")
    for k, name in enumerate(names):
        gpus = [
            GpuReading(
                index=g,
                util_pct=float((k * 8 + g) % 100),
                healthy=not (k == len(names) // 2 and g < UNHEALTHY),
                health_reason="XID 79" if k == len(names) // 2 and g < UNHEALTHY else "",
            )
            for g in range(bare.GPUS)
        ]
        controller.sync_agent(principal=ADMIN, node=name, body=AgentSync(gpus=gpus))
    return controller


@contextmanager
def served(controller: Controller) -> Iterator[str]:
    """The API on a free port of 127.0.0.1 until the block ends; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(create_app(controller), lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def first_load(url: str, token: str) -> tuple[float, float, int]:
    """One first visit on a new connection: (whole load, map request, map bytes)."""
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as c:
        for path in PAGE:
            c.get(path).raise_for_status()
        t1 = time.perf_counter()
        answer = c.get("/v1/dashboard/map", headers={"Authorization": f"Bearer {token}"})
        answer.raise_for_status()
        body = answer.json()
        end = time.perf_counter()
    assert body["nodes"], "the map is empty"
    return end - t0, end - t1, len(answer.content)


def rendered(url: str, token: str, repeat: int) -> float | None:
    """Headless Chromium's navigation-to-drawn-map time (median), or None without one."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return None
    if chromium is None or driver is None:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(driver))
    times = []
    try:
        browser.get(url + "/ui/")  # the origin's sessionStorage takes the token
        browser.execute_script("sessionStorage.setItem('gpufleet.token', arguments[0])", token)
        for _ in range(repeat):
            browser.get(url + "/ui/#/map")
            WebDriverWait(browser, 60).until(
                lambda b: b.execute_script("return document.body.dataset.ready") == "map"
            )
            times.append(browser.execute_script("return performance.now()") / 1000)
    finally:
        browser.quit()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--quick", action="store_true", help="50 nodes and 1,000 jobs")
    parser.add_argument("--repeat", type=int, help="first loads measured (7; 3 with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scale = QUICK if args.quick else FULL
    load = os.getloadavg()[0]
    root = Path(tempfile.mkdtemp(prefix="gpufleet-dashboard-"))
    try:
        t0 = time.perf_counter()
        controller = build(root, scale, args.seed)
        setup_s = time.perf_counter() - t0
        token = controller.create_token(principal=ADMIN, name="bench", user="root", role="admin")
        with served(controller) as url:
            first_load(url, token.token)  # warm: imports and the server's first request
            repeat = max(3, args.repeat or (3 if args.quick else 7))
            loads = [first_load(url, token.token) for _ in range(repeat)]
            render = rendered(url, token.token, 3)
        with controller.store.read() as conn:
            jobs = conn.execute(sa.select(sa.func.count()).select_from(t.jobs)).scalar()
        nodes = len(controller.list_nodes(principal=ADMIN))
        controller.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = statistics.median
    result: dict[str, Any] = {
        "map_s": round(med(x[1] for x in loads), 4),
        "map_bytes": loads[0][2],
        "render_s": None if render is None else round(render, 3),
        "setup_s": round(setup_s, 1),
        "loadavg_1m": round(load, 2),
        "first_load_s": round(med(x[0] for x in loads), 4),
        "nodes": nodes,
        "jobs": jobs,
    }
    if not args.json:
        print(f"first loads (s): {[round(x[0], 4) for x in loads]}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
