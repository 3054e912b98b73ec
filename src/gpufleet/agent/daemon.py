"""The agent's conversation with the controller: register, then long-poll sync.

The protocol is PULL (``api/agent_schemas.py``): the agent opens every
connection, so a node needs no listening port and the controller keeps no
per-agent connection state. One loop calls ``POST /v1/agents/{node}/sync``
with ``wait_s`` equal to the heartbeat interval; the controller answers at
once when it has work and otherwise at the end of the wait, so each sync is
also the heartbeat. A second thread polls the runner and, when runs end,
sends their reports at once in a sync that does not wait.

Every call may be repeated. A sync carries the runs held now and every
report not yet acknowledged; a successful reply acknowledges the reports it
carried (the controller applies them before answering). Starts of a
``(job_id, run)`` already held or reported are ignored by the runner, and a
kill of a run never started ends it unstarted, so its start never runs.
When the controller cannot be reached the agent retries with exponential
backoff (with jitter, at most ``max_backoff_s`` and at most the heartbeat
interval, so that a restarted controller hears from it before it would call
the node lost) and its runs go on; a controller that no longer knows the
node (404) gets a fresh registration.
Only the first registration's refusal ends the loop; once registered, a
refusal is waited out, ``max_backoff_s`` at a time.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx

from gpufleet.adapters.inventory import nodes_from_groups, with_mig
from gpufleet.agent.checks import REASON_CHARS, CheckSettings, NodeChecks
from gpufleet.agent.mig import MigApplier
from gpufleet.agent.runner import Runner
from gpufleet.agent.telemetry import Telemetry
from gpufleet.api.agent_schemas import (
    MAX_RETRY_S,
    MAX_SYNC_WAIT_S,
    AgentRegister,
    AgentSync,
    GpuReading,
    MigChange,
    MigDone,
    NodeHealth,
    RegisterReply,
    RunReport,
    SyncReply,
)
from gpufleet.core.model import Node

log = logging.getLogger("gpufleet.agent")

REPEAT_PAUSE_S = 1.0
STATE_RETRY_S = 1.0
"""How often a state directory that failed is tried again."""


class Refused(Exception):
    """The controller refused the agent's request for good (bad token, bad inventory);
    ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NotRegistered(Exception):
    """The controller does not know this node (404): register again."""


