"""The latest GPU readings of each node, as its agent last sent them.

Kept in memory only: readings are a gauge, refreshed at every heartbeat,
and a restarted controller has them again after one heartbeat interval.
Readers (``/metrics``, the dashboard) take a snapshot; nothing here blocks
the scheduling lock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from gpufleet.api.agent_schemas import GpuReading


@dataclass(frozen=True)
class NodeReadings:
    """One node's GPUs at ``at`` (the controller's clock when the sync came)."""

    node: str
    at: float
    gpus: tuple[GpuReading, ...]


class ReadingsBoard:
    """The last readings per node; safe to use from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeReadings] = {}

    def record(self, node: str, at: float, gpus: Sequence[GpuReading]) -> None:
        """Keep ``gpus`` as the node's readings; an empty list keeps the last ones."""
        if not gpus:
            return
        readings = NodeReadings(node=node, at=at, gpus=tuple(gpus))
        with self._lock:
            self._nodes[node] = readings

    def snapshot(self) -> dict[str, NodeReadings]:
        with self._lock:
            return dict(self._nodes)
