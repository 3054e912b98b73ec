"""What the web dashboard reads: the cluster map in one answer, and a node's page.

The map puts every GPU of every node in one of a few states, so that a
grid of cells can be coloured without a second request:

``offline``
    the node is down or its agent has not registered yet;
``unhealthy``
    the agent's last reading says the GPU is unhealthy (``health`` says why);
``draining``
    the node is drained (its running jobs go on; nothing new starts);
``mig``
    the GPU is MIG-partitioned (``mig_used`` of ``mig_total`` instances held);
``allocated``
    a whole GPU is held; ``shared``: a share of it is (``used_milli`` < 1000);
``free``
    nothing holds it.

The first that applies wins, so a job on a drained node shows as draining;
``jobs`` still names it. A caller who is not an operator sees the owner and
name of its own jobs only: other jobs appear by id, as ``GET /v1/nodes``
shows them, so the map tells nothing more about who runs what.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, Field

from gpufleet.adapters.store import tables as t
from gpufleet.api.agent_schemas import GpuReading
from gpufleet.controller.live import LiveJob, NodeInfo
from gpufleet.controller.readings import NodeReadings
from gpufleet.controller.views import NodeOut, NodeStateName
from gpufleet.core.state import ClusterState

GpuState = Literal["free", "allocated", "shared", "mig", "draining", "unhealthy", "offline"]
GPU_STATES: tuple[GpuState, ...] = (
    "free",
    "allocated",
    "shared",
    "mig",
    "draining",
    "unhealthy",
    "offline",
)
OFFLINE_NODES = frozenset({"down", "unknown"})
DRAINED_NODES = frozenset({"drain", "draining"})
MAX_EVENTS = 100
"""A node page lists at most this many of the node's latest events."""


class MapGpu(BaseModel):
    """One GPU cell of the map."""

    index: int
    state: GpuState
    used_milli: int = Field(0, description="milli-GPU held by whole and shared jobs")
    mig_used: int = Field(0, description="MIG instances held")
    mig_total: int = Field(0, description="MIG instances configured")
    jobs: list[str] = Field(default_factory=list, description="ids of the jobs holding it")
    util_pct: float | None = Field(None, description="utilisation at the last reading")
    health: str = Field("", description="why the agent judged it unhealthy")


class MapNode(BaseModel):
    name: str
    state: NodeStateName
    reason: str = ""
    model: str = Field("", description="the model of its first GPU")
    gpus: list[MapGpu] = Field(default_factory=list)


class MapJob(BaseModel):
    """A job that holds GPUs, as the map's hover shows it."""

    user: str
    account: str
    name: str
    partition: str


class ClusterMap(BaseModel):
    """Every node and GPU with its state and holders, and the counts the page heads with."""

    time: float
    nodes: list[MapNode]
    jobs: dict[str, MapJob] = Field(
        default_factory=dict,
        description="the running jobs the caller may see (all of them for an operator)",
    )
    gpus: dict[GpuState, int] = Field(description="GPUs in each state")
    running: int = Field(description="running jobs, the whole cluster's")
    pending: int = Field(description="pending jobs, the whole cluster's")


class GpuReadingOut(BaseModel):
    """A GPU's latest reading as the agent sent it, and when it came."""

    at: float
    reading: GpuReading


class NodeEvent(BaseModel):
    """Something that happened to a node: a drain, a resume, an action on an alert."""

    time: float
    who: str
    action: str
    detail: dict[str, Any] = Field(default_factory=dict)


class NodePage(BaseModel):
    """A node, its GPUs' latest readings and its latest events, newest first."""

    node: NodeOut
    readings: list[GpuReadingOut] = Field(default_factory=list)
    events: list[NodeEvent] = Field(default_factory=list)