class Agent:
    """One node's agent: ``run`` until ``stop``; jobs outlive it.

    ``poll_s`` is how often run ends are looked for, ``max_backoff_s`` the
    longest pause between retries, ``max_wait_s`` the longest long poll (the
    heartbeat interval is used when shorter). ``telemetry`` gives the GPU
    readings each sync carries; ``facts`` (what NVML and the host say, plus
    ``job_uid``: the runner's, whom runs here run as) and ``differences``
    (from the declared inventory) go with each registration.
    ``mig`` carries out the MIG changes the controller asks for (by default
    a dry run); the declared inventory then takes the new layout. ``checks``
    (by default none but the GPUs' and the state directory's) give the
    node's health verdict.
    """

    def __init__(
        self,
        *,
        server: str,
        token: str,
        node: str,
        inventory: Mapping[str, Any],
        runner: Runner,
        gpu_uuids: tuple[str, ...] = (),
        telemetry: Telemetry | None = None,
        facts: Mapping[str, Any] | None = None,
        differences: Sequence[str] = (),
        checks: NodeChecks | None = None,
        mig: MigApplier | None = None,
        poll_s: float = 0.2,
        max_backoff_s: float = MAX_RETRY_S,
        max_wait_s: float = MAX_SYNC_WAIT_S,
    ) -> None:
        self.node = node
        self.runner = runner
        self.heartbeat_s = 10.0
        self._inventory = dict(inventory)
        self._gpu_uuids = list(gpu_uuids)
        self._telemetry = telemetry
        # Whom runs here run as: the controller serves output files that account owns.
        self._facts = {**dict(facts or {}), "job_uid": runner.job_uid}
        self._differences = list(differences)
        self._checks = checks or NodeChecks(CheckSettings())
        self._mig = mig or MigApplier(hardware=False, enabled=False)
        # MIG changes done and not yet acknowledged, and the last done per GPU.
        self._mig_lock = threading.Lock()
        self._mig_unacked: dict[int, MigDone] = {}
        self._mig_last: dict[int, MigDone] = {}
        self._health: NodeHealth | None = None
        self._recheck = threading.Event()
        self._gpus: list[GpuReading] = []  # the last readings, for the checks
        self._poll_s = poll_s
        self._max_backoff_s = max_backoff_s
        self._max_wait_s = max_wait_s
        self._stop = threading.Event()
        self._ended = threading.Event()  # a run ended: worth syncing now
        headers = {"Authorization": f"Bearer {token}"}
        base = server.rstrip("/") + f"/v1/agents/{node}"
        # One client per thread: the long poll and the report flushes run side by side.
        self._poll_client = httpx.Client(base_url=base, headers=headers)
        self._flush_client = httpx.Client(base_url=base, headers=headers)
        self.registered = threading.Event()

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> None:
        """Register, then sync until ``stop``.

        Raise Refused when the controller refuses the first registration (a
        bad token or inventory): retrying would not help.
        """
        monitor = threading.Thread(target=self._monitor, name="agent-monitor", daemon=True)
        monitor.start()
        # Its own thread: a check script may take a minute, a heartbeat may not.
        threading.Thread(target=self._check_loop, name="agent-checks", daemon=True).start()
        try:
            self._until_done(self.register)
            known = True
            while not self._stop.is_set():
                try:
                    if not known:
                        self._until_done(self.register)
                        known = True
                    self._until_done(
                        lambda: self.sync(wait_s=min(self.heartbeat_s, self._max_wait_s))
                    )
                except NotRegistered:
                    log.warning("node %s is unknown to the controller; registering", self.node)
                    known = False
                except Refused as e:
                    # Registered once, so the setup was right: wait for it to be again. A
                    # node retired by autoscaling lands here too (forgotten, its token
                    # revoked) until its provider stops the agent.
                    log.error("the controller refused the agent: %s", e)
                    self._stop.wait(self._max_backoff_s)
        finally:
            self._stop.set()
            monitor.join()
            self._poll_client.close()
            self._flush_client.close()
            if self._telemetry is not None:
                self._telemetry.close()

    def stop(self) -> None:
        """Make ``run`` return after the sync in progress (at most one heartbeat
        interval). Jobs keep running."""
        self._stop.set()
        self._ended.set()  # ends a pause between repeated answers
        self._recheck.set()

    def register(self) -> RegisterReply:
        """Send the inventory and the runs held; adopt the controller's heartbeat interval."""
        body = AgentRegister(
            inventory=self._inventory,
            gpu_uuids=self._gpu_uuids,
            running=self.runner.running(),
            facts=self._facts,
            differences=self._differences,
        )
        reply = RegisterReply.model_validate(
            self._post(self._poll_client, "/register", body.model_dump(), timeout=30.0)
        )
        self.heartbeat_s = min(MAX_SYNC_WAIT_S, max(1.0, reply.heartbeat_interval_s))
        log.info("registered node %s (state %s)", self.node, reply.state)
        self.registered.set()
        return reply

    def sync(self, *, wait_s: float, client: httpx.Client | None = None) -> SyncReply:
        """One sync: report, then start and kill what the reply says."""
        running, reports = self.runner.snapshot()
        with self._mig_lock:
            mig_done = list(self._mig_unacked.values())
        body = AgentSync(
            running=running,
            reports=reports,
            wait_s=wait_s,
            gpus=self._readings(),
            checkpoints=self.runner.checkpoints(),
            health=self._verdict(),
            mig_done=mig_done,
        )
        data = self._post(
            client or self._poll_client, "/sync", body.model_dump(), timeout=wait_s + 15.0
        )
        reply = SyncReply.model_validate(data)
        self.runner.acknowledge((r.job_id, r.run) for r in reports)
        self.heartbeat_s = min(MAX_SYNC_WAIT_S, max(1.0, reply.heartbeat_interval_s))
        with self._mig_lock:
            for done in mig_done:
                if self._mig_unacked.get(done.gpu) is done:
                    del self._mig_unacked[done.gpu]
        news = bool(reply.mig_changes) and self._change_mig(reply.mig_changes)
        # Kills first: a new run of a job waits for its old run here to end (the runner
        # defers it, and the controller asks again), never the other way round.
        for kill in reply.jobs_to_kill:
            try:
                if self.runner.kill(kill.job_id, kill.run, kill.signal, kill.grace_s, kill.reason):
                    news = True
                    log.info("killing job %s run %d (%s)", kill.job_id, kill.run, kill.reason)
            except OSError:  # the state directory failed: the controller sends it again
                log.exception("cannot kill job %s run %d", kill.job_id, kill.run)
        for launch in reply.jobs_to_start:
            if self.runner.start(launch):
                news = True
                log.info("started job %s run %d", launch.job_id, launch.run)
        if not news and (reply.jobs_to_start or reply.jobs_to_kill) and wait_s > 0:
            # Nothing new: a kill sent again (an older controller repeats one on
            # every sync, and answers a long poll at once when it does). Pause
            # instead of spinning, until a run ends or a short while passes.
            self._ended.wait(min(self.heartbeat_s, REPEAT_PAUSE_S))
            self._ended.clear()
        return reply

    def _change_mig(self, changes: Sequence[MigChange]) -> bool:
        """Carry out (or dry-run) each change not done yet; True if one was. A change
        already done is reported again (the controller resends until it hears)."""
        with self._mig_lock:
            news = False
            for change in changes:
                last = self._mig_last.get(change.gpu)
                if last is not None and last.layout == change.layout and not last.error:
                    self._mig_unacked[change.gpu] = last
                    continue
                node = nodes_from_groups([self._inventory], "inventory")[0]
                if change.gpu >= len(node.gpus):
                    error = f"no GPU {change.gpu} on {self.node}"
                    done = MigDone(gpu=change.gpu, layout=change.layout, error=error)
                else:
                    done = self._mig.apply(change, node.gpus[change.gpu].mig is not None)
                if not done.error:
                    self._inventory = with_mig(self._inventory, _relaid(node, change))
                self._mig_last[change.gpu] = self._mig_unacked[change.gpu] = done
                news = True
            return news

    # -- internals --------------------------------------------------------------------

    def _monitor(self) -> None:
        """Collect run ends and report them at once (the long poll may be waiting).

        Nothing ends this loop but ``stop``: a failure is logged (once while it lasts)
        and the next poll tries again, and a state directory that failed is tried
        every ``STATE_RETRY_S`` until it takes writes again.
        """
        failure = ""
        tried = 0.0
        while not self._stop.wait(self._poll_s):
            try:
                if self.runner.fault and time.monotonic() - tried >= STATE_RETRY_S:
                    tried = time.monotonic()
                    if not self.runner.check_state_dir():
                        self._recheck.set()  # a fresh verdict, without the fault
                self._collect()
                failure = ""
            except Exception as e:
                if repr(e) != failure:
                    log.exception("watching the runs failed; trying again")
                failure = repr(e)

    def _collect(self) -> None:
        ended = self.runner.poll()
        if ended:
            self._ended.set()
        for report in ended:
            log.info("job %s run %d ended: %s", report.job_id, report.run, _describe(report))
        if ended and self.registered.is_set():
            try:
                self.sync(wait_s=0.0, client=self._flush_client)
            except (httpx.HTTPError, NotRegistered, Refused) as e:
                # The main loop carries the reports on its next sync.
                log.debug("report flush failed: %s", e)

    def _readings(self) -> list[GpuReading]:
        """The GPUs' readings now; none (the controller keeps the last) if the source fails."""
        if self._telemetry is None:
            return []
        try:
            gpus = self._telemetry.readings()
        except Exception:  # a telemetry fault must never stop the heartbeat
            log.exception("cannot read the GPUs from %s", self._telemetry.description)
            return []
        if [g.healthy for g in gpus] != [g.healthy for g in self._gpus]:
            self._recheck.set()  # a GPU's verdict changed: the checks act on it now
        self._gpus = gpus
        return gpus

    def _check_loop(self) -> None:
        """Run the node's checks every interval, or at once when a GPU's verdict changes;
        a failing verdict goes out before its remediation, the re-check after it."""
        telemetry = [self._telemetry.fault] if self._telemetry and self._telemetry.fault else []
        while not self._stop.is_set():
            health = self._checks.run(self._gpus, self._faults(telemetry))
            self._publish(health)
            remediation = self._checks.remediate(health)
            if remediation:
                again = self._checks.run(self._gpus, self._faults(telemetry))
                self._publish(again.model_copy(update={"remediation": remediation}))
            self._recheck.wait(self._checks.settings.interval_s)
            self._recheck.clear()

    def _faults(self, telemetry: list[str]) -> list[str]:
        """The faults found outside the checks: the readings' source, the state directory."""
        state = self.runner.check_state_dir()
        return [*telemetry, state] if state else telemetry

    def _verdict(self) -> NodeHealth | None:
        """The health verdict a sync carries: the checks' last, failing as well while the
        runner cannot write its state directory, so that the sync reporting a run the
        node could not start also drains the node (the checks see it only later)."""
        health, fault = self._health, self.runner.fault
        if not fault or (health is not None and fault in health.reason):
            return health
        if health is None:
            return NodeHealth(ok=False, reason=fault[:REASON_CHARS], at=time.time())
        reason = "; ".join(r for r in (health.reason, fault) if r)[:REASON_CHARS]
        return health.model_copy(update={"ok": False, "reason": reason})

    def _publish(self, health: NodeHealth) -> None:
        """Keep ``health`` for the syncs; send it at once when it is news."""
        last = self._health
        self._health = health
        if not health.ok:
            log.warning("node unhealthy: %s", health.reason)
        same = last is not None and (last.ok, last.reason, last.masked_gpus) == (
            health.ok,
            health.reason,
            health.masked_gpus,
        )
        if (same and not health.remediation) or not self.registered.is_set():
            return
        try:
            self.sync(wait_s=0.0, client=self._flush_client)
        except (httpx.HTTPError, NotRegistered, Refused) as e:
            log.debug("health report failed: %s", e)  # the next heartbeat carries it

    def _until_done(self, call: Any) -> Any:
        """``call()`` until it succeeds or ``stop``; back off on transient failures."""
        delay = 0.5
        while not self._stop.is_set():
            try:
                return call()
            except httpx.HTTPError as e:
                if self._stop.is_set():
                    break
                pause = random.uniform(0.5, 1.0) * delay
                log.warning("controller unreachable (%s); retrying in %.1f s", _short(e), pause)
                self._stop.wait(pause)
                # Never longer than a heartbeat: a restarted controller that hears nothing
                # for its heartbeat timeout calls the node lost and requeues its jobs.
                delay = min(self._max_backoff_s, self.heartbeat_s, delay * 2)
        return None

    def _post(self, client: httpx.Client, path: str, body: dict[str, Any], timeout: float) -> Any:
        response = client.post(path, json=body, timeout=httpx.Timeout(10.0, read=timeout))
        if response.status_code == 404 and path == "/sync":
            raise NotRegistered(_problem(response))
        if response.status_code in (401, 403, 404, 413, 422):
            status = response.status_code
            raise Refused(status, f"{path.strip('/')}: {status} {_problem(response)}")
        # 5xx and the rest are the controller's trouble: retried like a lost connection.
        response.raise_for_status()
        return response.json()


