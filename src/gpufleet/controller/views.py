"""What the controller's read methods return besides jobs: plain pydantic values.

The API serves them as they are, so their field names are the wire format.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from gpufleet.api.schemas import Role

UsageKey = Literal["user", "account", "partition", "qos"]
NodeStateName = Literal["idle", "mixed", "allocated", "drain", "draining", "down", "unknown"]
# core.job.PartitionState, restated: token commands import these views and load no core.
PartitionStateName = Literal["up", "down", "drain", "inactive"]


class GpuOut(BaseModel):
    """One GPU of a node and what holds it."""

    index: int
    model: str
    memory_mib: int
    uuid: str = ""
    used_milli: int = 0
    jobs: list[str] = Field(
        default_factory=list, description="the jobs holding it that the caller may see"
    )
    other_jobs: int = Field(0, description="jobs of other users holding it (ids not shown)")
    mig: list[str] = Field(default_factory=list, description="configured MIG profiles")
    masked: str = Field(
        "", description="why the node's agent masked it (unhealthy, no new jobs); '' if not"
    )


class NodeOut(BaseModel):
    """A node: capacity, allocation, state and the agent's last contact."""

    name: str
    state: NodeStateName
    reason: str = ""
    pool: str = "default"
    cpu_milli: int
    cpu_milli_used: int = 0
    memory_mib: int
    memory_mib_used: int = 0
    gpus: list[GpuOut] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    last_heartbeat: float | None = None
    jobs: list[str] = Field(
        default_factory=list,
        description="the running jobs on it the caller may see: its own, or all for an operator",
    )
    other_jobs: int = Field(0, description="running jobs of other users on it (ids not shown)")


class PartitionOut(BaseModel):
    name: str
    nodes: list[str]
    default_time_s: int
    max_time_s: int
    priority_tier: int
    allowed_accounts: list[str] = Field(default_factory=list)
    allowed_qos: list[str] = Field(default_factory=list)
    preemptible: bool = True
    is_default: bool = False
    state: PartitionStateName = "up"
    pending: int = 0
    running: int = 0


class QosOut(BaseModel):
    name: str
    priority: int
    preempt: list[str] = Field(default_factory=list)
    preempt_mode: str
    grace_s: int
    usage_factor: float
    max_jobs_per_user: int
    max_gpus_per_user: int
    max_gpus_per_account: int
    group_gpus: int
    max_wall_s: int
    is_default: bool = False


class AccountOut(BaseModel):
    """One association of the account tree: an account, or a user under one."""

    name: str
    parent: str
    kind: Literal["account", "user"]
    shares: float
    normalized_shares: float


class ReservationOut(BaseModel):
    name: str
    start: int
    end: int
    nodes: list[str] = Field(default_factory=list)
    gpus: int = 0
    users: list[str] = Field(default_factory=list)
    accounts: list[str] = Field(default_factory=list)
    maintenance: bool = False


class FairshareRow(BaseModel):
    """Fairshare of one association, as ``sshare -l``: account, user, raw and normalised
    shares, raw, normalised and effective usage, and (for a user) its factor."""

    account: str
    user: str | None = None
    shares: float
    normalized_shares: float
    usage: float = Field(description="raw usage: decayed billable GPU-seconds, rolled up")
    normalized_usage: float = Field(description="raw usage over the whole cluster's")
    effective_usage: float = Field(
        0.0, description="the algorithm's usage: classic's U_E, Fair Tree's share of the parent's"
    )
    factor: float | None = Field(None, description="the user's fairshare factor in [0, 1]")


class ErrorFigures(BaseModel):
    """How far runtime estimates were off for the jobs submitted in a span of time
    (``policies.prediction_error``); times in seconds from the first job's submission."""

    from_s: int
    to_s: int
    jobs: int
    mae_s: float = Field(description="mean absolute error of the estimates")
    median_error_pct: float = Field(description="median error as a share of the runtime")
    under_pct: float = Field(description="estimates shorter than the runtime")
    limit_mae_s: float = Field(description="the time limits' mean absolute error")
    limit_median_error_pct: float = Field(description="the limits' median relative error")


class PredictionReport(BaseModel):
    """The runtime predictor's error overall and per bucket of submit time."""

    start: float = Field(description="Unix time of the first job's submission")
    overall: ErrorFigures
    buckets: list[ErrorFigures]


class UsageRow(BaseModel):
    """GPU-hours one key (a user, account, partition or QoS) used over a time range."""

    key: str
    gpu_hours: float
    jobs: int = Field(description="distinct jobs with a run overlapping the range")
    runs: int


class TokenOut(BaseModel):
    """A token as listed: never its secret."""

    id: str
    name: str
    user: str
    role: Role
    node: str | None = None
    created: float
    revoked: bool = False


class TokenCreated(TokenOut):
    """A new token: ``token`` is shown this once and stored only as a hash."""

    token: str


class AuditEntry(BaseModel):
    id: int
    time: float
    who: str
    action: str
    target: str = ""
    detail: dict[str, Any] = Field(default_factory=dict)


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_cursor: str | None = None


class ConfigOut(BaseModel):
    """The effective configuration document and its version: 1 for the first one stored
    (a configuration file at first start, or else the first patch), 0 before any."""

    version: int
    config: dict[str, Any]
    updated: float
    updated_by: str = ""


class OutputChunk(BaseModel):
    """A slice of a job's stdout or stderr file; ask again from ``next_offset`` for more."""

    job_id: str
    stream: Literal["stdout", "stderr"]
    path: str
    offset: int
    next_offset: int
    data: str
    eof: bool = Field(description="the job has ended and nothing remains past next_offset")
