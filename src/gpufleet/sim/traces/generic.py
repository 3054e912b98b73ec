"""The generic trace schema: one job per row of a CSV (or a Parquet) file.

==========================  ========  ==========================================
column                      required  meaning
==========================  ========  ==========================================
``id``                      yes       job id, unique in the trace
``submit_time``             yes       seconds from the trace's origin
``duration_s``              yes       actual runtime in seconds
``gpus``                              whole GPUs per task (default 0)
``gpu_milli``                         a fraction of one shared GPU, 1..999,
                                      instead of ``gpus``
``cpu_milli``                         milli-CPU per task (default 0)
``memory_mib``                        memory per task in MiB (default 0)
``nodes``                             tasks of a gang, one per node (default 1)
``user``, ``account``,                names (default empty)
``qos``, ``partition``
``time_limit_s``                      requested limit in seconds (empty: none)
``mig_profile``                       a MIG profile such as ``1g.10gb``
``mig_count``                         MIG instances (default 1 with a profile)
``gpu_models``                        allowed GPU models, ``|``-separated
``preemptible``                       true/false, yes/no or 1/0 (default false)
``priority_class``                    high, normal or low (default normal)
``checkpoint_interval_s``             seconds between checkpoints (empty: none)
==========================  ========  ==========================================

Times may have decimals and are rounded to whole seconds; an empty cell
takes the default. A column not listed here is an error, since it is most
likely a misspelt one. A job must ask for something: GPUs, a MIG profile or
CPUs. A ``.parquet`` file holds the same columns; reading it needs pyarrow,
which gpufleet does not install, and its rows count from 1 without a header.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.mig import PROFILES
from gpufleet.core.model import Request
from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.fields import count, located, seconds, table_rows
from gpufleet.sim.traces.record import TraceJob, by_submit

REQUIRED = ("id", "submit_time", "duration_s")
OPTIONAL = (
    "gpus",
    "gpu_milli",
    "cpu_milli",
    "memory_mib",
    "nodes",
    "user",
    "account",
    "qos",
    "partition",
    "time_limit_s",
    "mig_profile",
    "mig_count",
    "gpu_models",
    "preemptible",
    "priority_class",
    "checkpoint_interval_s",
)
_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_MIG_PROFILES = frozenset(name for table in PROFILES.values() for name in table)


def load_generic(path: Path) -> list[TraceJob]:
    """Jobs of a generic CSV or Parquet trace, by submit time.

    TraceError names the row and column of a malformed value.
    """
    rows = _parquet_rows(path) if path.suffix == ".parquet" else _csv_rows(path)
    jobs = [_job(path, line, row) for line, row in rows]
    if not jobs:
        raise TraceError(path, None, None, "holds no jobs")
    return by_submit(jobs)


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    for index, (line, row) in enumerate(table_rows(path, REQUIRED)):
        if index == 0:
            _check_columns(path, 1, row)
        yield line, row


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        parquet = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise TraceError(
            path, None, None, "reading Parquet needs pyarrow (pip install pyarrow), or use CSV"
        ) from None
    try:
        records = parquet.read_table(path).to_pylist()
    except (OSError, ValueError) as e:
        raise TraceError(path, None, None, f"not a readable Parquet file: {e}") from None
    for number, record in enumerate(records, start=1):
        row = {k: "" if v is None else str(v) for k, v in record.items()}
        if number == 1:
            missing = [c for c in REQUIRED if c not in row]
            if missing:
                raise TraceError(path, None, missing[0], "column missing")
            _check_columns(path, None, row)
        yield number, row


def _check_columns(path: Path, header_row: int | None, row: Mapping[str, str]) -> None:
    known = (*REQUIRED, *OPTIONAL)
    unknown = [c for c in row if c not in known]
    if unknown:
        raise TraceError(
            path, header_row, unknown[0], f"unknown column (known: {', '.join(known)})"
        )


def _job(path: Path, line: int, row: Mapping[str, str]) -> TraceJob:
    def cell(name: str) -> str:
        return row.get(name, "").strip()

    def number(name: str, default: int) -> int:
        return count(path, line, name, cell(name)) if cell(name) else default

    def optional_seconds(name: str) -> int | None:
        return seconds(path, line, name, cell(name), minimum=1) if cell(name) else None

    profile = cell("mig_profile")
    if profile and profile not in _MIG_PROFILES:
        known = ", ".join(sorted(_MIG_PROFILES))
        raise TraceError(path, line, "mig_profile", f"unknown profile {profile!r} (known: {known})")
    models = frozenset(filter(None, (m.strip() for m in cell("gpu_models").split("|"))))
    preemptible = _BOOLEANS.get(cell("preemptible").lower() or "false")
    if preemptible is None:
        raise TraceError(path, line, "preemptible", f"{cell('preemptible')!r} is not true/false")
    with located(path, line, {"request": "gpus"}):
        for model in models:
            gpu_memory_mib(model, "gpu_models")
        request = Request(
            gpus=number("gpus", 0),
            gpu_milli=number("gpu_milli", 0),
            cpu_milli=number("cpu_milli", 0),
            memory_mib=number("memory_mib", 0),
            nodes=number("nodes", 1),
            mig_profile=profile,
            mig_count=number("mig_count", 1 if profile else 0),
            gpu_models=models,
        )
        return TraceJob(
            id=cell("id"),
            submit_time=seconds(path, line, "submit_time", cell("submit_time")),
            duration_s=seconds(path, line, "duration_s", cell("duration_s")),
            request=request,
            user=cell("user"),
            account=cell("account"),
            qos=cell("qos"),
            partition=cell("partition"),
            time_limit_s=optional_seconds("time_limit_s"),
            preemptible=preemptible,
            priority_class=cell("priority_class") or "normal",
            checkpoint_interval_s=optional_seconds("checkpoint_interval_s"),
        )
