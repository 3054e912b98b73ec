"""Limits that keep a job pending: QoS limits and partition limits, with Slurm's reasons.

Both are ``Admission`` plugins, and ``BulkAdmission`` ones: ``admit_all``
judges many jobs at once and gives the reasons ``admit`` would. Usage counts
every running job plus the jobs this cycle has already decided to start (the
cycle's ``Tally``), so a user cannot exceed a limit by submitting many jobs
at once. GPU limits compare milli-GPU: a job fits under a limit of N GPUs if
what the user (account, QoS) holds plus the job's share is at most N x 1000.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from gpufleet.core.job import Job, Partition, QoS
from gpufleet.core.model import MILLI
from gpufleet.core.snapshot import ObjectArray, QueueView, Snapshot, Tally, TallyKind
from gpufleet.core.state import BoolArray, IntArray

STOPPED = {"down": "PartitionDown", "inactive": "PartitionInactive"}
"""Partition states that start no job, and the pending reason each gives."""


def _qos_limited(q: QoS) -> bool:
    """Whether the QoS sets any limit ``QosLimits`` checks."""
    limits = (q.max_wall_s, q.max_jobs_per_user, q.max_gpus_per_user, q.max_gpus_per_account)
    return any(limits) or bool(q.group_gpus)


def _partition_limited(p: Partition) -> bool:
    """Whether the partition may refuse a job in ``PartitionLimits``."""
    return p.state in STOPPED or bool(p.max_time_s or p.allowed_accounts or p.allowed_qos)


def first_reason(size: int, *checks: tuple[str, BoolArray]) -> ObjectArray:
    """Per job, the reason of the first check that holds, else ""."""
    reasons = np.full(size, "", dtype=object)
    for reason, hit in reversed(checks):
        reasons[hit] = reason
    return reasons


class QosLimits:
    """MaxJobsPerUser, MaxTRESPerUser/PerAccount (GPUs), GrpTRES (GPUs) and MaxWall."""

    NAME: ClassVar[str] = "qos-limits"
    clocked: ClassVar[bool] = False

    def admit(self, snapshot: Snapshot, job: Job, tally: Tally) -> str:
        q = snapshot.qos[job.qos]
        if q.max_wall_s and job.time_limit_s > q.max_wall_s:
            return "QOSMaxWallDurationPerJobLimit"
        if q.max_jobs_per_user and tally.user_jobs[job.qos, job.user] >= q.max_jobs_per_user:
            return "QOSMaxJobsPerUserLimit"
        milli = job.gpu_milli
        if q.max_gpus_per_user and (
            tally.user_milli[job.qos, job.user] + milli > q.max_gpus_per_user * MILLI
        ):
            return "QOSMaxGPUsPerUserLimit"
        if q.max_gpus_per_account and (
            tally.account_milli[job.qos, job.account] + milli > q.max_gpus_per_account * MILLI
        ):
            return "QOSMaxGPUsPerAccountLimit"
        if q.group_gpus and tally.qos_milli[job.qos] + milli > q.group_gpus * MILLI:
            return "QOSGrpGPULimit"
        return ""

    def admit_all(self, snapshot: Snapshot, queue: QueueView, tally: Tally) -> ObjectArray:
        """``admit`` for every job of ``queue`` at once (a limit of 0 is off)."""
        codes, names = queue.codes("qos")
        defined = [snapshot.qos.get(name) for name in names]
        if not any(q is not None and _qos_limited(q) for q in defined):
            return np.full(len(queue), "", dtype=object)  # nothing to count against

        def limit(attr: str, scale: int = 1) -> IntArray:
            per_qos = [getattr(q, attr) * scale if q is not None else 0 for q in defined]
            return np.array(per_qos, dtype=np.int64)[codes]

        def held(kind: TallyKind, *attrs: str) -> IntArray:
            key_codes, keys = queue.codes(*attrs)
            return tally.counts(kind, keys)[key_codes]

        wall, jobs = limit("max_wall_s"), limit("max_jobs_per_user")
        per_user = limit("max_gpus_per_user", MILLI)
        per_account = limit("max_gpus_per_account", MILLI)
        group = limit("group_gpus", MILLI)
        time_limit, milli = queue.column("time_limit_s"), queue.column("gpu_milli")
        user_milli = held("user_milli", "qos", "user") + milli
        account_milli = held("account_milli", "qos", "account") + milli
        return first_reason(
            len(queue),
            ("QOSMaxWallDurationPerJobLimit", (wall > 0) & (time_limit > wall)),
            ("QOSMaxJobsPerUserLimit", (jobs > 0) & (held("user_jobs", "qos", "user") >= jobs)),
            ("QOSMaxGPUsPerUserLimit", (per_user > 0) & (user_milli > per_user)),
            ("QOSMaxGPUsPerAccountLimit", (per_account > 0) & (account_milli > per_account)),
            ("QOSGrpGPULimit", (group > 0) & (held("qos_milli", "qos") + milli > group)),
        )


class PartitionLimits:
    """State, MaxTime, AllowAccounts and AllowQos of the job's partition."""

    NAME: ClassVar[str] = "partition-limits"
    clocked: ClassVar[bool] = False

    def admit(self, snapshot: Snapshot, job: Job, tally: Tally) -> str:
        p = snapshot.partitions[job.partition]
        if p.state in STOPPED:
            return STOPPED[p.state]
        if p.max_time_s and job.time_limit_s > p.max_time_s:
            return "PartitionTimeLimit"
        if p.allowed_accounts and job.account not in p.allowed_accounts:
            return "AccountNotAllowed"
        if p.allowed_qos and job.qos not in p.allowed_qos:
            return "QOSNotAllowed"
        return ""

    def admit_all(self, snapshot: Snapshot, queue: QueueView, tally: Tally) -> ObjectArray:
        """``admit`` for every job of ``queue`` at once."""

        def refused(attr: str, allowed: Callable[[Partition], tuple[str, ...]]) -> BoolArray:
            codes, keys = queue.codes("partition", attr)
            parts = [(snapshot.partitions.get(p), value) for p, value in keys]
            bad = [p is not None and bool(allowed(p)) and v not in allowed(p) for p, v in parts]
            return np.array(bad, dtype=np.bool_)[codes]

        codes, names = queue.codes("partition")
        defined = [snapshot.partitions.get(name) for name in names]
        if not any(p is not None and _partition_limited(p) for p in defined):
            return np.full(len(queue), "", dtype=object)
        max_time = np.array([p.max_time_s if p else 0 for p in defined], dtype=np.int64)[codes]
        state = np.array([p.state if p else "up" for p in defined], dtype=object)[codes]
        return first_reason(
            len(queue),
            *((reason, state == name) for name, reason in STOPPED.items()),
            ("PartitionTimeLimit", (max_time > 0) & (queue.column("time_limit_s") > max_time)),
            ("AccountNotAllowed", refused("account", lambda p: p.allowed_accounts)),
            ("QOSNotAllowed", refused("qos", lambda p: p.allowed_qos)),
        )
