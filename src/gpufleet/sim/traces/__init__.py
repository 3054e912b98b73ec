"""Workload traces for the simulator, read into neutral ``TraceJob`` records.

``load_trace("FORMAT:PATH")`` picks the loader by format name (``LOADERS``);
``synthetic:n_jobs=N,seed=S,gpus_total=G[,option=value...]`` generates a
workload instead of reading one. Every loader returns jobs ordered by submit
time and raises ``TraceError`` (a ValueError) naming the file, row and field
of the first malformed value. ``docs/traces.md`` describes each format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.generic import load_generic
from gpufleet.sim.traces.history import dump_history, load_history
from gpufleet.sim.traces.openb_timed import load_openb_timed
from gpufleet.sim.traces.record import TraceJob
from gpufleet.sim.traces.sacct import load_sacct
from gpufleet.sim.traces.swf import load_swf
from gpufleet.sim.traces.synthetic import generate, generate_from_options
from gpufleet.sim.traces.tiresias import load_tiresias

LOADERS: dict[str, Callable[[Path], list[TraceJob]]] = {
    "openb": load_openb_timed,
    "swf": load_swf,
    "tiresias": load_tiresias,
    "sacct": load_sacct,
    "generic": load_generic,
    "history": load_history,
}
"""Format name -> loader of a file in that format, with its default mapping."""

SYNTHETIC = "synthetic"


def load_trace(spec: str) -> list[TraceJob]:
    """Jobs of a ``FORMAT:PATH`` spec (or ``synthetic:OPTIONS``), by submit time."""
    name, colon, rest = spec.partition(":")
    if not colon or not rest:
        raise TraceError(spec, None, None, "a trace is given as FORMAT:PATH, e.g. swf:jobs.swf")
    if name == SYNTHETIC:
        return generate_from_options(rest)
    loader = LOADERS.get(name)
    if loader is None:
        known = ", ".join([*LOADERS, SYNTHETIC])
        raise TraceError(spec, None, "format", f"unknown trace format {name!r} (known: {known})")
    return loader(Path(rest))


__all__ = [
    "LOADERS",
    "TraceError",
    "TraceJob",
    "dump_history",
    "generate",
    "load_trace",
]
