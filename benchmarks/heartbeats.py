"""Does a controller keep up with a thousand agents, and how fast does a job fail over?

Both measurements run a real controller (``gpufleet server``, SQLite) as a
separate process on 127.0.0.1 and talk to it over HTTP only.

* heartbeats: ``--agents`` simulated agents (1,000) each register a node of
  8 GPUs, then sync every ``--interval`` seconds (10, as a real agent's
  heartbeat; spread evenly, so 100 syncs a second), each with 8 GPU
  readings, from one asyncio client process. Meanwhile jobs keep arriving
  (2 a second, one GPU, 5 s each): the scheduling loop places them on the
  simulated nodes, whose agents take the starts and report the ends, so
  the loop runs the whole time. A heartbeat's latency is the round trip of
  one sync that does not wait (``wait_s`` 0), measured by the client;
  ``heartbeat_p99_ms`` is the 99th percentile over the last ``--rounds``
  intervals (the first, registrations and warm-up, is not counted).
* failover: four real agents (``gpufleet agent``, separate processes, each
  declaring 8 GPUs) with a 1 s heartbeat and 3 missed heartbeats to DOWN.
  A checkpointable Python job counts steps, saving the count in
  ``$GPUFLEET_CHECKPOINT_DIR`` and touching the mark at each step. Once it
  has saved a few steps its agent is SIGKILLed; ``failover_s`` is the time
  from the kill to the job's next run starting on another node (the run
  writes the time it started). The run must resume from the saved step,
  not from 0. The killed agent is then started again: it re-attaches to the
  orphaned first run, which the controller has it kill.

``--quick`` runs a small version in seconds (a test keeps the script working).
``python benchmarks/heartbeats.py --json`` prints the result as JSON on its last line:
``{"agents": 1000, "heartbeat_p99_ms": ..., "failover_s": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from api_load import Process, Server, _cli, free_port

GPUS = 8
JOB_S = 5.0
JOBS_PER_S = 2.0
FAILOVER_NODES = 4
# The job: resume from the saved step, record when this run started, then count.
# A run stops once a later run has started (the node it ran on was given up).
FAILOVER_JOB = """\
import os, pathlib, sys, time
d = pathlib.Path(os.environ["GPUFLEET_CHECKPOINT_DIR"])
run = int(os.environ["GPUFLEET_RESTART_COUNT"])
step = int((d / "step").read_text()) if (d / "step").exists() else 0
(d / f"started.{run}").write_text(f"{time.time()} {step} {os.environ['GPUFLEET_NODE']}")
print("run", run, "on", os.environ["GPUFLEET_NODE"], "from step", step, flush=True)
while step < 100000 and not (d / f"started.{run + 1}").exists():
    step += 1
    (d / "step.tmp").write_text(str(step))
    os.replace(d / "step.tmp", d / "step")
    pathlib.Path(os.environ["GPUFLEET_CHECKPOINT_MARK"]).touch()
    time.sleep(0.1)