def cluster_map(
    nodes: Sequence[tuple[NodeInfo, str]],
    state: ClusterState,
    jobs: Iterable[LiveJob],
    readings: Mapping[str, NodeReadings],
    *,
    viewer: str | None,
    now: float,
) -> ClusterMap:
    """The map of ``nodes`` (each with the state the node list shows) over ``state``.

    ``jobs`` are the active jobs; ``viewer`` is the user whose jobs are shown
    with their owners, None for an operator (every job is).
    """
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    shown: dict[str, MapJob] = {}
    running = pending = 0
    for job in jobs:
        if job.state == "PENDING":
            pending += 1
            continue
        running += 1
        for p in job.placements:
            for g in p["gpus"]:
                holders[p["node"], g].append(job.job_id)
        if viewer is None or job.user == viewer:
            shown[job.job_id] = MapJob(
                user=job.user, account=job.account, name=job.name, partition=job.partition
            )
    mig_total, mig_used = _mig_counts(state)
    milli_used = (state.gpu_milli_total - state.gpu_milli_free).tolist()
    counts = dict.fromkeys(GPU_STATES, 0)
    out = []
    for info, node_state in nodes:
        name = info.node.name
        i = state.index[name]
        seen = readings.get(name)
        by_index = {r.index: r for r in seen.gpus} if seen is not None else {}
        cells = []
        for gpu in info.node.gpus:
            g = gpu.index
            reading = by_index.get(g)
            cell = MapGpu(
                index=g,
                state="free",
                used_milli=milli_used[i][g],
                mig_used=mig_used.get((i, g), 0),
                mig_total=mig_total.get((i, g), 0),
                jobs=holders.get((name, g), []),
                util_pct=reading.util_pct if reading is not None else None,
                health=reading.health_reason if reading is not None else "",
            )
            cell.state = _gpu_state(node_state, cell, reading)
            counts[cell.state] += 1
            cells.append(cell)
        out.append(
            MapNode(
                name=name,
                state=node_state,
                reason=info.reason,
                model=info.node.gpus[0].model if info.node.gpus else "",
                gpus=cells,
            )
        )
    return ClusterMap(
        time=now, nodes=out, jobs=shown, gpus=counts, running=running, pending=pending
    )


def _gpu_state(node_state: str, cell: MapGpu, reading: GpuReading | None) -> GpuState:
    if node_state in OFFLINE_NODES:
        return "offline"
    if reading is not None and not reading.healthy:
        return "unhealthy"
    if node_state in DRAINED_NODES:
        return "draining"
    if cell.mig_total:
        return "mig"
    if cell.used_milli >= 1000:
        return "allocated"
    return "shared" if cell.used_milli else "free"


GpuKey = tuple[int, int]
"""A GPU by (node index, GPU index) in the cluster state."""


def _mig_counts(state: ClusterState) -> tuple[dict[GpuKey, int], dict[GpuKey, int]]:
    """Per (node, GPU) index: MIG instances configured, and those held (retired ones left out)."""
    live = state.mig_profile >= 0
    keys = zip(state.mig_node[live].tolist(), state.mig_gpu[live].tolist(), strict=True)
    held = (~state.mig_free[live]).tolist()
    total: dict[GpuKey, int] = defaultdict(int)
    used: dict[GpuKey, int] = defaultdict(int)
    for key, busy in zip(keys, held, strict=True):
        total[key] += 1
        used[key] += int(busy)
    return total, used


def node_page(
    node: NodeOut, readings: NodeReadings | None, events: Sequence[NodeEvent]
) -> NodePage:
    """A node's page from its listing, its latest readings and its events."""
    seen = [GpuReadingOut(at=readings.at, reading=r) for r in readings.gpus] if readings else []
    return NodePage(node=node, readings=seen, events=list(events))


def node_events(conn: sa.Connection, name: str, limit: int = MAX_EVENTS) -> list[NodeEvent]:
    """The audited actions on node ``name`` (drains, resumes, alert actions), newest first."""
    rows = conn.execute(
        sa.select(t.audit.c.time, t.audit.c.who, t.audit.c.action, t.audit.c.detail)
        .where(t.audit.c.target == name, t.audit.c.action.startswith("node."))
        .order_by(t.audit.c.id.desc())
        .limit(limit)
    ).all()
    return [NodeEvent(time=r.time, who=r.who, action=r.action, detail=r.detail or {}) for r in rows]
