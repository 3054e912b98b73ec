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
``jobs`` still names it. A caller who is not an operator sees the ids, owner
and name of its own jobs only: other users' jobs are counted (``others``), as
``GET /v1/nodes`` counts them, so the map tells nothing about who runs what.
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
GpuKey = tuple[int, int]
"""A GPU by (node index, GPU index) in the cluster state."""
MAX_EVENTS = 100
"""A node page lists at most this many of the node's latest events."""


class MapNode(BaseModel):
    """One node of the map; its GPUs in columns, one entry per GPU in index order."""

    name: str
    state: NodeStateName
    reason: str = ""
    model: str = Field("", description="the model of its first GPU")
    gpus: list[GpuState] = Field(description="each GPU's state")
    used_milli: list[int] = Field(description="milli-GPU held by whole and shared jobs")
    mig_used: list[int] = Field(description="MIG instances held")
    mig_total: list[int] = Field(description="MIG instances configured (0: no MIG)")
    jobs: list[list[str]] = Field(
        description="ids of the jobs holding each GPU that the caller may see"
    )
    others: list[int] = Field(description="jobs of other users holding each GPU (ids not shown)")
    util_pct: list[float | None] = Field(description="utilisation at the last reading")
    health: list[str] = Field(description="why the agent judged a GPU unhealthy")


class MapJob(BaseModel):
    """A job that holds GPUs, as the map's hover shows it."""

    user: str
    account: str
    name: str


class ClusterMap(BaseModel):
    """Every node and GPU with its state and holders, and the counts the page heads with.

    A node's GPUs come in columns (``gpus``, ``used_milli``, ...) rather than
    one object each: 8,000 GPUs then cost 1,000 objects, in the server and
    on the wire.
    """

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
    with their owners, None for an operator (every job is). Built as plain
    data and validated once: a model per GPU would cost more than the rest.
    """
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    hidden: dict[tuple[str, int], int] = defaultdict(int)
    shown: dict[str, dict[str, str]] = {}
    running = pending = 0
    for job in jobs:
        if job.state == "PENDING":
            pending += 1
            continue
        running += 1
        mine = viewer is None or job.user == viewer
        for p in job.placements:
            for g in p["gpus"]:
                if mine:
                    holders[p["node"], g].append(job.job_id)
                else:
                    hidden[p["node"], g] += 1
        if mine:
            shown[job.job_id] = {"user": job.user, "account": job.account, "name": job.name}
    mig_total, mig_used = _mig_counts(state)
    milli_used = (state.gpu_milli_total - state.gpu_milli_free).tolist()
    counts = dict.fromkeys(GPU_STATES, 0)
    out = []
    for info, node_state in nodes:
        name = info.node.name
        i = state.index[name]
        seen = readings.get(name)
        by_index = {r.index: r for r in seen.gpus} if seen is not None else {}
        indices = [gpu.index for gpu in info.node.gpus]
        used = [milli_used[i][g] for g in indices]
        migs = [mig_total.get((i, g), 0) for g in indices]
        found = [by_index.get(g) for g in indices]
        states = [
            _gpu_state(node_state, r, m, u) for r, m, u in zip(found, migs, used, strict=True)
        ]
        for gpu_state in states:
            counts[gpu_state] += 1
        out.append(
            {
                "name": name,
                "state": node_state,
                "reason": info.reason,
                "model": info.node.gpus[0].model if info.node.gpus else "",
                "gpus": states,
                "used_milli": used,
                "mig_used": [mig_used.get((i, g), 0) for g in indices],
                "mig_total": migs,
                "jobs": [holders.get((name, g), []) for g in indices],
                "others": [hidden.get((name, g), 0) for g in indices],
                "util_pct": [r.util_pct if r else None for r in found],
                "health": [r.health_reason if r else "" for r in found],
            }
        )
    return ClusterMap.model_validate(
        {
            "time": now,
            "nodes": out,
            "jobs": shown,
            "gpus": counts,
            "running": running,
            "pending": pending,
        }
    )


def _gpu_state(
    node_state: str, reading: GpuReading | None, mig_total: int, used_milli: int
) -> GpuState:
    if node_state in OFFLINE_NODES:
        return "offline"
    if reading is not None and not reading.healthy:
        return "unhealthy"
    if node_state in DRAINED_NODES:
        return "draining"
    if mig_total:
        return "mig"
    if used_milli >= 1000:
        return "allocated"
    return "shared" if used_milli else "free"


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
