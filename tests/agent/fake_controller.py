"""A small stand-in for the controller's agent endpoints, served on 127.0.0.1.

It keeps the protocol's contract and nothing more: runs it wants on the
node (``want``), kills it wants (``kill``), every request and report it got,
and a long poll that answers early when there is news. ``refuse`` makes the
next requests fail with a status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpufleet.api.agent_schemas import (
    AgentRegister,
    AgentSync,
    JobKill,
    JobLaunch,
    MigChange,
    MigDone,
    RegisterReply,
    RunReport,
    SyncReply,
)

Key = tuple[str, int]


class FakeController:
    def __init__(self, node: str = "n1", token: str = "gf_node") -> None:
        self.node = node
        self.token = token
        self.heartbeat_s = 1.0
        self.wanted: dict[Key, JobLaunch] = {}
        self.kills: dict[Key, JobKill] = {}
        self.reports: list[RunReport] = []
        self.registrations: list[AgentRegister] = []
        self.syncs: list[AgentSync] = []
        self.refusals: list[int] = []
        self.registered = False
        self.resend_starts = False  # answer starts even for runs the agent holds
        self.max_wait_s = 4.0  # a long poll never holds a test's agent longer
        self.mig: dict[int, MigChange] = {}  # MIG changes asked and not yet reported done
        self.mig_done: list[MigDone] = []
        self._news = threading.Condition()

    def want(self, launch: JobLaunch) -> None:
        with self._news:
            self.wanted[(launch.job_id, launch.run)] = launch
            self._news.notify_all()

    def recut(self, gpu: int, layout: list[str] | None) -> None:
        """Ask the agent to re-cut GPU ``gpu`` (sent until it reports it done)."""
        with self._news:
            self.mig[gpu] = MigChange(gpu=gpu, layout=layout)
            self._news.notify_all()

    def kill(self, job_id: str, run: int, signal: str = "TERM", grace_s: int = 1) -> None:
        with self._news:
            self.kills[(job_id, run)] = JobKill(
                job_id=job_id, run=run, signal=signal, grace_s=grace_s, reason="cancel"
            )
            self._news.notify_all()

    def forget_node(self) -> None:
        """As a controller whose store lost the node: the next sync is a 404."""
        self.registered = False

    def handle(self, path: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.refusals:
            status = self.refusals.pop(0)
            return status, {"title": "refused", "status": status, "detail": "as the test asked"}
        if token != f"Bearer {self.token}":
            return 401, {"title": "Unauthorized", "status": 401, "detail": "bad token"}
        if path == f"/v1/agents/{self.node}/register":
            self.registrations.append(AgentRegister.model_validate(body))
            self.registered = True
            reply = RegisterReply(
                node=self.node, state="idle", heartbeat_interval_s=self.heartbeat_s
            )
            return 200, reply.model_dump()
        if path != f"/v1/agents/{self.node}/sync":
            return 404, {"title": "Not Found", "status": 404}
        if not self.registered:
            return 404, {"title": "Not Found", "status": 404, "detail": "register first"}
        sync = AgentSync.model_validate(body)
        with self._news:
            self.syncs.append(sync)
            for report in sync.reports:
                self.reports.append(report)
                self.wanted.pop((report.job_id, report.run), None)
                self.kills.pop((report.job_id, report.run), None)
            for done in sync.mig_done:
                self.mig_done.append(done)
                if done.gpu in self.mig and self.mig[done.gpu].layout == done.layout:
                    del self.mig[done.gpu]
            reply = self._reply(sync)
            if not (reply.jobs_to_start or reply.jobs_to_kill or reply.mig_changes) and (
                sync.wait_s > 0
            ):
                self._news.wait(min(sync.wait_s, self.max_wait_s))
                reply = self._reply(sync)
        return 200, reply.model_dump()

    def _reply(self, sync: AgentSync) -> SyncReply:
        held = {(r.job_id, r.run) for r in sync.running}
        return SyncReply(
            jobs_to_start=[
                launch
                for key, launch in sorted(self.wanted.items())
                if self.resend_starts or key not in held
            ],
            jobs_to_kill=[kill for key, kill in sorted(self.kills.items()) if key in held],
            mig_changes=[self.mig[g] for g in sorted(self.mig)],
            heartbeat_interval_s=self.heartbeat_s,
        )


def _handler(fake: FakeController) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            status, reply = fake.handle(self.path, self.headers.get("Authorization", ""), body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve(fake: FakeController, port: int = 0) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1 (a free port unless given); yield its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(fake))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
