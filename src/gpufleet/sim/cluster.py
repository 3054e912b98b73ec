"""The ``--cluster`` argument of the simulator commands, read into nodes."""

from __future__ import annotations

from pathlib import Path

from gpufleet.adapters.inventory import load_cluster_file
from gpufleet.core.model import Node
from gpufleet.core.pools import NodePool
from gpufleet.sim.openb import DEFAULT_NODES, bundled, load_nodes


def load_cluster_arg(cluster: str) -> list[Node]:
    """``openb`` (the bundled node list), a cluster file (``*.toml``) or an openb node list CSV.

    Raises the loaders' one-line errors (``TraceError``, ``ClusterFileError``).
    """
    return load_elastic_arg(cluster)[0]


def load_elastic_arg(cluster: str) -> tuple[list[Node], list[NodePool]]:
    """The nodes of ``--cluster`` (as ``load_cluster_arg``) and its node pools (a
    cluster file's ``[[pools]]``; none for the other kinds)."""
    if cluster == "openb":
        return load_nodes(bundled(DEFAULT_NODES)), []
    path = Path(cluster)
    return load_cluster_file(path) if path.suffix == ".toml" else (load_nodes(path), [])
