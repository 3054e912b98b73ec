"""Limits that keep a job pending: QoS limits and partition limits, with Slurm's reasons.

Both are ``Admission`` plugins. Usage counts every running job plus the jobs
this cycle has already decided to start (the cycle's ``Tally``), so a user
cannot exceed a limit by submitting many jobs at once. GPU limits compare
milli-GPU: a job fits under a limit of N GPUs if what the user (account,
QoS) holds plus the job's share is at most N x 1000.
"""

from __future__ import annotations

from typing import ClassVar

from gpufleet.core.cycle import Snapshot, Tally
from gpufleet.core.job import Job
from gpufleet.core.model import MILLI


class QosLimits:
    """MaxJobsPerUser, MaxTRESPerUser/PerAccount (GPUs), GrpTRES (GPUs) and MaxWall."""

    NAME: ClassVar[str] = "qos-limits"

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


class PartitionLimits:
    """MaxTime, AllowAccounts and AllowQos of the job's partition."""

    NAME: ClassVar[str] = "partition-limits"

    def admit(self, snapshot: Snapshot, job: Job, tally: Tally) -> str:
        p = snapshot.partitions[job.partition]
        if p.max_time_s and job.time_limit_s > p.max_time_s:
            return "PartitionTimeLimit"
        if p.allowed_accounts and job.account not in p.allowed_accounts:
            return "AccountNotAllowed"
        if p.allowed_qos and job.qos not in p.allowed_qos:
            return "QOSNotAllowed"
        return ""
