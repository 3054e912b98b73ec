"""How fast does a live controller take jobs and answer reads, and does a crash lose any?

Each measurement runs a real controller (``gpufleet server``) as a separate
process on 127.0.0.1 and a free port, with its own data directory, and talks
to it over HTTP only, from other processes. One submission first lets a fresh
server's first cycle (profile, kernels) pass:

* submissions: 4 client processes of 4 threads each (``FULL``), every
  thread on one keep-alive connection of the standard library's
  ``http.client`` (the clients run on the server's two cores, so they are
  kept light, as load generators are: httpx cost about 1.5 ms of CPU per
  request, three times the server's), POST small jobs (one CPU,
  ``true``) with a ``request_id`` for 5 seconds; jobs/s is the acknowledged
  submissions over the time from the start to the last acknowledgement,
  median of ``--repeat`` bursts on the same server. The
  one declared node has no agent, so the jobs stay pending and every
  submission wakes the scheduler, as a flood of submissions would. The same
  bursts of held jobs (which the scheduler skips), run first on the empty
  queue, give the rate of the submission path alone; the server's CPU time
  per submission is reported for both;
* a 10,000-task array: the time of its one POST (median of 3, each after a
  quiet second);
* reads with 100,000 jobs in the store: the store is filled with held arrays
  of 10,000 tasks from 10 users (held, so the scheduler does not spend the
  read phase placing them; the submission path is the same), then one
  client asks, one request at a time, for one user's queue (``GET
  /v1/jobs?user=U&limit=100``) and for single jobs of that user (``GET
  /v1/jobs/{id}``); p50 and p99 latency;
* restart: the server is stopped and started again on that store, every job
  pending; the seconds until it answers;
* crash safety (SQLite): a controller with a real agent (``gpufleet agent``)
  running short jobs is SIGKILLed in the middle of a submission burst,
  then restarted on the same data directory; once the agent runs jobs for it
  again, a few more seconds pass. Every submission the clients
  saw acknowledged must be in the store exactly once (by ``request_id``),
  and no job may have run twice: each run of a job creates a marker file
  named after its job id and run, so a run started twice shows as two
  markers, and the store's runs of one job must not overlap.

Submissions and reads are measured on SQLite (the default store) and on
PostgreSQL (``--pg URL``, in a fresh schema dropped afterwards; skipped with
a note on stderr when the server cannot be reached).

``--quick`` runs a small version in seconds (a test keeps the script working).
``python benchmarks/api_load.py --json`` prints the result as JSON on its last line.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import itertools
import json
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

# The client processes re-import this module when they start, so the store and
# the controller (SQLAlchemy, numpy) are imported only where they are used.
if TYPE_CHECKING:
    from gpufleet.adapters.store import Store

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
USERS = 10
NODE = "bench-01"
# The node's group, in the controller's configuration and in the agent's inventory.
NODE_GROUP = f"""
[[nodes]]
names = "{NODE}"
cpu_milli = 8000
memory_mib = 65536
gpus = {{ model = "L4", count = 2, nvlink = "none" }}
"""
# Each run leaves one marker named JOB.RUN.random: two markers for one (job, run) or
# more runs than one per job mean a job was started twice. No user input reaches sh.
MARK_RUN = 'mktemp "$0/$GPUFLEET_JOB_ID.$GPUFLEET_RESTART_COUNT.XXXXXX" >/dev/null; sleep 0.2'


@dataclass(frozen=True)
class Scale:
    procs: int
    threads: int
    burst_s: float
    repeat: int
    array_tasks: int
    arrays: int
    fill_jobs: int
    fill_array: int
    reads: int
    crash_burst_s: float
    crash_settle_s: float


FULL = Scale(4, 4, 5.0, 3, 10_000, 3, 100_000, 10_000, 500, 4.0, 8.0)
QUICK = Scale(2, 2, 1.0, 1, 500, 1, 2_000, 500, 40, 2.0, 3.0)


# -- the controller and its agent as processes ---------------------------------------------


@functools.cache
def _cli(command: str) -> tuple[str, ...]:
    """How to run ``gpufleet COMMAND``: the installed command line when it has it, else
    the command's own typer function (the same code, before it is registered)."""
    probe = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", command, "--help"],
        capture_output=True,
        check=False,
    )
    if probe.returncode == 0:
        return (sys.executable, "-m", "gpufleet.cli.main", command)
    code = f"import typer; from gpufleet.cli.{command} import {command}; typer.run({command})"
    return (sys.executable, "-c", code)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(path: Path, *, heartbeat_s: int = 30) -> None:
    """One node, one partition, an admin and USERS users."""
    users = "".join(f'\n[[principals]]\nname = "u{i}"\n' for i in range(USERS))
    path.write_text(
        f"[server]\ninterval_s = 10\nheartbeat_interval_s = {heartbeat_s}\n"
        # The 10,000-task arrays are over the default max_array_size (1001).
        "max_array_size = 10000\n"
        + NODE_GROUP
        + '\n[[principals]]\nname = "admin"\nrole = "admin"\n'
        + users
    )


