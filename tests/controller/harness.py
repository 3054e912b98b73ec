"""A controller on a manual clock with two 4-GPU nodes, and helpers to act as its agents."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet.api.agent_schemas import AgentRegister, AgentSync, RunRef, RunReport, SyncReply
from gpufleet.api.schemas import JobSubmit
from gpufleet.controller.clock import ManualClock
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import ControllerSetup
from gpufleet.core.job import Partition, QoS
from gpufleet.policies.config import Policy, PolicyConfig
from store.databases import Database

ADMIN = Principal(user="root", role="admin")
OPERATOR = Principal(user="op", role="operator")
ANA = Principal(user="ana", role="user", account="vision")
BOB = Principal(user="bob", role="user", account="nlp")
NODES = ("n1", "n2")


def inventory(name: str, gpus: int = 4) -> dict[str, Any]:
    return {
        "names": name,
        "cpu_milli": 32000,
        "memory_mib": 256 * 1024,
        "gpus": {"model": "A100-80GB", "count": gpus},
    }


def setup(**overrides: Any) -> ControllerSetup:
    policy = Policy(PolicyConfig())
    values: dict[str, Any] = {
        "profile_factory": lambda workload: policy.profile(workload),
        "qos": {"normal": QoS("normal")},
        "partitions": {"gpu": Partition("gpu")},
        "interval_s": 60.0,
        "heartbeat_timeout_s": 120.0,
    }
    values.update(overrides)
    return ControllerSetup(**values)


def spec(**overrides: Any) -> JobSubmit:
    values: dict[str, Any] = {"command": ["true"], "workdir": "/tmp", "gpus_per_node": 1}
    values.update(overrides)
    return JobSubmit(**values)


class Cluster:
    """The controller under test plus the agents' side of the protocol."""

    def __init__(self, db: Database, clock: ManualClock | None = None, **overrides: Any) -> None:
        self.db = db
        self.clock = clock or ManualClock()
        self.setup = setup(**overrides)
        self.held: dict[str, set[tuple[str, int]]] = {n: set() for n in NODES}
        self.ctl = self.open()

    def open(self) -> Controller:
        ctl = Controller(
            setup=self.setup, db_url=self.db.url, clock=self.clock, schema=self.db.schema
        )
        ctl.start(loop=False)
        return ctl

    def restart(self) -> None:
        self.ctl.stop()
        self.ctl = self.open()

    def register(self, *names: str) -> None:
        for name in names or NODES:
            body = AgentRegister(inventory=inventory(name))
            self.ctl.register_agent(principal=ADMIN, node=name, body=body)

    def sync(self, node: str, reports: Sequence[RunReport] = ()) -> SyncReply:
        """One agent sync that starts what it is told and drops what it is told to kill."""
        running = [RunRef(job_id=j, run=r) for j, r in sorted(self.held[node])]
        body = AgentSync(running=running, reports=list(reports))
        reply = self.ctl.sync_agent(principal=ADMIN, node=node, body=body)
        for r in reports:
            self.held[node].discard((r.job_id, r.run))
        for launch in reply.jobs_to_start:
            self.held[node].add((launch.job_id, launch.run))
        for kill in reply.jobs_to_kill:
            self.held[node].discard((kill.job_id, kill.run))
        return reply

    def exit(self, node: str, job_id: str, run: int, code: int = 0) -> SyncReply:
        report = RunReport(
            job_id=job_id, run=run, state="exited", exit_code=code, at=self.clock.now()
        )
        return self.sync(node, [report])

    def where(self, job_id: str) -> str:
        return self.ctl.get_job(principal=ADMIN, job_id=job_id).node_list[0]

    def state(self, job_id: str) -> str:
        return self.ctl.get_job(principal=ADMIN, job_id=job_id).state