"""


def config_text(*, interval_s: int, heartbeat_s: int, missed: int, checkpoints: Path) -> str:
    return (
        f"[server]\ninterval_s = {interval_s}\nheartbeat_interval_s = {heartbeat_s}\n"
        f"missed_heartbeats = {missed}\n"
        f'\n[[policy.partitions]]\nname = "gpu"\ncheckpoint_dir = "{checkpoints}"\n'
        '\n[[principals]]\nname = "admin"\nrole = "admin"\n'
    )


def group(name: str) -> dict[str, Any]:
    return {
        "names": name,
        "cpu_milli": 64000,
        "memory_mib": 512 * 1024,
        "gpus": {"model": "A100-80GB", "count": GPUS, "nvlink": "all"},
    }


def start_server(root: Path, **settings: Any) -> tuple[Server, str]:
    """A controller on a fresh SQLite store, and an admin token (which may act for any node)."""
    from gpufleet.adapters.store import Store, sqlite_url
    from gpufleet.controller.tokens import issue_token

    root.mkdir(parents=True, exist_ok=True)
    config = root / "controller.toml"
    config.write_text(config_text(checkpoints=root / "ckpt", **settings))
    data = root / "data"
    store = Store(sqlite_url(data))
    store.migrate()
    admin = issue_token(
        store, name="bench", user="admin", role="admin", node=None, now=time.time()
    ).token
    store.close()
    return Server(_cli("server"), config, data, None, free_port()), admin


# -- heartbeats ------------------------------------------------------------------------------


@dataclass
class SimAgent:
    """One simulated node: it holds the runs it was told to start until they are due."""

    node: str
    runs: dict[tuple[str, int], float] = field(default_factory=dict)  # -> end time

    def body(self, now: float) -> dict[str, Any]:
        ended = [k for k, end in self.runs.items() if end <= now]
        for k in ended:
            del self.runs[k]
        readings = [
            {"index": i, "uuid": f"GPU-{self.node}-{i}", "model": "A100-80GB", "temp_c": 40.0}
            for i in range(GPUS)
        ]
        return {
            "running": [{"job_id": j, "run": r} for j, r in self.runs],
            "reports": [
                {"job_id": j, "run": r, "state": "exited", "exit_code": 0, "at": now}
                for j, r in ended
            ],
            "wait_s": 0,
            "gpus": readings,
        }

    def apply(self, reply: dict[str, Any], now: float) -> None:
        for launch in reply["jobs_to_start"]:
            self.runs[(launch["job_id"], launch["run"])] = now + JOB_S
        for kill in reply["jobs_to_kill"]:
            self.runs.pop((kill["job_id"], kill["run"]), None)


class Connections:
    """Keep-alive HTTP/1.1 connections on bare asyncio streams: a general client spends
    milliseconds of CPU on each request, enough to make a busy client the bottleneck
    of a thousand agents; this one spends a few hundred microseconds."""

    def __init__(self, url: str, token: str, size: int) -> None:
        self.host, _, port = url.removeprefix("http://").partition(":")
        self.port = int(port)
        self.token = token
        self.size = size
        self.pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )

    async def open(self) -> None:
        for _ in range(self.size):
            self.pool.put_nowait(await asyncio.open_connection(self.host, self.port))

    async def post(self, path: str, body: dict[str, Any]) -> tuple[Any, float]:
        """The reply's JSON and the round trip in seconds (from the request's first byte
        to the reply's last, on a connection already open)."""
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Authorization: Bearer {self.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        reader, writer = await self.pool.get()
        try:
            sent = time.monotonic()
            writer.write(head + data)
            status, length = 0, 0
            for line in (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n"):
                if line.startswith(b"HTTP/1.1 "):
                    status = int(line.split()[1])
                elif line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            payload = await reader.readexactly(length)
            took = time.monotonic() - sent
        finally:
            self.pool.put_nowait((reader, writer))
        if status not in (200, 201):
            raise RuntimeError(f"POST {path}: {status} {payload[:300]!r}")
        return json.loads(payload), took

    async def close(self) -> None:
        while not self.pool.empty():
            _, writer = self.pool.get_nowait()
            writer.close()


async def heartbeats(
    url: str, admin: str, agents: int, interval: float, rounds: int
) -> tuple[float, float]:
    """Run the simulated agents for 1 + ``rounds`` intervals; the sync latency's p50 and
    p99 (ms)."""
    sims = [SimAgent(f"sim{i:04d}") for i in range(agents)]
    conns = Connections(url, admin, 64)
    await conns.open()
    latencies: list[float] = []
    try:
        for chunk in range(0, agents, 64):
            await asyncio.gather(
                *(
                    conns.post(f"/v1/agents/{s.node}/register", {"inventory": group(s.node)})
                    for s in sims[chunk : chunk + 64]
                )
            )
        began = time.monotonic()
        measured_from = began + interval
        ends = began + interval * (1 + rounds)

        async def agent(k: int, sim: SimAgent) -> None:
            due = began + interval * k / agents
            while due < ends:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                reply, took = await conns.post(f"/v1/agents/{sim.node}/sync", sim.body(time.time()))
                sim.apply(reply, time.time())
                if due >= measured_from:
                    latencies.append(took)
                due += interval

        async def submitter() -> None:
            body = {"command": ["true"], "workdir": "/tmp", "gpus_per_node": 1,
                    "time_limit_s": 60}  # fmt: skip
            while time.monotonic() < ends:
                await conns.post("/v1/jobs", body)
                await asyncio.sleep(1 / JOBS_PER_S)

        await asyncio.gather(submitter(), *(agent(k, s) for k, s in enumerate(sims)))
    finally:
        await conns.close()
    return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- failover --------------------------------------------------------------------------------


@dataclass
class FailoverResult:
    failover_s: float
    resumed_from: int
    saved_at_kill: int
    first_node: str
    second_node: str


def start_agent(root: Path, url: str, token: str, node: str) -> Process:
    inventory = root / f"{node}.toml"
    if not inventory.exists():
        inventory.write_text(
            f'[[nodes]]\nnames = "{node}"\ncpu_milli = 8000\nmemory_mib = 16384\n'
            f'gpus = {{ model = "A100-80GB", count = {GPUS}, nvlink = "all" }}\n'
        )
    return Process(
        [
            *_cli("agent"),
            "--server",
            url,
            "--inventory",
            str(inventory),
            "--state-dir",
            str(root / f"{node}.state"),
            "--same-user",
        ],
        root / f"{node}.log",
        env={"GPUFLEET_AGENT_TOKEN": token},
    )


def node_token(root: Path, node: str) -> str:
    from gpufleet.adapters.store import Store, sqlite_url
    from gpufleet.controller.tokens import issue_token

    store = Store(sqlite_url(root / "data"))
    try:
        return issue_token(
            store, name=node, user=f"node-{node}", role="node", node=node, now=time.time()
        ).token
    finally:
        store.close()


def wait(what: str, check: Any, timeout: float, logs: list[Process]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            tails = "\n".join(p.tail() for p in logs)
            raise RuntimeError(f"{what} did not happen within {timeout:g} s:\n{tails}")
        time.sleep(0.05)


def failover(root: Path) -> FailoverResult:
    """Kill the agent under a checkpointing job; time its restart on another node."""
    server, admin = start_server(root, interval_s=1, heartbeat_s=1, missed=3)
    nodes = [f"gpu{i}" for i in range(1, FAILOVER_NODES + 1)]
    tokens = {n: node_token(root, n) for n in nodes}
    agents = {n: start_agent(root, server.url, tokens[n], n) for n in nodes}
    procs = [server, *agents.values()]
    c = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {admin}"})
    try:

        def all_up() -> bool:
            states = {n["name"]: n["state"] for n in c.get("/v1/nodes").json()}
            return all(states.get(n) == "idle" for n in nodes)

        wait("four nodes up", all_up, 120, procs)
        script = f"#!{sys.executable}\n{FAILOVER_JOB}"
        body = {"script": script, "workdir": str(root), "gpus_per_node": GPUS,
                "checkpoint_s": 1, "stdout": str(root / "job.out")}  # fmt: skip
        job = c.post("/v1/jobs", json=body).json()["job_id"]
        ckpt = root / "ckpt" / "admin" / job
        wait("three saved steps", lambda: int(_read(ckpt / "step") or 0) >= 3, 60, procs)
        first = _read(ckpt / "started.0").split()[2]
        victim = agents[first]
        killed_at = time.time()
        victim.kill()  # SIGKILL: no goodbye to the controller; the job's run goes on orphaned
        saved = int(_read(ckpt / "step") or 0)
        started = wait("the restart", lambda: _read(ckpt / "started.1"), 60, procs)
        at, resumed, second = started.split()
        # The orphaned first run sees the second and stops; its agent, back, reports it.
        agents[first] = start_agent(root, server.url, tokens[first], first)
        gone = root / f"{first}.state" / "runs" / f"{job}.1"
        wait("the orphaned run cleaned up", lambda: not gone.exists(), 60, procs)
        states = c.get(f"/v1/jobs/{job}").json()
        assert states["state"] == "RUNNING" and states["node_list"] == [second], states
        c.post(f"/v1/jobs/{job}/cancel", json={})
        return FailoverResult(float(at) - killed_at, int(resumed), saved, first, second)
    finally:
        c.close()
        for p in agents.values():
            p.terminate()
        server.terminate()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--quick", action="store_true", help="a small run, in seconds")
    parser.add_argument("--agents", type=int, help="simulated agents (default 1000)")
    parser.add_argument("--interval", type=float, default=10.0, help="heartbeat seconds")
    parser.add_argument("--rounds", type=int, help="measured heartbeat intervals (default 3)")
    args = parser.parse_args()
    agents = args.agents or (50 if args.quick else 1000)
    interval = 2.0 if args.quick else args.interval
    rounds = args.rounds or (1 if args.quick else 3)
    root = Path(tempfile.mkdtemp(prefix="gpufleet-heartbeats-"))
    load = os.getloadavg()[0]
    try:
        server, admin = start_server(root / "scale", interval_s=10, heartbeat_s=10, missed=3)
        try:
            p50, p99 = asyncio.run(heartbeats(server.url, admin, agents, interval, rounds))
            server_cpu_s = server.cpu_s()
        finally:
            server.terminate()
        if not args.json:
            print(f"heartbeats: {agents} agents, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
        over = [failover(root / f"failover{i}") for i in range(1 if args.quick else 3)]
        for o in over:
            if not args.json:
                print(f"failover: {o}")
            assert o.resumed_from >= 3 and o.first_node != o.second_node, o
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "agents": agents,
        "heartbeat_p99_ms": round(p99, 2),
        "heartbeat_p50_ms": round(p50, 2),
        "failover_s": round(statistics.median(o.failover_s for o in over), 2),
        "failover_runs_s": [round(o.failover_s, 2) for o in over],
        "resumed_from_step": [o.resumed_from for o in over],
        "server_cpu_s": round(server_cpu_s, 1),
        "loadavg_1m": round(load, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
