"""MIG layout changes between the cycle and the agents.

A cycle's plan may re-cut GPUs (``policies.migplan``); the job book begins
a change once nothing runs on the GPU (``Effects.relayouts``). The
controller then records the order in the audit log, in the cycle's
transaction, and sends it with each sync reply of the node's agent
(``SyncReply.mig_changes``) until the agent reports it done
(``AgentSync.mig_done``); the GPU takes no work meanwhile. The order is
stored (``mig_orders``) with the cycle, and a restart takes it on again
(``resume``): the rebuilt book keeps the GPU out of work and the agent is
sent the order again (an agent that did it already reports it again). A
done change gives the book the GPU's new layout and is stored in the
node's inventory in the transaction that clears the order (``cleared``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from gpufleet.adapters.store import tables as t
from gpufleet.api.agent_schemas import MigChange, MigDone
from gpufleet.core.plan import Layout
from gpufleet.engine.book import JobBook, Reconfigure

PLANNER = "scheduler"
"""Who the audit names for the orders the scheduler gives."""


def layout_text(layout: Layout) -> list[str] | None:
    """A layout as the agent protocol writes it: ``PROFILE@START`` entries, None for off."""
    return None if layout is None else [f"{p}@{s}" for p, s in layout]


def layout_of(text: Sequence[str] | None) -> Layout:
    """The layout ``layout_text`` wrote."""
    if text is None:
        return None
    return tuple((p, int(s)) for p, _, s in (entry.rpartition("@") for entry in text))


def stored(conn: sa.Connection) -> list[tuple[Reconfigure, int]]:
    """The stored orders not yet done, with when each was given."""
    rows = conn.execute(sa.select(t.mig_orders).order_by(t.mig_orders.c.node, t.mig_orders.c.gpu))
    return [(Reconfigure(r.node, r.gpu, layout_of(r.layout)), int(r.time)) for r in rows]


def cleared(node: str, gpus: Sequence[int] | None = None) -> sa.Executable:
    """Deletes the stored orders of ``node``'s ``gpus`` (done), or all of its orders (None:
    the node is gone)."""
    stmt = t.mig_orders.delete().where(t.mig_orders.c.node == node)
    return stmt if gpus is None else stmt.where(t.mig_orders.c.gpu.in_(gpus))


class MigOrders:
    """The changes begun and not yet reported done, per node and GPU."""

    def __init__(self) -> None:
        self.by_node: dict[str, dict[int, Layout]] = {}

    def order(self, changes: Sequence[Reconfigure], now: float) -> list[sa.Executable]:
        """Take on the book's new changes; the audit entries and stored orders to commit
        with the cycle."""
        rows: list[sa.Executable] = []
        for c in changes:
            self.by_node.setdefault(c.node, {})[c.gpu] = c.layout
            text = layout_text(c.layout)
            detail = {"gpu": c.gpu, "layout": text}
            rows.append(
                t.audit.insert().values(
                    time=now, who=PLANNER, action="node.mig.order", target=c.node, detail=detail
                )
            )
            rows.append(cleared(c.node, [c.gpu]))  # one a restart dropped (its node gone)
            rows.append(
                t.mig_orders.insert().values(node=c.node, gpu=c.gpu, layout=text, time=now)
            )
        return rows

    def resume(self, book: JobBook, orders: Sequence[tuple[Reconfigure, int]]) -> None:
        """Take on the ``stored`` orders again, the book's GPUs out of work till done; an
        order for a node the book lacks (gone since) is dropped."""
        self.by_node.clear()
        for c, at in orders:
            if c.node in book.state.index:
                book.resume_reconfigure(c.node, c.gpu, c.layout, at)
                self.by_node.setdefault(c.node, {})[c.gpu] = c.layout

    def drop(self, node: str) -> None:
        """The node is gone: its orders with it."""
        self.by_node.pop(node, None)

    def changes(self, node: str) -> list[MigChange]:
        """What the node's agent must still do."""
        return [
            MigChange(gpu=gpu, layout=layout_text(layout))
            for gpu, layout in sorted(self.by_node.get(node, {}).items())
        ]

    def settle(self, node: str, done: MigDone) -> bool:
        """Whether ``done`` answers an order (which it then settles); False for a report of
        an order already settled or never given (a repeat: nothing to do)."""
        orders = self.by_node.get(node, {})
        if done.gpu not in orders or layout_text(orders[done.gpu]) != done.layout:
            return False
        del orders[done.gpu]
        if not orders:
            del self.by_node[node]
        return True