class Process:
    """A child process with its output in a log file; killed at the latest on ``close``."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def terminate(self, wait_s: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.kill()

    def cpu_s(self) -> float:
        """CPU seconds the process has used (user + system, all threads), from /proc."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


class Server(Process):
    """``gpufleet server`` on 127.0.0.1:``port``, started and answering /healthz."""

    def __init__(
        self, argv: tuple[str, ...], config: Path, data: Path, db: str | None, port: int
    ) -> None:
        args = [*argv, "--config", str(config), "--data", str(data), "--port", str(port)]
        super().__init__(args + (["--db", db] if db else []), data.parent / f"server-{port}.log")
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the controller exited:\n{self.tail()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the controller did not answer:\n{self.tail()}")
            time.sleep(0.1)


@dataclass
class Site:
    """A data directory and store with the tokens the benchmark uses."""

    root: Path
    config: Path
    data: Path
    db: str | None  # the URL the server gets; None: SQLite in ``data``
    tokens: dict[str, str]  # user (or "node") -> bearer token


@contextmanager
def site(root: Path, kind: str, pg_url: str, *, heartbeat_s: int = 30) -> Iterator[Site]:
    """A fresh store (SQLite file, or a PostgreSQL schema dropped on exit) with tokens.

    Tokens are made through the store, as ``gpufleet token create`` does: the
    schema is migrated first, and the server finds it current.
    """
    from gpufleet.adapters.store import Store, sqlite_url

    root.mkdir(parents=True)
    config = root / "controller.toml"
    write_config(config, heartbeat_s=heartbeat_s)
    data = root / "data"
    schema = None
    if kind == "sqlite":
        store, db = Store(sqlite_url(data)), None
    else:
        schema = f"bench_{os.getpid()}_{secrets.token_hex(4)}"
        store = Store(pg_url, schema=schema)
        db = f"{pg_url}?options=-csearch_path%3D{schema}"
    try:
        store.migrate()
        now = time.time()
        tokens = {"admin": _token(store, "admin", "admin", None, now)}
        tokens.update({f"u{i}": _token(store, f"u{i}", "user", None, now) for i in range(USERS)})
        tokens["node"] = _token(store, "node", "node", NODE, now)
        store.close()
        yield Site(root, config, data, db, tokens)
    finally:
        if schema is not None:
            store.drop_schema()
        store.close()


def _token(store: Store, user: str, role: Any, node: str | None, now: float) -> str:
    from gpufleet.controller.tokens import issue_token

    return issue_token(store, name="bench", user=user, role=role, node=node, now=now).token


def postgres_ok(url: str) -> bool:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
    except sa.exc.SQLAlchemyError as e:
        print(f"postgres skipped: {str(e).splitlines()[0]}", file=sys.stderr)
        return False
    return True


# -- submitting clients (separate processes) ----------------------------------------------


def submit_worker(
    url: str,
    token: str,
    threads: int,
    duration: float,
    prefix: str,
    body: dict[str, Any],
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """Submit from ``threads`` keep-alive connections for ``duration`` seconds after ``go``.

    Puts on ``results`` the acknowledged request ids, the failed requests and the
    last acknowledgement's time. A thread whose connection fails stops there (the
    server is gone), so a killed server ends the burst.
    """
    acked: list[list[str]] = [[] for _ in range(threads)]
    errors = [0] * threads
    last = [0.0] * threads
    host, port = httpx.URL(url).host, httpx.URL(url).port
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    # The standard library's client: a third of httpx's CPU per request, and the
    # clients share the server's two cores (see the module docstring).
    conns = [http.client.HTTPConnection(host, port, timeout=30) for _ in range(threads)]
    start = [0.0]

    def run(k: int) -> None:
        i = 0
        while time.time() < start[0] + duration:
            rid = f"{prefix}-{k}-{i}"
            i += 1
            data = json.dumps({**body, "name": rid, "request_id": rid})
            try:
                conns[k].request("POST", "/v1/jobs", data, headers)
                response = conns[k].getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                errors[k] += 1
                return
            if response.status in (200, 201):
                acked[k].append(rid)
                last[k] = time.time()
            else:
                errors[k] += 1

    ready.put(prefix)
    go.wait()
    start[0] = time.time()
    pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    for c in conns:
        c.close()
    results.put(
        {"acked": [a for per in acked for a in per], "errors": sum(errors), "last": max(last)}
    )


def burst(
    url: str,
    tokens: dict[str, str],
    scale: Scale,
    duration: float,
    tag: str,
    body: dict[str, Any],
    during: Callable[[], None] | None = None,
) -> tuple[list[str], int, float]:
    """One submission burst from ``scale.procs`` processes (users u0, u1, ...).

    The clocks start once every process has imported and connected. ``during()``
    runs in this process while the clients submit. Returns the acknowledged
    request ids, the number of failed requests, and jobs/s.
    """
    ctx = get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=submit_worker,
            args=(
                url,
                tokens[f"u{p % USERS}"],
                scale.threads,
                duration,
                f"{tag}-p{p}",
                body,
                ready,
                go,
                out,
            ),
        )
        for p in range(scale.procs)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    start = time.time()
    go.set()
    if during is not None:
        during()
    results = [out.get(timeout=duration + 120) for _ in procs]
    for p in procs:
        p.join()
    acked = [rid for r in results for rid in r["acked"]]
    elapsed = max(r["last"] for r in results) - start
    return acked, sum(r["errors"] for r in results), len(acked) / elapsed if elapsed > 0 else 0.0


# -- measurements --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def post_array(c: httpx.Client, tasks: int, workdir: str) -> tuple[str, float]:
    """Submit one held array of ``tasks`` tasks; its job number and the POST's seconds."""
    body = {"command": ["true"], "workdir": workdir, "array": f"0-{tasks - 1}", "hold": True}
    t0 = time.perf_counter()
    r = c.post("/v1/jobs", json=body)
    elapsed = time.perf_counter() - t0
    if r.status_code != 201:
        raise RuntimeError(f"array submission refused: {r.status_code} {r.text[:300]}")
    return str(r.json()["job_id"]), elapsed


def timed_get(c: httpx.Client, path: str) -> float:
    t0 = time.perf_counter()
    r = c.get(path)
    elapsed = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"GET {path}: {r.status_code} {r.text[:300]}")
    return elapsed * 1000


