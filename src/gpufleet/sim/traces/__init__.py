"""Workload traces for the simulator, read into neutral ``TraceJob`` records.

``load_trace("FORMAT:PATH[,KEY=VALUE...]")`` picks the loader by format name
(``FORMATS``) and hands it the options the spec gives (``traces.spec``);
``synthetic:n_jobs=N,seed=S,gpus_total=G[,option=value...]`` generates a
workload instead of reading one. Every loader returns jobs ordered by submit
time and raises ``TraceError`` (a ValueError) naming the file, row and field
of a malformed value. ``docs/traces.md`` describes each format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces import spec as specs
from gpufleet.sim.traces.gavel import GavelOptions, load_gavel
from gpufleet.sim.traces.generic import GenericOptions, load_generic
from gpufleet.sim.traces.history import dump_history, load_history
from gpufleet.sim.traces.openb_timed import load_openb_timed
from gpufleet.sim.traces.pai import PaiOptions, load_pai
from gpufleet.sim.traces.philly import PhillyOptions, load_philly
from gpufleet.sim.traces.record import TraceJob
from gpufleet.sim.traces.sacct import SacctOptions, load_sacct
from gpufleet.sim.traces.swf import SwfMapping, load_swf
from gpufleet.sim.traces.synthetic import generate, generate_from_options
from gpufleet.sim.traces.tiresias import TiresiasOptions, load_tiresias


@dataclass(frozen=True)
class TraceFormat:
    """A loader and the model of the options it takes (``NoOptions``: none)."""

    load: Callable[[Path, Any], list[TraceJob]]
    options: type[BaseModel] = specs.NoOptions


def _plain(load: Callable[[Path], list[TraceJob]]) -> Callable[[Path, Any], list[TraceJob]]:
    return lambda path, _options: load(path)


FORMATS: dict[str, TraceFormat] = {
    "openb": TraceFormat(_plain(load_openb_timed)),
    "swf": TraceFormat(load_swf, SwfMapping),
    "tiresias": TraceFormat(load_tiresias, TiresiasOptions),
    "philly": TraceFormat(load_philly, PhillyOptions),
    "gavel": TraceFormat(load_gavel, GavelOptions),
    "pai": TraceFormat(load_pai, PaiOptions),
    "sacct": TraceFormat(load_sacct, SacctOptions),
    "generic": TraceFormat(load_generic, GenericOptions),
    "history": TraceFormat(_plain(load_history)),
}
"""Format name -> its loader and options."""

SYNTHETIC = "synthetic"


def load_trace(spec: str) -> list[TraceJob]:
    """Jobs of a ``FORMAT:PATH[,KEY=VALUE...]`` spec (or ``synthetic:OPTIONS``), by submit time."""
    name, colon, rest = spec.partition(":")
    if name == SYNTHETIC and colon and rest:
        return generate_from_options(rest)
    name, path, pairs = specs.split(spec)
    trace_format = FORMATS.get(name)
    if trace_format is None:
        known = ", ".join([*FORMATS, SYNTHETIC])
        raise TraceError(spec, None, "format", f"unknown trace format {name!r} (known: {known})")
    options = specs.parse_options(name, pairs, trace_format.options)
    return trace_format.load(Path(path), options)


def absolute_spec(spec: str) -> str:
    """``spec`` with the files it names made absolute (``traces.spec.absolute``)."""
    name = spec.partition(":")[0]
    if name not in FORMATS:
        return spec
    return specs.absolute(spec, FORMATS[name].options)


__all__ = [
    "FORMATS",
    "TraceError",
    "TraceFormat",
    "TraceJob",
    "absolute_spec",
    "dump_history",
    "generate",
    "load_trace",
]
