"""The fleet: the pool nodes both drivers create and delete, and what they cost.

Both drivers keep one ``Fleet`` beside their job book. After a cycle (and
when the autoscaler's wake time comes) the driver calls ``step`` with the
book, the pending reasons the cycle gave and the nodes its planned starts
name; the fleet asks the ``Autoscaler`` (``policies.autoscale``) and
returns ``Orders``: nodes to create, with their names, and pool nodes to
delete. The driver carries them out through a ``Provider`` and its own
state: a deleted node leaves the book before its provider deletes it, so no
cycle places a job on it in between; a created node joins the book when it
is up (the simulator: after the pool's ``boot_s``; the controller: when its
agent registers), and the driver then calls ``joined``.

Like the book it is pure: every time is an argument. A node is billed from
the moment it is asked for until it is deleted, at its pool's price per
GPU-hour (clouds bill the boot too). A node still booting ``boot_timeout``
after it was asked for is given up: ``step`` orders it deleted, so a failed
creation neither blocks the pool's growth nor bills forever. A driver that
restarts gives its new fleet the nodes up (``adopt``) and those still
booting, with the time each was asked for (``restore``), so it neither asks
for them again nor waits for them forever.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpufleet.core.model import Node
from gpufleet.core.pools import NodePool
from gpufleet.engine.book import JobBook
from gpufleet.policies.autoscale import Autoscaler, PoolNode, ScaleView, Waiting

BOOT_TIMEOUT_FACTOR = 3
BOOT_TIMEOUT_MIN_S = 120


def boot_timeout(pool: NodePool) -> int:
    """How long a pool node may boot before it is given up."""
    return max(BOOT_TIMEOUT_MIN_S, BOOT_TIMEOUT_FACTOR * pool.boot_s)


class Provider(Protocol):
    """Where pool nodes come from: the one interface both drivers' providers share.

    ``create`` asks for the node (``node.name`` is its name; ``node.pool``
    its pool) and returns without waiting for it: the node joins later.
    ``delete`` lets go of a node that no longer holds runs, or of one still
    booting; deleting a node that is already gone is not an error.
    """

    def create(self, pool: NodePool, node: Node, now: int) -> None: ...

    def delete(self, pool: NodePool, name: str, now: int) -> None: ...


@dataclass(slots=True)
class Member:
    """A pool node: asked for at ``created``; ``joined`` when it came up (None: booting)."""

    pool: str
    created: int
    joined: int | None = None
    idle_since: int | None = None


@dataclass(frozen=True)
class Orders:
    """What one step decided: nodes to create (each with its pool) and to delete."""

    create: list[tuple[NodePool, Node]] = field(default_factory=list)
    delete: list[tuple[NodePool, str]] = field(default_factory=list)
    wake: int | None = None


class Fleet:
    """The pools' nodes, their life and their bill (module docstring)."""

    def __init__(self, pools: Sequence[NodePool], scaler: Autoscaler) -> None:
        self.pools = {p.name: p for p in pools}
        self.order = tuple(pools)
        self.scaler = scaler
        self.members: dict[str, Member] = {}
        self.billed_s: dict[str, float] = dict.fromkeys(self.pools, 0.0)  # node-s of those gone
        self.created = 0
        self.deleted = 0

    def pool_of(self, name: str) -> NodePool | None:
        """The pool a node name belongs to (its own pool's names), or None."""
        return next((pool for pool in self.order if pool.owns(name)), None)

    def adopt(self, name: str, now: int) -> bool:
        """A pool's node that is up without this fleet having asked (the initial
        ``min_nodes``, or one that registered after a restart); False if ``name`` is
        no pool's node name."""
        if name in self.members:
            self.joined(name, now)
            return True
        pool = self.pool_of(name)
        if pool is None:
            return False
        self.members[name] = Member(pool.name, now, joined=now, idle_since=now)
        return True

    def restore(self, name: str, pool: str, created: int) -> bool:
        """A node of ``pool`` asked for at ``created`` and still booting (recorded by a
        driver that restarted): billed from then, given up ``boot_timeout`` after, even
        if its pool has shrunk below its name since. False if there is no such pool or
        ``name`` is already a member."""
        if pool not in self.pools or name in self.members:
            return False
        self.members[name] = Member(pool, created)
        return True

    def joined(self, name: str, now: int) -> None:
        """A node this fleet asked for is up (a stranger is adopted)."""
        m = self.members.get(name)
        if m is None:
            self.adopt(name, now)
        elif m.joined is None:
            m.joined = m.idle_since = now

    def observe(self, book: JobBook, now: int) -> None:
        """Note which up pool nodes are idle now, and since when."""
        index = book.state.index
        for name, m in self.members.items():
            i = index.get(name)
            if m.joined is None or i is None:
                continue
            if book.on_node[i]:
                m.idle_since = None
            elif m.idle_since is None:
                m.idle_since = now

    def step(
        self, book: JobBook, reasons: Mapping[str, str], planned: Collection[str], now: int
    ) -> Orders:
        """Ask the autoscaler and record its orders (module docstring)."""
        self.observe(book, now)
        gave_up = [
            (self.pools[m.pool], name)
            for name, m in self.members.items()
            if m.joined is None and now - m.created >= boot_timeout(self.pools[m.pool])
        ]
        for _, name in gave_up:
            self._gone(name, now)
        view = ScaleView(
            now=now,
            pools=self.order,
            nodes=[
                PoolNode(name, m.pool, m.joined is None, m.idle_since, name in planned)
                for name, m in self.members.items()
            ],
            waiting=[
                Waiting(j, max(j.submit_time, j.requeued_at or 0, j.begin_time), reasons[j.id])
                for j in book.pending.values()
                if j.id in reasons
            ],
            partitions=book.partitions,
        )
        decision = self.scaler.decide(view)
        orders = Orders(delete=gave_up, wake=decision.wake)
        for name in decision.delete:
            orders.delete.append((self.pools[self.members[name].pool], name))
            self._gone(name, now)
        for pool in self.order:
            free = (n for n in pool.names() if n not in self.members)
            for _ in range(decision.create.get(pool.name, 0)):
                name = next(free)
                self.members[name] = Member(pool.name, now)
                self.created += 1
                orders.create.append((pool, pool.node(name)))
        return orders

    def _gone(self, name: str, now: int) -> None:
        m = self.members.pop(name)
        self.billed_s[m.pool] += now - m.created
        self.deleted += 1

    def node_seconds(self, now: int) -> dict[str, float]:
        """Seconds of pool nodes billed so far, per pool."""
        out = dict(self.billed_s)
        for m in self.members.values():
            out[m.pool] += now - m.created
        return out

    def pool_costs(self, now: int) -> dict[str, float]:
        """What each pool's nodes have cost so far: node-seconds x the node's price."""
        seconds = self.node_seconds(now)
        return {name: seconds[name] * pool.price_per_s() for name, pool in self.pools.items()}

    def cost(self, now: int) -> float:
        """What every pool node has cost so far."""
        return sum(self.pool_costs(now).values())

    def counts(self) -> dict[str, tuple[int, int]]:
        """Each pool's nodes booting and up."""
        out = dict.fromkeys(self.pools, (0, 0))
        for m in self.members.values():
            booting, up = out[m.pool]
            out[m.pool] = (booting + (m.joined is None), up + (m.joined is not None))
        return out

    def gpu_hours(self, now: int) -> float:
        """GPU-hours billed so far, over all pools."""
        seconds = self.node_seconds(now)
        return sum(seconds[n] * p.gpus_per_node for n, p in self.pools.items()) / 3600.0
