"""The agent protocol's bodies: what a node daemon sends the controller and gets back.

The protocol is PULL. An agent registers its inventory once per start, then
calls sync in a loop (a long poll of up to ``wait_s`` seconds). A sync
carries what the agent runs now and reports of runs that ended; the reply
carries what the agent should start and kill. The reply is derived from the
store's desired state (jobs RUNNING on this node with run N) against the
agent's ``running`` list, so a retried sync or a repeated report changes
nothing twice. Everything is keyed by ``(job_id, run)``: a report for an old
run of a requeued job is recorded once and otherwise ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_SYNC_WAIT_S = 30.0
MAX_RETRY_S = 30.0
"""The longest an agent waits between attempts to reach its controller: a controller
that restarts gives every node this long beyond the heartbeat timeout to come back."""
MAX_RUNS_PER_NODE = 100_000
KILL_RESEND_S = 30.0
"""A kill not yet acted on (the run still lives) is sent again this long after."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunRef(_Request):
    """One run an agent holds: the job and its run number (1 for the first start)."""

    job_id: str = Field(..., min_length=1, max_length=64)
    run: int = Field(..., ge=1)


class AgentRegister(_Request):
    """An agent's start: its node's inventory and the runs it still holds.

    ``inventory`` is one node in the cluster file's ``[[nodes]]`` group format
    as JSON (``names`` is the single node name, the same as the URL's node);
    GPU UUIDs go in ``gpu_uuids`` in index order, since the cluster file has
    no place for them. ``running`` lets a restarted agent (or a restarted
    controller) reconcile at once. ``facts`` and ``differences`` come from
    NVML discovery (empty without NVML).
    """

    inventory: dict[str, Any]
    gpu_uuids: list[str] = Field(default_factory=list, max_length=1024)
    running: list[RunRef] = Field(default_factory=list, max_length=MAX_RUNS_PER_NODE)
    agent_version: str = Field("", max_length=64)
    facts: dict[str, Any] = Field(
        default_factory=dict,
        description="what NVML and the host report: driver, cuda, hostname, kernel, os, "
        "cpus, memory_mib and per-GPU uuid, name, memory, MIG, NVLink peers, NUMA node",
    )
    differences: list[str] = Field(
        default_factory=list,
        max_length=1024,
        description="where the declared inventory and the discovered node disagree",
    )


class RegisterReply(BaseModel):
    """The controller's answer to a registration."""

    node: str
    state: str = Field(description="the node's state: idle, mixed, allocated, drain, down")
    heartbeat_interval_s: float


RunCause = Literal["exited", "time_limit", "killed", "failed_to_start", "node_fail"]
"""Why a run ended: by itself, at its time limit, by a kill, it never started, or the
node could not start or follow it (its state directory failed: not the job's doing)."""


class RunReport(_Request):
    """How one run ended on the node.

    ``state`` is how the process ended: ``exited`` with ``exit_code``;
    ``signalled``: it died of ``signal``; ``failed_to_start``: it never ran
    (bad workdir, missing executable, or killed before it started), with
    ``message`` saying why. ``at`` is the Unix time it happened, on the node.

    ``cause`` is why it ended, whatever the exit: ``exited`` (by itself),
    ``time_limit`` (the agent stopped it at its limit, even if it then
    exited 0), ``killed`` (a kill the controller asked for, or the agent's
    own stop), ``failed_to_start``, ``node_fail`` (the node could not start
    the run or keep track of it, as when its state directory is full: the
    controller ends it NODE_FAIL and requeues it as it would on a lost node).
    ``None`` from an agent that does not say; the controller then takes a
    signal after the limit as the limit.
    """

    job_id: str = Field(..., min_length=1, max_length=64)
    run: int = Field(..., ge=1)
    state: Literal["exited", "signalled", "failed_to_start"]
    exit_code: int | None = Field(None, ge=0, le=255)
    signal: int | None = Field(None, ge=1, le=128)
    at: float = Field(..., ge=0)
    message: str = Field("", max_length=4096)
    cause: RunCause | None = None


class GpuReading(_Request):
    """One GPU's state when the agent synced: from NVML, or from the node's declared
    telemetry file where there is no NVML (``docs/agent.md``).

    Counters are NVML's: ``throttle_reasons`` is the clocks-event bitmask,
    ``ecc_*_volatile`` count since the driver loaded, ``remap_*`` are rows
    remapped (``remap_pending``: a remap waits for a GPU reset). ``xid_last``
    is the last XID the agent saw (0: none), ``xid_count`` how many it saw
    since it started. ``healthy`` and ``health_reason`` are the agent's
    verdict (``agent/health.py``): an unhealthy GPU is masked. ``util_pct``,
    ``temp_c`` and ``power_w`` are None where they cannot be read (NVML has no
    utilisation for a MIG-partitioned GPU; a declared file may leave any out):
    a missing reading must not look idle, cold or unpowered.
    """

    index: int = Field(..., ge=0, le=1023)
    uuid: str = Field("", max_length=128)
    model: str = Field("", max_length=128)
    util_pct: float | None = Field(None, ge=0.0, le=100.0)
    mem_used_mib: int = Field(0, ge=0)
    mem_free_mib: int = Field(0, ge=0)
    temp_c: float | None = None
    power_w: float | None = Field(None, ge=0.0)
    throttle_reasons: int = Field(0, ge=0)
    ecc_sbe_volatile: int = Field(0, ge=0)
    ecc_dbe_volatile: int = Field(0, ge=0)
    xid_last: int = Field(0, ge=0)
    xid_count: int = Field(0, ge=0)
    remap_correctable: int = Field(0, ge=0)
    remap_uncorrectable: int = Field(0, ge=0)
    remap_pending: bool = False
    remap_failure: bool = False
    healthy: bool = True
    health_reason: str = Field("", max_length=512)


