"""The ``--cluster`` and ``--trace`` arguments of the simulator commands, read."""

from __future__ import annotations

from pathlib import Path

from gpufleet.adapters.inventory import load_cluster_file
from gpufleet.core.model import Node
from gpufleet.core.pools import NodePool
from gpufleet.sim.openb import DEFAULT_NODES, TraceError, bundled, load_nodes
from gpufleet.sim.traces import TraceJob, load_trace


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


def load_inputs(
    cluster: str, trace: str, *, elastic: bool = False
) -> tuple[list[Node], list[NodePool], list[TraceJob]]:
    """What ``--cluster`` and ``--trace`` give a replay: the nodes, the cluster file's
    pools and the trace's jobs. Raises the loaders' one-line errors; a trace without
    jobs is one, and so is a cluster without pools when ``elastic`` (found before a
    long trace is read)."""
    nodes, pools = load_elastic_arg(cluster)
    if elastic and not pools:
        raise ValueError(f"--cluster: {cluster} declares no [[pools]]")
    jobs = load_trace(trace)
    if not jobs:
        raise TraceError(trace, None, None, "holds no jobs")
    return nodes, pools, jobs