def warm_up(url: str, token: str, body: dict[str, Any]) -> float:
    """Submit one job and give the first cycle it wakes time to finish; the POST's seconds.

    A fresh server's first cycle builds its placement profile and loads compiled
    kernels, which holds the interpreter for a moment; that is start-up, not load.
    """
    with client(url, token) as c:
        t0 = time.perf_counter()
        r = c.post("/v1/jobs", json=body)
        elapsed = time.perf_counter() - t0
        if r.status_code != 201:
            raise RuntimeError(f"warm-up submission refused: {r.status_code} {r.text[:300]}")
        time.sleep(0.5)
        c.get("/healthz")  # answered once the first cycle lets go
    return elapsed


def measure_store(kind: str, s: Site, scale: Scale) -> dict[str, Any]:
    """Submission rate, array acceptance and read latency on one store."""
    server = Server(_cli("server"), s.config, s.data, s.db, free_port())
    workdir = str(s.root)
    try:
        warm_up(server.url, s.tokens["u0"], {"command": ["true"], "workdir": workdir})
        out: dict[str, Any] = {}
        jobs = 0
        # Held jobs first: the scheduler has nothing to place, so that is the submission
        # path (HTTP, validation, commit) with the cycles' cost taken out.
        for key, hold in (("submit_held", True), ("submit", False)):
            rates = []
            cpu0, count = server.cpu_s(), 0
            for r in range(scale.repeat):
                body = {"command": ["true"], "workdir": workdir, "hold": hold}
                acked, errors, rate = burst(
                    server.url, s.tokens, scale, scale.burst_s, f"{key}-{kind}{r}", body
                )
                if errors:
                    raise RuntimeError(f"{errors} submissions failed:\n{server.tail()}")
                rates.append(rate)
                count += len(acked)
            out[f"{key}_per_s"] = round(statistics.median(rates), 1)
            out[f"{key}_runs_per_s"] = [round(x, 1) for x in rates]
            # The server's own CPU per job: what the rate would be with a core to itself.
            out[f"{key}_server_cpu_ms"] = round((server.cpu_s() - cpu0) / count * 1000, 2)
            jobs += count
        user_tokens = [s.tokens[f"u{i}"] for i in range(USERS)]
        clients = [client(server.url, tok) for tok in user_tokens]
        array_s = []
        arrays: dict[int, list[tuple[str, int]]] = defaultdict(list)  # user -> (number, tasks)
        for i in range(scale.arrays):
            time.sleep(1.0)  # let the cycle the last submission woke finish
            num, elapsed = post_array(clients[i % USERS], scale.array_tasks, workdir)
            array_s.append(elapsed)
            arrays[i % USERS].append((num, scale.array_tasks))
            jobs += scale.array_tasks
        out["array_s"] = round(statistics.median(array_s), 3)
        out["array_runs_s"] = [round(x, 3) for x in array_s]
        i = scale.arrays
        t0 = time.perf_counter()
        while jobs < scale.fill_jobs:
            tasks = min(scale.fill_array, scale.fill_jobs - jobs)
            num, _ = post_array(clients[i % USERS], tasks, workdir)
            arrays[i % USERS].append((num, tasks))
            jobs += tasks
            i += 1
        out["fill_s"] = round(time.perf_counter() - t0, 1)
        out["jobs_in_store"] = jobs
        time.sleep(1.0)
        # User 0 has the first array whatever else ran: when the bursts alone fill the
        # store (fast submissions, a quick run), no filling array is posted.
        reader, user = clients[0], 0
        rng = random.Random(0)
        queue = [timed_get(reader, f"/v1/jobs?user=u{user}&limit=100") for _ in range(scale.reads)]
        picks = [rng.choice(arrays[user]) for _ in range(scale.reads)]
        ids = [f"{num}_{rng.randrange(tasks)}" for num, tasks in picks]
        show = [timed_get(reader, f"/v1/jobs/{job_id}") for job_id in ids]
        for c in clients:
            c.close()
        out.update(
            queue_p50_ms=round(percentile(queue, 0.5), 1),
            queue_p99_ms=round(percentile(queue, 0.99), 1),
            show_p50_ms=round(percentile(show, 0.5), 1),
            show_p99_ms=round(percentile(show, 0.99), 1),
        )
        # A restart rebuilds the job book from the store: the seconds from the
        # process start to its first answer, with every job above pending.
        server.terminate()
        t0 = time.perf_counter()
        server = Server(_cli("server"), s.config, s.data, s.db, free_port())
        out["restart_s"] = round(time.perf_counter() - t0, 2)
        return out
    finally:
        server.terminate()


