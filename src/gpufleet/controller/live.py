"""The controller's in-memory view of active jobs and nodes, and their row forms.

A ``LiveJob`` is a job not yet finished (PENDING, RUNNING or COMPLETING):
the store row's fields the scheduler reads every cycle, kept so that a cycle
never queries the database. Finished jobs live only in the store.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sqlalchemy as sa

from gpufleet.adapters.store import tables as t
from gpufleet.api.schemas import MAX_TIME_S, MAX_UNIX_TIME, HoldKind
from gpufleet.controller.jobspec import Dependency, parse_dependency, request_from_json
from gpufleet.core.job import Job
from gpufleet.core.model import Node, Request
from gpufleet.core.state import Assignment
from gpufleet.engine.book import Placement

ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "COMPLETING"})

# As Slurm: a user hold (the owner's, or submitted held) and an admin hold (an operator's).
HOLD_REASONS: dict[HoldKind, str] = {"user": "JobHeldUser", "admin": "JobHeldAdmin"}


@dataclass(slots=True)
class LiveJob:
    """An active job. ``kill`` is set while a stop was asked of its agents.

    ``kill`` holds ``mode`` (cancel, requeue, preempt-requeue,
    preempt-cancel, timeout), ``signal``, ``grace_s`` and ``deadline``.
    ``placements`` are per node: name, GPU indices and UUIDs, shares and
    MIG instance ids, in gang order. ``exits`` are the gang's tasks that
    ended in this run (node -> state, exit_code, signal, message).
    ``cleanup`` marks a job whose run's end is recorded (``state`` is final)
    while its nodes have not all confirmed the run gone (``gone``): its
    room stays held until they do or are down. ``admin_hold`` marks a hold
    only an operator or admin may release; it is set only with ``held``.
    """

    pk: int
    job_id: str
    job_num: int
    task: int | None
    array_limit: int | None
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: str
    held: bool
    nice: int
    submit_time: float
    begin_time: float | None
    time_limit_s: int
    run: int
    restart_count: int
    request: Request
    spec: dict[str, Any]
    dependency: Dependency | None
    requeue: bool
    reason: str = ""
    admin_hold: bool = False
    kill: dict[str, Any] | None = None
    start_time: float | None = None
    placements: list[dict[str, Any]] = field(default_factory=list)
    expected_start: float | None = None
    core: Job | None = None
    exits: dict[str, dict[str, Any]] = field(default_factory=dict)
    cleanup: bool = False
    gone: set[str] = field(default_factory=set)

    @property
    def node_list(self) -> list[str]:
        return [str(p["node"]) for p in self.placements]

    @property
    def limit_s(self) -> int:
        """The time limit the scheduler plans with: ``time_limit_s``, or for no limit (0)
        a year, the horizon Slurm gives an INFINITE job's end."""
        return self.time_limit_s or MAX_TIME_S

    @property
    def hold(self) -> HoldKind | None:
        """The kind of hold the job is under, None when it is not held."""
        return hold_kind(self.held, self.admin_hold)

    def job(self) -> Job:
        """The core job the cycle schedules (built once).

        Its node constraints come from the submitted spec, and ``begin_time``
        (rounded up to the core's whole seconds) makes the cycle give
        ``BeginTime`` until then: the core alone decides when it may start.
        """
        if self.core is None:
            spec = self.spec
            self.core = Job(
                id=self.job_id,
                user=self.user,
                account=self.account,
                qos=self.qos,
                partition=self.partition,
                request=self.request,
                submit_time=int(self.submit_time),
                time_limit_s=self.limit_s,
                priority_nice=self.nice,
                nodelist=tuple(spec.get("nodelist") or ()),
                exclude=tuple(spec.get("exclude") or ()),
                constraint=spec.get("constraint") or "",
                exclusive=bool(spec.get("exclusive")),
                # Capped: a row stored before submissions were bounded must not overflow
                # the cycle's int64 columns and stop every cycle.
                begin_time=min(math.ceil(self.begin_time), MAX_UNIX_TIME) if self.begin_time else 0,
                checkpoint_interval_s=spec.get("checkpoint_s"),
            )
        return self.core

    @classmethod
    def from_values(
        cls, values: dict[str, Any], request: Request, dependency: Dependency | None
    ) -> LiveJob:
        """A new job from the values its row was inserted with."""
        return cls(
            pk=values["id"],
            job_id=values["job_id"],
            job_num=values["job_num"],
            task=values["array_task_id"],
            array_limit=values["array_limit"],
            name=values["name"],
            user=values["user"],
            account=values["account"],
            partition=values["partition"],
            qos=values["qos"],
            state="PENDING",
            held=values["held"],
            nice=values["nice"],
            submit_time=values["submit_time"],
            begin_time=values["begin_time"],
            time_limit_s=values["time_limit_s"],
            run=0,
            restart_count=0,
            request=request,
            spec=values["spec"],
            dependency=dependency,
            requeue=values["requeue"],
            reason=values["reason"],
        )

    @classmethod
    def from_row(cls, row: Any, texts: RowTexts) -> LiveJob:
        """A LiveJob from a ``jobs`` row read with ``RowTexts.COLUMNS`` (a SQLAlchemy Row)."""
        return cls(
            pk=row.id,
            job_id=row.job_id,
            job_num=row.job_num,
            task=row.array_task_id,
            array_limit=row.array_limit,
            name=row.name,
            user=row.user,
            account=row.account,
            partition=row.partition,
            qos=row.qos,
            state=row.state,
            held=row.held,
            nice=row.nice,
            submit_time=row.submit_time,
            begin_time=row.begin_time,
            time_limit_s=row.time_limit_s,
            run=row.run,
            restart_count=row.restart_count,
            request=texts.request(row.request),
            spec=texts.json(row.spec),
            dependency=parse_dependency(row.dependency) if row.dependency else None,
            requeue=row.requeue,
            reason=row.reason,
            admin_hold=row.admin_hold,
            kill=row.kill,
            start_time=row.start_time,
            placements=list(row.assignments or []),
            exits=dict(row.task_exits or {}),
            cleanup=row.cleanup,
        )


