"""MIG layout changes between the cycle and the agents.

A cycle's plan may re-cut GPUs (``policies.migplan``); the job book begins
a change once nothing runs on the GPU (``Effects.relayouts``). The
controller then records the order in the audit log, in the cycle's
transaction, and sends it with each sync reply of the node's agent
(``SyncReply.mig_changes``) until the agent reports it done
(``AgentSync.mig_done``); the GPU takes no work meanwhile. A done change
gives the book the GPU's new layout and is stored in the node's inventory,
so a restart keeps it; an order not yet done is lost with the process,
and the book rebuilt from the store has the GPU as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from gpufleet.adapters.store import tables as t
from gpufleet.api.agent_schemas import MigChange, MigDone
from gpufleet.core.plan import Layout
from gpufleet.engine.book import Reconfigure

PLANNER = "scheduler"
"""Who the audit names for the orders the scheduler gives."""


def layout_text(layout: Layout) -> list[str] | None:
    """A layout as the agent protocol writes it: ``PROFILE@START`` entries, None for off."""
    return None if layout is None else [f"{p}@{s}" for p, s in layout]


class MigOrders:
    """The changes begun and not yet reported done, per node and GPU."""

    def __init__(self) -> None:
        self.by_node: dict[str, dict[int, Layout]] = {}

    def order(self, changes: Sequence[Reconfigure], now: float) -> list[sa.Executable]:
        """Take on the book's new changes; the audit entries to store with the cycle."""
        rows: list[sa.Executable] = []
        for c in changes:
            self.by_node.setdefault(c.node, {})[c.gpu] = c.layout
            detail = {"gpu": c.gpu, "layout": layout_text(c.layout)}
            rows.append(
                t.audit.insert().values(
                    time=now, who=PLANNER, action="node.mig.order", target=c.node, detail=detail
                )
            )
        return rows

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
