"""An in-memory stand-in for the controller service, behind the real API app.

The stand-in keeps jobs in a dict and answers as the service's contract says
(newest first, opaque cursors, request_id deduplication, NotFound for another
user's job); scheduling itself is covered by the controller's own tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from gpufleet.api.schemas import JobOut, JobPage, JobSubmit, Submitted
from gpufleet.controller.errors import Conflict, Invalid, NotFound
from gpufleet.controller.service import Principal
from gpufleet.controller.views import (
    AccountOut,
    FairshareRow,
    GpuOut,
    NodeOut,
    PartitionOut,
    QosOut,
    ReservationOut,
    UsageRow,
)

TOKENS = {
    "gf_ada": Principal(user="ada", role="user", account="lab"),
    "gf_bob": Principal(user="bob", role="user", account="lab"),
    "gf_ops": Principal(user="ops", role="operator"),
}
PARTITIONS = ("gpu", "debug")


class StandIn:
    """The controller's public methods the client calls, over plain dicts."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobOut] = {}
        self.requests: dict[tuple[str, str], str] = {}
        self.submissions: list[JobSubmit] = []
        self.ids = itertools.count(1)
        self.drained: dict[str, str] = {}

    def authenticate(self, *, token: str) -> Principal | None:
        return TOKENS.get(token)

    def submit(self, *, principal: Principal, spec: JobSubmit) -> Submitted:
        key = (principal.user, spec.request_id or "")
        if spec.request_id and key in self.requests:
            return Submitted(job_id=self.requests[key], duplicate=True)
        partition = spec.partition or "gpu"
        if partition not in PARTITIONS:
            raise Invalid("body.partition", f"no partition {partition!r}")
        self.submissions.append(spec)
        job_id = str(next(self.ids))
        self.jobs[job_id] = JobOut(
            job_id=job_id,
            name=spec.name,
            user=principal.user,
            account=spec.account or principal.account,
            partition=partition,
            qos="normal",
            state="PENDING",
            reason="Resources",
            nodes=spec.nodes,
            gpus_per_node=spec.gpus_per_node,
            gpu_milli=spec.gpu_milli,
            cpus_per_task=spec.cpus_per_task,
            mem_mib=spec.mem_mib,
            time_limit_s=spec.time_limit_s or 3600,
            submit_time=1_714_560_000.0,
            expected_start=1_714_563_600.0,
            workdir=spec.workdir,
            stdout_path=f"{spec.workdir}/slurm-{job_id}.out",
            stderr_path=f"{spec.workdir}/slurm-{job_id}.out",
        )
        if spec.request_id:
            self.requests[key] = job_id
        return Submitted(job_id=job_id)

    def _visible(self, principal: Principal, job_id: str) -> JobOut:
        job = self.jobs.get(job_id)
        if job is None or not (principal.is_operator or job.user == principal.user):
            raise NotFound(f"job {job_id} not found")
        return job

    def list_jobs(
        self,
        *,
        principal: Principal,
        user: str | None,
        states: Sequence[str],
        partition: str | None,
        account: str | None,
        limit: int,
        cursor: str | None,
    ) -> JobPage:
        if cursor is not None and not cursor.isdigit():
            raise Invalid("query.cursor", "not a cursor this server issued")
        chosen = [
            job
            for job in sorted(self.jobs.values(), key=lambda j: -int(j.job_id))
            if (principal.is_operator or job.user == principal.user)
            and (user is None or job.user == user)
            and (not states or job.state in states)
            and (partition is None or job.partition == partition)
            and (account is None or job.account == account)
            and (cursor is None or int(job.job_id) < int(cursor))
        ]
        page = chosen[:limit]
        more = len(chosen) > limit
        return JobPage(jobs=page, next_cursor=page[-1].job_id if more else None)

    def get_job(self, *, principal: Principal, job_id: str) -> JobOut:
        return self._visible(principal, job_id)

    def _set(self, principal: Principal, job_id: str, **changes: Any) -> JobOut:
        job = self._visible(principal, job_id)
        if job.state != "PENDING":
            raise Conflict(f"job {job_id} is {job.state.lower()}")
        self.jobs[job_id] = job.model_copy(update=changes)
        return self.jobs[job_id]

    def cancel_job(self, *, principal: Principal, job_id: str, reason: str = "") -> JobOut:
        return self._set(principal, job_id, state="CANCELLED", reason=reason)

    def hold_job(self, *, principal: Principal, job_id: str) -> JobOut:
        return self._set(principal, job_id, held=True, reason="JobHeldUser")

    def release_job(self, *, principal: Principal, job_id: str) -> JobOut:
        return self._set(principal, job_id, held=False, reason="Resources")

    def requeue_job(self, *, principal: Principal, job_id: str) -> JobOut:
        return self._set(principal, job_id, restart_count=1)

    def _node(self, name: str) -> NodeOut:
        if name not in ("node01", "node02"):
            raise NotFound(f"node {name!r} not found")
        used = [1000, 1000, 250, 0] if name == "node01" else [0, 0, 0, 0]
        gpus = [
            GpuOut(index=k, model="A100-80GB", memory_mib=81920, used_milli=u)
            for k, u in enumerate(used)
        ]
        drained = name in self.drained
        return NodeOut(
            name=name,
            state="drain" if drained else "mixed" if name == "node01" else "idle",
            reason=self.drained.get(name, ""),
            cpu_milli=64000,
            cpu_milli_used=16000 if name == "node01" else 0,
            memory_mib=512000,
            gpus=gpus,
        )

    def list_nodes(self, *, principal: Principal) -> list[NodeOut]:
        return [self._node("node01"), self._node("node02")]

    def drain_node(self, *, principal: Principal, name: str, reason: str) -> NodeOut:
        self._node(name)
        self.drained[name] = reason
        return self._node(name)

    def resume_node(self, *, principal: Principal, name: str, reason: str = "") -> NodeOut:
        self.drained.pop(name, None)
        return self._node(name)

    def list_partitions(self, *, principal: Principal) -> list[PartitionOut]:
        return [
            PartitionOut(
                name=name,
                nodes=["node01", "node02"],
                default_time_s=3600,
                max_time_s=86400,
                priority_tier=1,
                is_default=name == "gpu",
            )
            for name in PARTITIONS
        ]

    def list_qos(self, *, principal: Principal) -> list[QosOut]:
        return [
            QosOut(
                name="normal",
                priority=0,
                preempt_mode="requeue",
                grace_s=60,
                usage_factor=1.0,
                max_jobs_per_user=0,
                max_gpus_per_user=8,
                max_gpus_per_account=0,
                group_gpus=0,
                max_wall_s=86400,
                is_default=True,
            )
        ]

    def list_accounts(self, *, principal: Principal) -> list[AccountOut]:
        return [
            AccountOut(name="lab", parent="", kind="account", shares=1, normalized_shares=1),
            AccountOut(name="ada", parent="lab", kind="user", shares=1, normalized_shares=0.5),
        ]

    def list_reservations(self, *, principal: Principal) -> list[ReservationOut]:
        return [ReservationOut(name="maint", start=0, end=3600, nodes=["node02"], maintenance=True)]

    def fairshare(self, *, principal: Principal) -> list[FairshareRow]:
        return [
            FairshareRow(
                account="lab",
                user="ada",
                shares=1,
                normalized_shares=0.5,
                usage=7200,
                normalized_usage=0.25,
                factor=0.7,
            )
        ]

    def usage(self, *, principal: Principal, start: float, end: float, by: str) -> list[UsageRow]:
        return [UsageRow(key=f"{by}:{start:.0f}", gpu_hours=12.5, jobs=3, runs=4)]