class RowTexts:
    """Decodes the ``spec`` and ``request`` of job rows once per distinct text.

    The tasks of an array share one spec and one request, as they do in memory
    after a submission, so a restart with 100,000 array tasks pending decodes a
    handful of documents instead of 200,000 (the decoded values are only read).
    """

    COLUMNS: ClassVar[tuple[sa.ColumnElement[Any], ...]] = tuple(
        sa.cast(c, sa.Text).label(c.name) if c.name in ("spec", "request") else c
        for c in t.jobs.c
    )
    """``jobs``' columns with ``spec`` and ``request`` as their JSON text."""

    def __init__(self) -> None:
        self._json: dict[str, Any] = {}
        self._requests: dict[str, Request] = {}

    def json(self, text: str) -> Any:
        value = self._json.get(text)
        if value is None:
            value = self._json[text] = json.loads(text)
        return value

    def request(self, text: str) -> Request:
        value = self._requests.get(text)
        if value is None:
            value = self._requests[text] = request_from_json(json.loads(text))
        return value


def start_row(
    placements: Sequence[Placement],
    assignments: Sequence[Assignment],
    *,
    run: int,
    start_time: float,
) -> dict[str, Any]:
    """The ``jobs`` columns of a job whose run ``run`` starts at ``start_time``.

    ``assignments`` becomes one mapping per task, in gang order (what
    ``LiveJob.placements`` holds); the reason and the last run's end are cleared.
    """
    rows: list[dict[str, Any]] = [
        {
            "node": p.node,
            "gpus": list(p.gpus),
            "gpu_uuids": list(p.gpu_uuids),
            "gpu_milli": p.gpu_milli,
            "mig": list(p.mig),
            "cpu_milli": p.cpu_milli,
            "memory_mib": p.memory_mib,
            "gpu_memory_mib": a.gpu_memory_mib,
        }
        for p, a in zip(placements, assignments, strict=True)
    ]
    return {
        "state": "RUNNING",
        "reason": "",
        "start_time": start_time,
        "run": run,
        "node_list": [p["node"] for p in rows],
        "gpu_uuids": [u for p in rows for u in p["gpu_uuids"]],
        "assignments": rows,
        "end_time": None,
        "exit_code": None,
        "signal": None,
    }


def hold_kind(held: bool, admin_hold: bool) -> HoldKind | None:
    """A job row's ``held`` and ``admin_hold`` as the kind of hold it is under."""
    if not held:
        return None
    return "admin" if admin_hold else "user"


@dataclass(slots=True)
class NodeInfo:
    """A node the controller knows: declared in the configuration or registered by its agent.

    ``state`` is ``up`` (its agent syncs), ``down`` (heartbeat lost) or
    ``unknown`` (no agent seen yet); ``drain`` keeps new jobs off it, and so do
    ``strays``: runs its agent holds that the controller no longer expects
    (told to kill them), whose room it cannot know, until the agent says they ended.
    """

    node: Node
    state: str
    drain: bool = False
    reason: str = ""
    source: str = "config"
    last_heartbeat: float | None = None
    saved_heartbeat: float | None = None
    inventory: dict[str, Any] = field(default_factory=dict)
    strays: frozenset[tuple[str, int]] = frozenset()

    @property
    def usable(self) -> bool:
        return self.state == "up" and not self.drain and not self.strays
