"""The smaller inputs of the benchmarks' ``--quick`` runs.

Every script in ``benchmarks/`` takes ``--quick``: the same code path on less
input, in seconds, printing the same JSON keys on its last line, so the test
suite runs each documented command (``tests/benchmarks``). Its figures say
only that the script works, not how fast or how well anything is.

The fill scripts place on every tenth node of the bundled openb node list
(122 of 1,213 nodes, the GPU models in about the same proportions; the two
A10 nodes fall out), with the full pod list.
"""

from __future__ import annotations

from pathlib import Path

from gpufleet.core.model import Node
from gpufleet.sim.openb import DEFAULT_NODES, bundled, load_nodes

NODE_STRIDE = 10


def openb_nodes(quick: bool, name: str = DEFAULT_NODES) -> list[Node]:
    """The bundled openb node list ``name``, or every tenth node of it when ``quick``."""
    nodes = load_nodes(bundled(name))
    return nodes[::NODE_STRIDE] if quick else nodes


def openb_nodes_file(quick: bool, folder: Path) -> Path:
    """The node list as a file (a sweep's workers read it): the bundled one, or when
    ``quick`` a copy in ``folder`` of its header and every tenth node's row."""
    path = bundled(DEFAULT_NODES)
    if not quick:
        return path
    header, *rows = path.read_text().splitlines(keepends=True)
    small = folder / path.name
    small.write_text(header + "".join(rows[::NODE_STRIDE]))
    return small


def fill_seeds(text: str | None, quick: bool) -> list[int]:
    """The seeds of ``--seeds FIRST-LAST`` (or one seed): 42-51 by default, 42 when ``quick``."""
    lo, _, hi = (text or ("42" if quick else "42-51")).partition("-")
    return list(range(int(lo), int(hi or lo) + 1))
