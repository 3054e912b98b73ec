"""A live cluster on one host: the controller on a manual clock, served over HTTP on
127.0.0.1, and one real ``gpufleet agent`` process per node running real job processes.

Jobs run ``JOB_SCRIPT``: each task writes the GPUs its agent handed it to
``marks/ID.NODE``, then waits until ``release(ID)`` creates its release
file, so the test decides when each run ends. ``close`` (also on
failure) releases every job, stops the agents, kills whatever job process
is still there, then stops the server and the controller.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from api.live import client, serve
from contract.scenario import BASE, NODES_FILE, Arrival
from gpufleet.adapters.store import sqlite_url
from gpufleet.agent.supervise import PROC_FILE, process_start, read_json
from gpufleet.api.app import create_app
from gpufleet.api.routers.agents import stop_long_polls
from gpufleet.controller.clock import ManualClock
from gpufleet.controller.config import ControllerConfig
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import setup_from_config
from gpufleet.core.model import Node

WAIT_S = 15.0
POLL_S = 0.02

# A task records its node and the GPUs its agent gave it, then waits for its release file
# ($1). Fixed text: the job id reaches it only as an argument, never as shell code.
JOB_SCRIPT = (
    'mark="$1.$SLURMD_NODENAME"; printf "%s\\n" "$CUDA_VISIBLE_DEVICES" > "$mark.tmp"; '
    'mv "$mark.tmp" "$mark"; while [ ! -e "$1" ]; do sleep 0.02; done'
)


@dataclass(frozen=True)
class Started:
    """A run as the controller's API shows it: virtual start, and per node its GPUs.

    ``placements`` are (node, GPU indices, GPU UUIDs) in the job's node order.
    """

    start: int
    placements: tuple[tuple[str, tuple[int, ...], tuple[str, ...]], ...]


class LiveCluster:
    """The controller, its HTTP server and the agents; ``close`` undoes all of it."""

    def __init__(self, config: ControllerConfig, tmp: Path) -> None:
        self.tmp = tmp
        self.marks = tmp / "marks"
        self.marks.mkdir()
        self.workdir = tmp / "work"
        self.workdir.mkdir()
        self.clock = ManualClock(float(BASE))
        self.built = config.build("parity")
        self.setup = setup_from_config(self.built, config.to_dict())
        self.controller = Controller(
            setup=self.setup, db_url=sqlite_url(tmp / "data"), clock=self.clock
        )
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.state_dirs: dict[str, Path] = {}
        self.submitted: list[str] = []
        self.clients: dict[str, httpx.Client] = {}
        self.url = ""
        self._stack = contextlib.ExitStack()
        try:
            self._open()
        except BaseException:
            self._stack.close()
            raise

    def _open(self) -> None:
        """Start the controller, serve it, start the agents; each undone by ``close``."""
        self._stack.callback(self.controller.stop)
        self.controller.start(loop=False)
        self.app = create_app(self.controller)
        self.url = self._stack.enter_context(serve(self.app))
        admin = Principal(user="root", role="admin")
        for who, p in self.built.principals.items():
            token = self.controller.create_token(principal=admin, name=who, user=who, role=p.role)
            self.clients[who] = self._stack.enter_context(client(self.url, token.token))
        # Unwinding runs last in, first out: release the jobs, stop the agents, then
        # kill whatever job process is left, then the clients, server and controller.
        self._stack.callback(self._kill_jobs)
        self._stack.callback(self._stop_agents)
        # Agents register in the reverse of the declared order: where a node stands in
        # the controller's book (placement ties go to the first) must not depend on it.
        for node in reversed(self.built.nodes):
            token = self.controller.create_token(
                principal=admin, name=node.name, user=f"node-{node.name}", role="node",
                node=node.name,
            )  # fmt: skip
            self._start_agent(node.name, token.token)
            self.wait(partial(self._registered, node.name), f"the agent of {node.name} to register")
        self._stack.callback(self._release_all)

    # -- set-up and tear-down ----------------------------------------------------------

    def _start_agent(self, node: str, token: str) -> None:
        state = self.tmp / f"agent-{node}"
        self.state_dirs[node] = state
        log = open(self.tmp / f"agent-{node}.log", "wb")  # noqa: SIM115 (closed on close)
        self._stack.callback(log.close)
        argv = [
            sys.executable, "-m", "gpufleet.cli.main", "agent",
            "--server", self.url, "--inventory", str(NODES_FILE), "--node", node,
            "--state-dir", str(state), "--same-user",
        ]  # fmt: skip
        env = {**os.environ, "GPUFLEET_AGENT_TOKEN": token}
        # A session of its own: the agent is signalled alone, never the test's group.
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)
        self.agents[node] = proc

    def _stop_agents(self) -> None:
        """SIGTERM every agent at once, then wait for all. Parked syncs answer first, so
        that no agent waits out its long poll, nor the server's stop after."""
        stop_long_polls(self.app)
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.agents.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _release_all(self) -> None:
        """Let every job end by itself, so that little is left to kill."""
        self.release(self.submitted)

    def _kill_jobs(self) -> None:
        """Kill the process group of every job still there, by the PID its supervisor recorded.

        Jobs outlive their agent by design; released jobs end within a poll of
        their release file, so wait for that first.
        """
        runs = [d for s in self.state_dirs.values() for d in (s / "runs").glob("*")]
        deadline = time.monotonic() + 2.0
        for rundir in runs:
            proc = read_json(rundir / PROC_FILE)
            if proc is None:
                continue
            while _running(proc) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            if _running(proc):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc["pgid"], signal.SIGKILL)

    def close(self) -> None:
        self._stack.close()

    def agent_logs(self) -> str:
        """The tail of each agent's log, for a failure's message."""
        parts = []
        for node in self.agents:
            text = (self.tmp / f"agent-{node}.log").read_text(errors="replace")
            parts.append(f"--- agent {node} ---\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(parts)

    # -- the test's moves --------------------------------------------------------------

    def _registered(self, name: str) -> bool:
        return bool(_ok(self.clients["ops"].get(f"/v1/nodes/{name}"))["state"] != "unknown")

    def registered_nodes(self) -> list[Node]:
        """Wait until every agent has registered; the declared nodes with the GPU UUIDs
        their agents registered, as ``GET /v1/nodes`` shows them."""
        names = [n.name for n in self.built.nodes]
        listed: list[dict[str, Any]] = []

        def registered() -> bool:
            listed[:] = _ok(self.clients["ops"].get("/v1/nodes"))
            return [(n["name"], n["state"]) for n in listed] == [(n, "idle") for n in names]

        self.wait(registered, "every agent to register")
        uuids = {n["name"]: [g["uuid"] for g in n["gpus"]] for n in listed}
        return [
            replace(
                node,
                gpus=tuple(
                    replace(g, uuid=u) for g, u in zip(node.gpus, uuids[node.name], strict=True)
                ),
            )
            for node in self.built.nodes
        ]

    def release_path(self, job_id: str) -> Path:
        return self.marks / job_id

    def job_argv(self, job_id: str) -> list[str]:
        return ["sh", "-c", JOB_SCRIPT, "sh", str(self.release_path(job_id))]

    def submit(self, arrival: Arrival, expected_id: str) -> None:
        """Submit ``arrival`` as its user; the controller must number it ``expected_id``."""
        body = {
            "name": f"parity-{expected_id}",
            "command": self.job_argv(expected_id),
            "workdir": str(self.workdir),
            "account": self.built.principals[arrival.user].default_account,
            "qos": arrival.qos,
            "nodes": arrival.nodes,
            "gpus_per_node": arrival.gpus,
            "gpu_milli": arrival.gpu_milli,
            "cpus_per_task": arrival.cpus,
            "mem_mib": arrival.mem_gib * 1024,
            "time_limit_s": arrival.duration,
        }
        r = self.clients[arrival.user].post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        assert r.json()["job_id"] == expected_id, r.json()
        self.submitted.append(expected_id)

    def jobs(self, state: str) -> dict[str, dict[str, Any]]:
        """Every job in ``state``, by id, as ``GET /v1/jobs`` lists them."""
        out: dict[str, dict[str, Any]] = {}
        params: dict[str, Any] = {"state": state, "limit": 1000}
        while True:
            page = _ok(self.clients["ops"].get("/v1/jobs", params=params))
            out.update((j["job_id"], j) for j in page["jobs"])
            if not page["next_cursor"]:
                return out
            params["cursor"] = page["next_cursor"]

    def started(self, job_ids: Iterable[str]) -> dict[str, Started]:
        """Where and when ``job_ids`` (running now) started: ``GET /v1/jobs/ID`` and the
        per-GPU holders of ``GET /v1/nodes``."""
        gpus: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
        for node in _ok(self.clients["ops"].get("/v1/nodes")):
            for gpu in node["gpus"]:
                for holder in gpu["jobs"]:
                    gpus[holder, node["name"]].append(gpu["index"])
        out = {}
        for job_id in job_ids:
            job = _ok(self.clients["ops"].get(f"/v1/jobs/{job_id}"))
            assert job["state"] == "RUNNING", job
            uuids = iter(job["gpu_uuids"])
            placements = []
            for node in job["node_list"]:
                indices = tuple(sorted(gpus[job_id, node]))
                placements.append((node, indices, tuple(next(uuids) for _ in indices)))
            out[job_id] = Started(round(job["start_time"]) - BASE, tuple(placements))
        return out

    def release(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            self.release_path(job_id).touch()

    def end(self, job_ids: set[str]) -> None:
        """Release ``job_ids`` and wait until the controller has recorded their exits."""
        self.release(job_ids)
        self.wait(lambda: not job_ids & self.jobs("RUNNING").keys(), f"jobs {job_ids} to end")

    def marks_of(self, job_id: str, nodes: Iterable[str]) -> dict[str, str]:
        """Wait until every task of ``job_id`` runs; its CUDA_VISIBLE_DEVICES per node."""
        paths = {node: self.marks / f"{job_id}.{node}" for node in nodes}
        self.wait(lambda: all(p.exists() for p in paths.values()), f"job {job_id} to launch")
        return {node: p.read_text().rstrip("\n") for node, p in paths.items()}

    def wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.agent_logs()}")
            time.sleep(POLL_S)


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def _running(proc: dict[str, Any]) -> bool:
    """Whether the job a supervisor's ``proc.json`` names still runs (its start time
    tells it from a later process that reuses the PID)."""
    start = proc.get("pid_start")
    return start is not None and process_start(proc["pid"]) == start
