"""The node's declared inventory: one node of a cluster file, sent on registration.

An agent reads a cluster file (``docs/cluster-file.md``) holding its own
node, usually one ``[[nodes]]`` group naming just this host. The controller
receives that node's group as JSON, with ``names`` narrowed to the one node.
Discovering GPUs through NVML is not built yet, so a missing file is an
error that says whether this host seems to have GPUs to declare.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.adapters.inventory import ClusterFileError, nodes_from_groups
from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.core.model import Node

NVIDIA_PROC = Path("/proc/driver/nvidia/gpus")


class InventoryError(ValueError):
    """An inventory that cannot be used (one line, naming the file)."""


@dataclass(frozen=True)
class Inventory:
    """This node as declared: its ``Node``, its group table to register with, and the file."""

    node: Node
    group: dict[str, Any]
    source: Path = Path()

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        """What to register as the GPUs' UUIDs until NVML discovery reads the real ones:
        their indices, which ``CUDA_VISIBLE_DEVICES`` accepts as well."""
        return tuple(str(g.index) for g in self.node.gpus)


def nvidia_gpu_count() -> int:
    """GPUs the NVIDIA driver lists on this host (0 without the driver)."""
    try:
        return sum(1 for _ in NVIDIA_PROC.iterdir())
    except OSError:
        return 0


def read_inventory(path: Path, node: str | None = None) -> Inventory:
    """Read ``path`` and pick this host's node.

    The node is ``node`` when given; otherwise the file's only node, or the
    one named like this host (its short or full host name). Raise
    InventoryError saying what is wrong.
    """
    if not path.exists():
        gpus = nvidia_gpu_count()
        found = (
            f"this host has {gpus} NVIDIA GPUs, but discovering them is not built yet: "
            "declare them in an inventory file (docs/agent.md)"
            if gpus
            else "no GPU was found on this host to describe either"
        )
        raise InventoryError(f"{path}: no such file; {found}")
    try:
        doc = read_toml(path)
        for key in doc:
            if key != "nodes":
                raise ClusterFileError(path, None, key, "unknown key (known: nodes)")
        groups = doc.get("nodes")
        if not isinstance(groups, list) or not groups:
            raise ClusterFileError(path, None, "nodes", "declare this node in a [[nodes]] group")
        nodes = nodes_from_groups(groups, path)
    except (UnreadableToml, ClusterFileError) as e:
        raise InventoryError(str(e)) from None
    by_name = {n.name: n for n in nodes}
    if node is None:
        host = socket.gethostname()
        candidates = [host, host.split(".")[0]] if len(nodes) > 1 else [nodes[0].name]
        node = next((c for c in candidates if c in by_name), None)
        if node is None:
            declared = ", ".join(by_name)
            raise InventoryError(f"{path}: declares {declared}, not {host}; pick one with --node")
    elif node not in by_name:
        raise InventoryError(f"{path}: does not declare node {node!r}")
    # The group that declared the node, narrowed to it.
    for table in groups:
        for member in nodes_from_groups([table], path):
            if member.name == node:
                return Inventory(node=member, group={**table, "names": node}, source=path)
    raise AssertionError("every node comes from a group")
