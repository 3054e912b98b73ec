"""Node pools: groups of identical nodes a provider creates and deletes on demand.

A pool declares the node it makes (``template``: GPUs, model, CPUs,
memory, labels), how many of them may exist (``min_nodes``..``max_nodes``),
how long one takes from the request to its first job (``boot_s``), what
each of its GPUs costs per hour while the node exists (``price_gpu_hour``)
and which partitions' jobs may make it grow (``partitions``; empty: every
partition whose nodes include the pool's; ``policies.autoscale.serves``).
It is plain data: the agent reads cluster files without the scheduler. Its nodes are named
``NAME-01``, ``NAME-02``, ... (zero-padded to the width of ``max_nodes``),
the lowest free number first, and carry ``pool = NAME``, so a partition
selects them with ``pools``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from gpufleet.core.model import InvalidSpec, Node


@dataclass(frozen=True, slots=True)
class NodePool:
    """One pool (module docstring). ``template.name`` is not used."""

    name: str
    template: Node
    min_nodes: int = 0
    max_nodes: int = 1
    boot_s: int = 0
    price_gpu_hour: float = 0.0
    partitions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidSpec("pool.name", "must not be empty")
        if self.min_nodes < 0:
            raise InvalidSpec("min_nodes", f"must be zero or more, got {self.min_nodes}")
        if self.max_nodes < max(1, self.min_nodes):
            raise InvalidSpec(
                "max_nodes", f"must be at least 1 and min_nodes, got {self.max_nodes}"
            )
        if self.boot_s < 0:
            raise InvalidSpec("boot_s", f"must be zero or more, got {self.boot_s}")
        if self.price_gpu_hour < 0:
            raise InvalidSpec("price_gpu_hour", f"must be zero or more, got {self.price_gpu_hour}")

    def node_name(self, number: int) -> str:
        """The name of the pool's node ``number`` (1..max_nodes)."""
        return f"{self.name}-{number:0{len(str(self.max_nodes))}d}"

    def names(self) -> Iterator[str]:
        """Every name a node of the pool may have, in the order they are given out."""
        return (self.node_name(k) for k in range(1, self.max_nodes + 1))

    def owns(self, name: str) -> bool:
        """Is ``name`` one of this pool's node names?"""
        head, dash, number = name.rpartition("-")
        width = len(str(self.max_nodes))
        return (
            dash == "-"
            and head == self.name
            and len(number) == width
            and number.isdigit()
            and 1 <= int(number) <= self.max_nodes
        )

    def node(self, name: str) -> Node:
        """The template as the node ``name`` of this pool."""
        return replace(self.template, name=name, pool=self.name)

    @property
    def gpus_per_node(self) -> float:
        """Whole GPUs of one node (a MIG-enabled GPU counts as one)."""
        return len(self.template.gpus)

    def price_per_s(self) -> float:
        """What one node of the pool costs per second while it exists."""
        return self.gpus_per_node * self.price_gpu_hour / 3600.0