def _problem(response: httpx.Response) -> str:
    try:
        doc = response.json()
    except ValueError:
        return response.text[:200]
    if not isinstance(doc, dict):
        return str(doc)[:200]
    errors = doc.get("errors") or []
    fields = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in errors[:3])
    return fields or str(doc.get("detail") or doc.get("title") or "")


def _short(error: httpx.HTTPError) -> str:
    return f"{type(error).__name__}: {error}"[:200]


def _relaid(node: Node, change: MigChange) -> Node:
    """``node`` with GPU ``change.gpu`` cut as the change says."""
    layout = None if change.layout is None else tuple(mig_instance(e) for e in change.layout)
    gpus = list(node.gpus)
    gpus[change.gpu] = replace(gpus[change.gpu], mig=layout)
    return replace(node, gpus=tuple(gpus))


def mig_instance(entry: str) -> tuple[str, int]:
    """``"3g.40gb@4"`` as ``("3g.40gb", 4)``."""
    profile, _, start = entry.partition("@")
    return profile, int(start)


def _describe(report: RunReport) -> str:
    what = {
        "exited": f"exit code {report.exit_code}",
        "signalled": f"signal {report.signal}",
        "failed_to_start": "failed to start",
    }[report.state]
    return what + (f" ({report.message})" if report.message else "")
