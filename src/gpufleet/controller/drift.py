"""Driver and CUDA versions that differ across a partition.

Jobs of one partition expect its nodes to behave alike; a node left on an
older driver after an upgrade breaks that quietly. When an agent registers
with what NVML reported (``AgentRegister.facts``), its versions are compared
with those of the partition's other nodes, and a difference is reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.core.job import Partition
from gpufleet.core.model import Node

VERSIONS = ("driver", "cuda")


def in_partition(p: Partition, node: Node) -> bool:
    return (not p.nodes and not p.pools) or node.name in p.nodes or node.pool in p.pools


def drift(
    node: Node,
    facts: Mapping[str, Mapping[str, Any]],
    nodes: Iterable[Node],
    partitions: Iterable[Partition],
) -> list[str]:
    """How ``node``'s versions differ from the most common ones of each partition it is
    in, among the nodes whose facts are known; empty when they agree."""
    mine = facts.get(node.name) or {}
    out = []
    for p in partitions:
        if not in_partition(p, node):
            continue
        peers = [n.name for n in nodes if n.name != node.name and in_partition(p, n)]
        for key in VERSIONS:
            seen = Counter(str(facts[n][key]) for n in peers if facts.get(n, {}).get(key))
            if key not in mine or not seen:
                continue
            common, _ = seen.most_common(1)[0]
            if str(mine[key]) != common:
                out.append(
                    f"partition {p.name}: {key} {mine[key]}, most of its nodes have {common}"
                )
    return out
