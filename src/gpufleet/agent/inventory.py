"""The node's inventory: one node of a cluster file, sent on registration.

An agent reads a cluster file (``docs/cluster-file.md``) holding its own
node, usually one ``[[nodes]]`` group naming just this host. The controller
receives that node's group as JSON, with ``names`` narrowed to the one node.
Where NVML works the agent also discovers the node (``agent.discover``):
without a file it registers what it found; with one it registers the file
and reports where the two differ. Without either, a missing file is an
error that says whether this host seems to have GPUs to declare.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpufleet.adapters.inventory import ClusterFileError, nodes_from_groups
from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.agent.discover import NodeFacts, differences, discover, discovered_group
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
    facts: NodeFacts | None = None
    differences: tuple[str, ...] = ()

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        """What to register as the GPUs' UUIDs: NVML's when it found as many GPUs as
        declared, else their indices (``CUDA_VISIBLE_DEVICES`` takes either)."""
        if self.facts is not None and len(self.facts.gpus) == len(self.node.gpus):
            return tuple(g.uuid for g in self.facts.gpus)
        return tuple(str(g.index) for g in self.node.gpus)


def nvidia_gpu_count() -> int:
    """GPUs the NVIDIA driver lists on this host (0 without the driver)."""
    try:
        return sum(1 for _ in NVIDIA_PROC.iterdir())
    except OSError:
        return 0


def read_inventory(path: Path, node: str | None = None, nvml: Any = None) -> Inventory:
    """Read ``path`` and pick this host's node; with ``nvml`` (an initialised
    ``pynvml``), discover the node too.

    The node is ``node`` when given; otherwise the file's only node, or the
    one named like this host (its short or full host name). Without the file,
    the node NVML discovers. Raise InventoryError saying what is wrong.
    """
    if not path.exists() and nvml is not None:
        facts = discover(nvml)
        try:
            group = discovered_group(facts, node or socket.gethostname().split(".")[0])
            found = nodes_from_groups([group], "NVML")[0]
        except (ValueError, ClusterFileError) as e:
            raise InventoryError(f"{path}: no such file; {e}") from None
        return Inventory(node=found, group=group, source=path, facts=facts)
    if not path.exists():
        gpus = nvidia_gpu_count()
        found_gpus = (
            f"this host has {gpus} NVIDIA GPUs, but NVML cannot read them: "
            "declare them in an inventory file (docs/agent.md)"
            if gpus
            else "no GPU was found on this host to describe either"
        )
        raise InventoryError(f"{path}: no such file; {found_gpus}")
    declared = _read_file(path, node)
    if nvml is None:
        return declared
    facts = discover(nvml)
    return replace(declared, facts=facts, differences=tuple(differences(declared.node, facts)))


def _read_file(path: Path, node: str | None) -> Inventory:
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
