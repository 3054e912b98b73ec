"""The HTTP API's request and response bodies (pydantic), shared by the server and the CLI.

Every request model forbids unknown fields, so a typo is a 422 naming the
field instead of a silently ignored option. Sizes are bounded here, once,
so that an absurd request is refused before it reaches the scheduler.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_NODES = 4096
MAX_GPUS_PER_NODE = 64
MAX_CPUS_PER_TASK = 4096
MAX_MEM_MIB = 64 * 1024 * 1024  # 64 TiB per node
MAX_TIME_S = 365 * 86400
MAX_ARRAY_TASKS = 100_000
MAX_SCRIPT_BYTES = 1_000_000
MAX_UNIX_TIME = 253_402_300_799
"""9999-12-31T23:59:59Z: a later time is a typo, and would overflow the cycle's int64 columns."""

JobStateName = Literal[
    "PENDING",
    "RUNNING",
    "COMPLETING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "REQUEUED",
]
"""Slurm's job states. PREEMPTED, NODE_FAIL and REQUEUED are transitions a
requeueable job passes through on its way back to PENDING; they stay final
for a job that may not be requeued."""

TERMINAL_STATES: frozenset[str] = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"}
)

Role = Literal["admin", "operator", "user", "node", "metrics", "alerts"]
# A user hold: the owner's (or submitted held), which the owner may release. An admin hold:
# an operator's or admin's, which only an operator or admin may release.
HoldKind = Literal["user", "admin"]


USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")
"""A user (principal) name: it reaches paths (``checkpoint_dir/USER/JOBID``, ``%u``)."""
USER_NAME_RULE = "must be 1-64 letters, digits or _ . @ -, not starting with . @ or -"


OUTPUT_PATTERNS = "jAaxu%"
"""The ``%`` patterns of an output path: job id, array job id, array index, name, user, %."""
_OUTPUT_PATTERN = re.compile(r"%(.?)")


def unknown_output_pattern(path: str) -> str | None:
    """The first ``%`` pattern of ``path`` that is not one of ``OUTPUT_PATTERNS``
    (``"%N"``, or ``"%"`` for one at the end), or None when all are known."""
    for match in _OUTPUT_PATTERN.finditer(path):
        if match[1] == "" or match[1] not in OUTPUT_PATTERNS:
            return match[0]
    return None


def is_user_name(value: str) -> bool:
    """Whether ``value`` is a valid user name (``USER_NAME``), for tokens and principals."""
    return USER_NAME.fullmatch(value) is not None


def _nul_free(value: object) -> bool:
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list | tuple):
        return all(_nul_free(v) for v in value)
    if isinstance(value, dict):
        return all(_nul_free(k) and _nul_free(v) for k, v in value.items())
    return True


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        # No database, path or argv can hold a NUL character: refuse it here,
        # naming the field, rather than fail deep inside the store.
        if not _nul_free(value):
            raise ValueError("must not contain NUL characters")
        return value


