"""Autoscaling: when a node pool grows and when it shrinks (the ``Autoscaler`` point).

A driver hands the autoscaler a ``ScaleView`` (the pools, each pool node's
state, the jobs waiting for resources and since when) and gets back a
``ScaleDecision``: how many nodes to create per pool, which idle nodes to
delete, and the time at which the answer may next change with nothing but
the clock moving (the driver wakes it then). It is pure and deterministic:
the same view gives the same decision. The ``[autoscale]`` table of the
policy file picks the plugin and its knobs (``AutoscaleArgs``)::

    [autoscale]
    policy = "demand"
    pending_s = 120     # demand counts once a job has waited this long
    idle_s = 600        # a node idle this long goes (never below min_nodes)
    max_step = 0        # most nodes one decision creates per pool; 0: no cap
    [autoscale.max_nodes]
    burst = 4           # a lower cap on a pool's size than its own max_nodes

A policy window (``policies.windows``) may change any of these by the
hour: a shorter ``idle_s`` or a lower cap at night, say.

**demand** (``DemandScaler``). *Up*: a job counts as demand when the last
cycle left it waiting for capacity (``Resources``, ``Priority`` or
``ReqNodeNotAvail``) and it has
waited ``pending_s`` since it was queued; it is then placed, oldest first,
on a cluster made of the pool nodes that are booting or idle followed by
every node the pools may still add, cheapest pool first, with the first-fit
placer and only on the nodes of pools that serve its partition and meet its
constraints (gang members on distinct nodes, MIG, shares: the placer's own
fit). Each pool grows by the fresh nodes that took a job, never past its
size cap: the pool's ``max_nodes``, or the table's lower ``max_nodes`` for
it (never below the pool's ``min_nodes``); a pool above a cap lowered
meanwhile grows no more and shrinks as its nodes fall idle. A job no pool
node could ever hold makes nothing grow.
*Down*: a pool node idle (up, no run, no planned start) for ``idle_s`` is
deleted, longest idle first, while the pool keeps more than ``min_nodes``
and does not grow in the same decision. A pool below ``min_nodes`` grows to
it without demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Annotated, ClassVar, Literal, Protocol

import numpy as np
from pydantic import Field

from gpufleet.core.constraints import node_mask
from gpufleet.core.cycle import NodeMask
from gpufleet.core.job import Job, Partition
from gpufleet.core.model import Node
from gpufleet.core.placement import PlacementProfile, Placer
from gpufleet.core.plan import NODE_NOT_AVAIL, PRIORITY, RESOURCES
from gpufleet.core.pools import NodePool
from gpufleet.core.state import ClusterState
from gpufleet.policies.placement.fit import FirstFit
from gpufleet.policies.tables import StrictTable

CAPACITY_REASONS = frozenset({RESOURCES, PRIORITY, NODE_NOT_AVAIL})
"""Pending reasons that more nodes may cure (ReqNodeNotAvail: no node up could ever
hold it, as with an empty pool); limits, holds and dependencies are not."""


class AutoscaleArgs(StrictTable):
    """The ``[autoscale]`` table (module docstring)."""

    policy: Literal["demand"] = "demand"
    pending_s: int = Field(120, ge=0, description="a job must wait this long to count as demand")
    idle_s: int = Field(600, ge=0, description="a node idle this long is deleted")
    max_step: int = Field(0, ge=0, description="most nodes created per pool at once; 0: no cap")
    max_nodes: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict,
        description="per pool: a cap on its nodes below its own max_nodes (never below min_nodes)",
    )

    def cap(self, pool: NodePool) -> int:
        """The most nodes ``pool`` may have under these settings."""
        lower = self.max_nodes.get(pool.name, pool.max_nodes)
        return max(pool.min_nodes, min(pool.max_nodes, lower))


@dataclass(frozen=True, slots=True)
class PoolNode:
    """A node of a pool as the driver sees it.

    ``booting``: asked for, not yet joined. ``idle_since``: when it was last
    seen with no run on it (None while busy or booting). ``planned``: a
    waiting job's planned start names it.
    """

    name: str
    pool: str
    booting: bool = False
    idle_since: int | None = None
    planned: bool = False


@dataclass(frozen=True, slots=True)
class Waiting:
    """A pending job, since when it waits, and the reason the last cycle gave it."""

    job: Job
    since: int
    reason: str


@dataclass(frozen=True)
class ScaleView:
    """What one decision reads; ``pools`` in declaration order."""

    now: int
    pools: Sequence[NodePool]
    nodes: Sequence[PoolNode]
    waiting: Sequence[Waiting]
    partitions: Mapping[str, Partition]


@dataclass(frozen=True)
class ScaleDecision:
    """Nodes to create per pool, pool nodes to delete, and when to ask again (None: on
    the next event only)."""

    create: dict[str, int] = field(default_factory=dict)
    delete: tuple[str, ...] = ()
    wake: int | None = None


class Autoscaler(Protocol):
    """The autoscaling extension point: pure, deterministic, one method.

    ``decide`` may read only the view; it never deletes a booting, busy or
    planned node, never takes a pool below ``min_nodes`` nor above
    ``max_nodes``. Asked twice with the same view it answers the same, so a
    driver must apply a decision (the next view shows it) before asking again.
    """

    NAME: ClassVar[str]

    def decide(self, view: ScaleView) -> ScaleDecision: ...


class DemandScaler:
    """Grow on persistent demand a new node could serve; shrink after idle time."""

    NAME: ClassVar[str] = "demand"

    def __init__(self, args: AutoscaleArgs | None = None) -> None:
        self.args = args or AutoscaleArgs()

    def decide(self, view: ScaleView) -> ScaleDecision:
        count: dict[str, int] = {p.name: 0 for p in view.pools}
        for n in view.nodes:
            count[n.pool] = count.get(n.pool, 0) + 1
        create = {p.name: p.min_nodes - count[p.name] for p in view.pools}
        due = [w for w in view.waiting if w.reason in CAPACITY_REASONS]
        ripe = [w for w in due if view.now - w.since >= self.args.pending_s]
        for name, more in self._demand(view, ripe, count).items():
            create[name] = max(create[name], more)
        step = self.args.max_step
        create = {name: min(n, step) if step else n for name, n in create.items() if n > 0}
        delete, idle_wake = self._idle(view, count, set(create))
        wakes = [w.since + self.args.pending_s for w in due if w not in ripe]
        if idle_wake is not None:
            wakes.append(idle_wake)
        return ScaleDecision(create, tuple(delete), min(wakes, default=None))

    def _demand(
        self, view: ScaleView, ripe: Sequence[Waiting], count: Mapping[str, int]
    ) -> dict[str, int]:
        """Fresh nodes per pool that the ripe demand would take (module docstring)."""
        if not ripe:
            return {}
        pools = {p.name: p for p in view.pools}
        ready = [
            n
            for n in view.nodes
            if n.pool in pools and (n.booting or (n.idle_since is not None and not n.planned))
        ]
        fresh: list[tuple[NodePool, Node]] = []
        order = sorted(enumerate(view.pools), key=lambda ip: (ip[1].price_gpu_hour, ip[0]))
        taken = {m.name for m in view.nodes}
        for _, pool in order:
            free = (n for n in pool.names() if n not in taken)
            room = max(0, self.args.cap(pool) - count[pool.name])
            fresh += [(pool, pool.node(name)) for name in islice(free, room)]
        if not fresh:
            return {}
        nodes = [pools[n.pool].node(n.name) for n in ready] + [node for _, node in fresh]
        state = ClusterState(nodes)
        of_pool = np.array([n.pool for n in nodes], dtype=object)
        used = np.zeros(len(nodes), dtype=np.bool_)
        serving: dict[str, np.ndarray] = {}
        for w in sorted(ripe, key=lambda w: (w.since, w.job.id)):
            job = w.job
            partition = view.partitions.get(job.partition)
            if partition is None:
                continue
            mask = serving.get(partition.name)
            if mask is None:
                names = [p.name for p in view.pools if serves(p, partition)]
                mask = serving[partition.name] = np.isin(of_pool, names)
            if job.nodelist or job.exclude or job.constraint:
                mask = mask & node_mask(state, job.nodelist, job.exclude, job.constraint)
            if not mask.any():
                continue
            first_fit = PlacementProfile("autoscale", [(FirstFit(), 1.0)], [NodeMask(mask)])
            placed = Placer(first_fit).place(state, job.request)
            if placed is None:
                continue
            for a in placed:
                used[a.node] = True
        grow: dict[str, int] = {}
        for i in np.flatnonzero(used[len(ready) :]).tolist():
            name = fresh[i][0].name
            grow[name] = grow.get(name, 0) + 1
        return grow

    def _idle(
        self, view: ScaleView, count: Mapping[str, int], growing: set[str]
    ) -> tuple[list[str], int | None]:
        """Idle nodes past ``idle_s`` to delete (none of a ``growing`` pool), and when
        the next one will be."""
        left = dict(count)
        mins = {p.name: p.min_nodes for p in view.pools}
        idle = sorted(
            (n for n in view.nodes if n.idle_since is not None and not n.booting and not n.planned),
            key=lambda n: (n.idle_since, n.name),
        )
        delete: list[str] = []
        wake: int | None = None
        for n in idle:
            assert n.idle_since is not None
            if n.pool not in mins or n.pool in growing or left[n.pool] <= mins[n.pool]:
                continue
            at = n.idle_since + self.args.idle_s
            if at <= view.now:
                delete.append(n.name)
                left[n.pool] -= 1
            elif wake is None or at < wake:
                wake = at
        return delete, wake


def serves(pool: NodePool, partition: Partition) -> bool:
    """May the partition's jobs make ``pool`` grow? Its nodes must be the partition's
    (all nodes, the pool among its ``pools``, or a pool node among its ``nodes``) and
    the pool must list it, unless it lists none."""
    if pool.partitions and partition.name not in pool.partitions:
        return False
    if not partition.nodes and not partition.pools:
        return True
    return pool.name in partition.pools or any(pool.owns(n) for n in partition.nodes)


def autoscaler(args: AutoscaleArgs | None) -> Autoscaler:
    """The plugin ``args.policy`` names (the defaults' without an ``[autoscale]`` table)."""
    args = args or AutoscaleArgs()
    match args.policy:
        case "demand":
            return DemandScaler(args)