class Checkpointed(_Request):
    """A run's latest checkpoint: when (Unix time, on the node) it last touched
    ``$GPUFLEET_CHECKPOINT_MARK``."""

    job_id: str = Field(..., min_length=1, max_length=64)
    run: int = Field(..., ge=1)
    at: float = Field(..., ge=0)


class NodeHealth(_Request):
    """The agent's latest health verdict (``agent/checks.py``).

    ``ok`` False drains the node with ``reason``; ``ok`` again resumes a node
    that its health drained (never an operator's drain). ``masked_gpus`` are
    GPUs unhealthy in a way that spares the rest of the node. ``remediation``
    says what the remediation command did, when it ran before this verdict.
    """

    ok: bool
    reason: str = Field("", max_length=1024)
    masked_gpus: list[int] = Field(default_factory=list, max_length=1024)
    remediation: str = Field("", max_length=1024)
    at: float = Field(0.0, ge=0)


class MigChange(BaseModel):
    """Re-cut GPU ``gpu`` (its index on the node) to ``layout``: instances as
    ``PROFILE@START`` (``core.mig``), or None to turn MIG off. Nothing runs on it."""

    gpu: int = Field(..., ge=0, le=1023)
    layout: list[str] | None


class MigDone(_Request):
    """What the agent did for a ``MigChange``, reported until acknowledged.

    ``commands`` are the ``nvidia-smi`` argument lists for the change;
    ``applied`` says whether they ran (False: a dry run, which only reports
    them); ``error`` is non-empty when one failed (the GPU is then left as
    the failed command left it).
    """

    gpu: int = Field(..., ge=0, le=1023)
    layout: list[str] | None = Field(..., max_length=8)
    commands: list[list[str]] = Field(default_factory=list, max_length=64)
    applied: bool = False
    error: str = Field("", max_length=4096)


class AgentSync(_Request):
    """One sync: what runs now, what ended, and how long the agent will wait for work.

    ``gpus`` are the node's GPU readings at the sync; an agent that sends none
    (an older one, or a sync that only flushes reports) leaves the last ones.
    ``checkpoints`` are the latest checkpoints of the runs held, ``health``
    the latest verdict of the node's checks (None: none has run yet).
    ``mig_done`` reports the MIG changes carried out (or dry-run) since the
    last acknowledged sync.
    """

    running: list[RunRef] = Field(default_factory=list, max_length=MAX_RUNS_PER_NODE)
    reports: list[RunReport] = Field(default_factory=list, max_length=MAX_RUNS_PER_NODE)
    wait_s: float = Field(0.0, ge=0.0, le=MAX_SYNC_WAIT_S)
    gpus: list[GpuReading] = Field(default_factory=list, max_length=1024)
    checkpoints: list[Checkpointed] = Field(default_factory=list, max_length=MAX_RUNS_PER_NODE)
    health: NodeHealth | None = None
    mig_done: list[MigDone] = Field(default_factory=list, max_length=1024)


class JobLaunch(BaseModel):
    """One run to start. Exactly one of ``argv`` and ``script`` is set.

    Paths are absolute (the controller expanded Slurm's ``%j``-style patterns
    and resolved them against ``workdir``). ``gpu_uuids`` are the GPUs (or MIG
    instances) of this node the run may see. ``time_limit_s`` is enforced by
    the agent: at the limit it sends SIGTERM, then SIGKILL after
    ``kill_grace_s`` (0: no limit, the job's ``UNLIMITED``). ``signal`` is the
    user's ``--signal`` spec (``[B:]SIG[@seconds]``), sent that long before the
    limit.
    """

    job_id: str
    run: int
    name: str = ""
    user: str
    argv: list[str] | None = None
    script: str | None = None
    workdir: str
    env: dict[str, str] = Field(default_factory=dict)
    stdout_path: str
    stderr_path: str
    time_limit_s: int
    kill_grace_s: int
    gpu_uuids: list[str] = Field(default_factory=list)
    gpu_milli: int = Field(0, description="the share of the one GPU, for a fractional run")
    gpu_memory_mib: int = Field(0, description="the GPU memory of that share (0: not asked)")
    cpu_milli: int = 0
    memory_mib: int = 0
    signal: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None
    node_rank: int = Field(0, description="this node's place in a gang, 0-based")
    node_list: list[str] = Field(default_factory=list, description="all nodes of the run")
    checkpoint_dir: str = Field(
        "", description="the job's checkpoint directory, the same for every run of the job"
    )
    container: str | None = Field(None, description="the image to run the job in, if any")


class JobKill(BaseModel):
    """Stop one run: send ``signal`` now, SIGKILL after ``grace_s`` if it still lives.

    Sent for a run whether or not the agent's last sync held it: an agent
    that has not started the run (its start may still be on the way) must
    never start it, and reports it ended (``failed_to_start``, cause
    ``killed``). The controller sends a kill once per request (and again
    only if the run still lives ``KILL_RESEND_S`` later), so an agent acts
    on each one it gets; repeating one is harmless.
    """

    job_id: str
    run: int
    signal: str = "TERM"
    grace_s: int = 0
    reason: str = ""


class SyncReply(BaseModel):
    """What the agent should do now; the lists are empty when there is nothing new.

    ``mig_changes`` are sent on every sync until the agent reports them done.
    """

    jobs_to_start: list[JobLaunch] = Field(default_factory=list)
    jobs_to_kill: list[JobKill] = Field(default_factory=list)
    mig_changes: list[MigChange] = Field(default_factory=list)
    heartbeat_interval_s: float
    node_state: str = ""
