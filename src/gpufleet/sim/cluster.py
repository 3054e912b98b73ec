"""The ``--cluster`` argument of the simulator commands, read into nodes."""

from __future__ import annotations

from pathlib import Path

from gpufleet.adapters.inventory import load_cluster
from gpufleet.core.model import Node
from gpufleet.sim.openb import DEFAULT_NODES, bundled, load_nodes


def load_cluster_arg(cluster: str) -> list[Node]:
    """``openb`` (the bundled node list), a cluster file (``*.toml``) or an openb node list CSV.

    Raises the loaders' one-line errors (``TraceError``, ``ClusterFileError``).
    """
    if cluster == "openb":
        return load_nodes(bundled(DEFAULT_NODES))
    path = Path(cluster)
    return load_cluster(path) if path.suffix == ".toml" else load_nodes(path)