class JobSubmit(_Request):
    """One submission, as ``sbatch`` options would describe it.

    Give ``command`` (an argv, run without a shell) or ``script`` (the text
    of a script, run as an executable file: its ``#!`` line decides the
    interpreter, ``/bin/sh`` without one). Output paths may use Slurm's
    patterns ``%j`` (job id), ``%A`` (array job id), ``%a`` (array index),
    ``%x`` (job name), ``%u`` (user) and ``%%``; relative paths are taken
    from ``workdir``. ``request_id`` makes a retried submission return the
    job it already created instead of a second one.
    """

    name: str = Field("", max_length=256)
    command: list[str] | None = Field(None, min_length=1, max_length=4096)
    script: str | None = Field(None, max_length=MAX_SCRIPT_BYTES)
    workdir: str = Field(..., min_length=1, max_length=4096)
    env: dict[str, str] = Field(default_factory=dict, max_length=4096)
    stdout: str | None = Field(None, max_length=4096)
    stderr: str | None = Field(None, max_length=4096)
    partition: str | None = Field(None, max_length=128)
    qos: str | None = Field(None, max_length=128)
    account: str | None = Field(None, max_length=128)
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    gpus_per_node: int = Field(0, ge=0, le=MAX_GPUS_PER_NODE)
    gpu_type: str | None = Field(None, max_length=128)
    gpu_milli: int = Field(0, ge=0, le=999, description="a fraction of one shared GPU")
    gpu_memory_mib: int = Field(0, ge=0, le=MAX_MEM_MIB)
    mig_profile: str | None = Field(None, max_length=32, description="for example 1g.10gb")
    mig_count: int = Field(0, ge=0, le=56)
    cpus_per_task: int = Field(1, ge=1, le=MAX_CPUS_PER_TASK)
    mem_mib: int = Field(0, ge=0, le=MAX_MEM_MIB, description="per node; 0: the default")
    time_limit_s: int | None = Field(
        None, ge=0, le=MAX_TIME_S, description="0: no limit; none: the partition's default"
    )
    array: str | None = Field(None, max_length=4096, description="0-999%50, 1,3,5 or 0-15:4")
    dependency: str | None = Field(
        None, max_length=4096, description="afterok:1:2,afterany:3, afternotok:4 or singleton"
    )
    exclusive: bool = False
    constraint: str | None = Field(None, max_length=1024, description="node features: a&b, a|b")
    nodelist: list[str] = Field(default_factory=list, max_length=MAX_NODES)
    exclude: list[str] = Field(default_factory=list, max_length=MAX_NODES)
    begin: int | None = Field(None, ge=0, le=MAX_UNIX_TIME, description="not before this Unix time")
    requeue: bool = True
    container: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description="an image to run the job in, through the node agents' container template",
    )
    checkpoint_s: int | None = Field(
        None,
        gt=0,
        le=MAX_TIME_S,
        description="the job checkpoints about this often: preemption then loses only the "
        "work since its last checkpoint (reported by touching $GPUFLEET_CHECKPOINT_MARK)",
    )
    signal: str | None = Field(None, max_length=32, description="[B:]SIG[@seconds], e.g. USR1@90")
    hold: bool = False
    nice: int = Field(
        0, ge=-10_000, le=10_000, description="lowers the priority; below 0 (raising it): operators"
    )
    request_id: str | None = Field(None, min_length=1, max_length=128)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        # What execve refuses, refused now rather than failing the job on its node.
        for name in value:
            if not name or "=" in name:
                raise ValueError(f"{name!r} is not a variable name (empty, or with '=')")
        return value

    @field_validator("script")
    @classmethod
    def _unix_line_endings(cls, value: str | None) -> str | None:
        # Its #! line would name "/bin/bash\r", which no node has (sbatch refuses it too).
        if value is not None and "\r\n" in value:
            raise ValueError("has DOS line breaks (\\r\\n); convert it with dos2unix")
        return value

    @field_validator("stdout", "stderr")
    @classmethod
    def _output_path(cls, value: str | None) -> str | None:
        bad = unknown_output_pattern(value) if value else None
        if bad is not None:
            raise ValueError(
                f"{bad} is not a known pattern (%j job id, %A array job id, "
                "%a array index, %x name, %u user, %% a percent sign)"
            )
        return value


class Submitted(BaseModel):
    """What a submission returns: the job (or array job) id."""

    job_id: str
    array_task_count: int = 0
    duplicate: bool = Field(False, description="a retry of an earlier request_id")


class JobEvent(BaseModel):
    """One step of a job's history."""

    time: float
    state: JobStateName
    reason: str = ""


class JobOut(BaseModel):
    """A job as ``show`` and ``queue`` report it."""

    job_id: str
    array_job_id: str | None = None
    array_task_id: int | None = None
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: JobStateName
    reason: str = ""
    nodes: int
    gpus_per_node: int
    gpu_milli: int
    mig_profile: str | None = None
    cpus_per_task: int
    mem_mib: int
    time_limit_s: int
    submit_time: float
    start_time: float | None = None
    end_time: float | None = None
    expected_start: float | None = Field(None, description="backfill's planned start")
    node_list: list[str] = Field(default_factory=list)
    gpu_uuids: list[str] = Field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None
    restart_count: int = 0
    workdir: str
    stdout_path: str
    stderr_path: str
    priority: float | None = Field(
        None,
        description="a pending job's priority at the last cycle, as the ordering computed it "
        "(higher first); null when that cycle did not rank it (held, before its begin "
        "time, waiting on a dependency, submitted since) and for a job not pending",
    )
    held: bool = False
    hold: HoldKind | None = Field(None, description="the kind of hold, when held")
    history: list[JobEvent] = Field(default_factory=list)


class JobPage(BaseModel):
    """One page of a job listing; pass ``next_cursor`` back for the next."""

    jobs: list[JobOut]
    next_cursor: str | None = None


class Reason(_Request):
    """A reason an operator gives for a node or job action."""

    reason: str = Field(..., min_length=1, max_length=1024)


class Problem(BaseModel):
    """An RFC 9457 problem document; ``errors`` names each bad field."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str = ""
    errors: list[dict[str, str]] = Field(default_factory=list)


class TokenCreate(_Request):
    """A new API token: ``node`` is required for, and only for, the ``node`` role."""

    name: str = Field(..., min_length=1, max_length=128)
    user: str = Field(..., min_length=1, max_length=128)
    role: Role
    node: str | None = Field(None, min_length=1, max_length=128)


class ConfigPatch(_Request):
    """A JSON merge patch (RFC 7386) of the configuration document.

    ``version``, if given, must be the current version (0 while none is
    stored), so that two admins editing at once cannot silently overwrite
    each other.
    """

    patch: dict[str, Any]
    version: int | None = Field(None, ge=0)


class Health(BaseModel):
    """The liveness answer of ``/healthz``."""

    status: Literal["ok"] = "ok"


class Identity(BaseModel):
    """Who the calling token stands for (``GET /v1/whoami``)."""

    user: str
    role: Role
    node: str | None = Field(None, description="the node, for a node token")