def measure_crash(s: Site, scale: Scale) -> dict[str, int]:
    """SIGKILL the controller during a submission burst with an agent running jobs."""
    argv = _cli("server")
    port = free_port()
    server = Server(argv, s.config, s.data, s.db, port)
    marks = s.root / "marks"
    marks.mkdir()
    inventory = s.root / "node.toml"
    inventory.write_text(NODE_GROUP)
    agent = Process(
        [
            *_cli("agent"),
            "--server",
            server.url,
            "--inventory",
            str(inventory),
            "--node",
            NODE,
            "--state-dir",
            str(s.root / "agent"),
            "--same-user",
        ],
        s.root / "agent.log",
        env={"GPUFLEET_AGENT_TOKEN": s.tokens["node"]},
    )
    try:
        wait_node_up(server.url, s.tokens["admin"], agent)
        body = {"command": ["sh", "-c", MARK_RUN, str(marks)], "workdir": str(s.root)}
        warm_up(server.url, s.tokens["u0"], body)
        deadline = time.monotonic() + 60
        while not any(marks.iterdir()):  # the agent runs jobs: the burst's will run too
            if time.monotonic() > deadline:
                raise RuntimeError(f"the agent ran no job:\n{agent.tail()}")
            time.sleep(0.1)

        def kill_midway() -> None:
            time.sleep(scale.crash_burst_s / 2)
            server.kill()

        acked, _, _ = burst(
            server.url, s.tokens, scale, scale.crash_burst_s, "crash", body, during=kill_midway
        )
        server = Server(argv, s.config, s.data, s.db, port)
        restarted = time.time()
        # The agent reconnects (after its backoff) and the queued jobs go on running.
        deadline = time.monotonic() + 90
        while not any(p.stat().st_mtime >= restarted for p in marks.iterdir()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no job ran after the restart:\n{agent.tail()}")
            time.sleep(0.2)
        time.sleep(scale.crash_settle_s)
        server.terminate()  # no new starts from here
        time.sleep(1.0)  # the last runs write their markers
    finally:
        agent.terminate()
        server.terminate()
    result = check_crash(s, acked, marks)
    result["crash_runs_after_restart"] = sum(
        1 for p in marks.iterdir() if p.stat().st_mtime >= restarted
    )
    return result


def wait_node_up(url: str, admin: str, agent: Process) -> None:
    with client(url, admin) as c:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            nodes = c.get("/v1/nodes").json()
            if any(n["name"] == NODE and n["state"] in ("idle", "mixed") for n in nodes):
                return
            if agent.proc.poll() is not None:
                break
            time.sleep(0.2)
    raise RuntimeError(f"the agent did not bring {NODE} up:\n{agent.tail()}")


def check_crash(s: Site, acked: list[str], marks: Path) -> dict[str, int]:
    """Lost and duplicated submissions, and jobs started twice, from the store and markers."""
    import sqlalchemy as sa

    from gpufleet.adapters.store import Store, sqlite_url
    from gpufleet.adapters.store import tables as t

    store = Store(sqlite_url(s.data) if s.db is None else s.db)
    try:
        with store.read() as conn:
            stored: Counter[str] = Counter(
                conn.execute(
                    sa.select(t.jobs.c.request_id).where(t.jobs.c.request_id.is_not(None))
                ).scalars()
            )
            runs = conn.execute(
                sa.select(
                    t.job_runs.c.job,
                    t.job_runs.c.run,
                    t.job_runs.c.start_time,
                    t.job_runs.c.end_time,
                ).order_by(t.job_runs.c.job, t.job_runs.c.run)
            ).all()
    finally:
        store.close()
    per_job: dict[int, list[Any]] = defaultdict(list)
    for run in runs:
        per_job[run.job].append(run)
    overlapping = sum(
        1
        for job_runs in per_job.values()
        for a, b in itertools.pairwise(job_runs)
        if a.end_time is None or b.start_time < a.end_time
    )
    executions = Counter(p.name.rsplit(".", 1)[0] for p in marks.iterdir())
    twice = sum(n - 1 for n in executions.values() if n > 1)
    rerun = sum(len(v) - 1 for v in per_job.values() if len(v) > 1)
    return {
        "crash_acknowledged": len(acked),
        "crash_lost": sum(1 for rid in acked if stored[rid] == 0),
        "crash_duplicated": sum(n - 1 for n in stored.values() if n > 1),
        "crash_runs": len(executions),
        "crash_started_twice": twice + rerun + overlapping,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--quick", action="store_true", help="a small run, in seconds")
    parser.add_argument("--pg", default=PG_URL, help="PostgreSQL URL (a schema is made in it)")
    parser.add_argument("--repeat", type=int, help="submission bursts per store (median)")
    args = parser.parse_args()
    scale = QUICK if args.quick else FULL
    if args.repeat:
        scale = Scale(**{**scale.__dict__, "repeat": args.repeat})
    root = Path(tempfile.mkdtemp(prefix="gpufleet-api-load-"))
    load = os.getloadavg()[0]
    try:
        results = {}
        for kind in ("sqlite", "postgres"):
            if kind == "postgres" and not postgres_ok(args.pg):
                continue
            with site(root / kind, kind, args.pg) as s:
                results[kind] = measure_store(kind, s, scale)
            if not args.json:
                print(f"{kind}: {json.dumps(results[kind])}")
        with site(root / "crash", "sqlite", args.pg, heartbeat_s=2) as s:
            crash = measure_crash(s, scale)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lite, pg = results["sqlite"], results.get("postgres", {})
    result: dict[str, Any] = {
        "submit_per_s_sqlite": lite["submit_per_s"],
        "submit_per_s_postgres": pg.get("submit_per_s"),
        "submit_held_per_s_sqlite": lite["submit_held_per_s"],
        "submit_held_per_s_postgres": pg.get("submit_held_per_s"),
        "submit_server_cpu_ms_sqlite": lite["submit_server_cpu_ms"],
        "submit_server_cpu_ms_postgres": pg.get("submit_server_cpu_ms"),
        "array_10k_s": lite["array_s"],
        "array_10k_s_postgres": pg.get("array_s"),
        "read_p99_ms": lite["queue_p99_ms"],
        "show_p99_ms": lite["show_p99_ms"],
        "read_p99_ms_postgres": pg.get("queue_p99_ms"),
        "show_p99_ms_postgres": pg.get("show_p99_ms"),
        "restart_s": lite["restart_s"],
        "restart_s_postgres": pg.get("restart_s"),
        "jobs_in_store": lite["jobs_in_store"],
        "array_tasks": scale.array_tasks,
        "loadavg_1m": round(load, 2),
        **crash,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
