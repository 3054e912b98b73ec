"""Loader for Slurm accounting records: the output of ``sacct -a -X -P``.

Ask sacct for at least these fields (``--format``), in any order::

    JobID,User,Account,Partition,Submit,Start,Elapsed,Timelimit,State,
    NNodes,AllocTRES,ReqTRES

and ``QOS`` if the replay should run jobs under their QoS, ``JobName`` to give
a runtime predictor the jobs' names (the ``name`` label).

``-P`` separates fields with ``|`` (``-p``'s trailing ``|`` is accepted too);
``-X`` keeps one line per allocation. Should steps slip in (a ``JobID`` with a
dot), they are ignored. Mapping:

* ``Submit`` -> ``submit_time``, in seconds after the earliest ``Submit`` of
  the file (sacct prints local time without a zone, so only differences mean
  anything). With ``SacctOptions.origin = "day"`` they count from midnight
  of that ``Submit``'s day instead, so every time keeps its seconds and
  minutes on the clock: Slurm's backfill rounds its holds (``bf_resolution``)
  and its will-run windows (30 s) on the clock, and a replay counting from
  the first submission rounds them elsewhere (a zone's offset is whole
  quarter hours, so local times round as Slurm's epoch times do).
* ``Elapsed`` -> ``duration_s``; when the file has no ``Elapsed`` column,
  ``End - Start``. A job still running counts its time so far.
* ``Timelimit`` -> ``time_limit_s``; ``UNLIMITED`` and ``Partition_Limit``
  mean none. Durations read as ``[D-]HH:MM:SS``, ``HH:MM:SS``, ``MM:SS`` or
  minutes, as Slurm writes them.
* ``AllocTRES`` (``ReqTRES`` when there is no ``AllocTRES`` column) ->
  ``request``: ``gres/gpu=N`` (or the sum of ``gres/gpu:TYPE=N``) GPUs,
  ``cpu=N`` and ``mem=`` (K/M/G/T suffixes) divided over ``NNodes`` nodes,
  rounded up, so a 2-node job becomes a gang of 2 equal tasks. With
  ``SacctOptions.gpu_models`` a ``gres/gpu:TYPE`` restricts the job to the
  mapped catalog model; without it the job takes any model. A type naming a
  MIG profile (``gres/gpu:1g.10gb=1``, or with a prefix such as
  ``a100_1g.10gb``, as Slurm's NVML autodetection names MIG devices) asks for
  that many MIG instances instead of whole GPUs.
* ``User``, ``Account``, ``QOS``, ``Partition`` copied as they are (no
  ``QOS`` column: empty). The replay runs a job under its QoS when the
  profile's QoS table defines it (``sim.driver.to_job``).

Jobs that never started are skipped: ``State`` PENDING, a ``Start`` of
``Unknown``/``None``, or an empty ``AllocTRES`` (nothing was allocated, as
for a job cancelled while pending). Timestamps read as ISO 8601.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.mig import unknown_profile
from gpufleet.core.model import MAX_AMOUNT, Request
from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.fields import count, located, repeated_ids, table_rows
from gpufleet.sim.traces.record import TraceJob, by_submit

COLUMNS = (
    "JobID",
    "User",
    "Account",
    "Partition",
    "Submit",
    "Start",
    "Timelimit",
    "State",
    "NNodes",
)
NO_TIME = frozenset({"", "Unknown", "None"})
NO_LIMIT = frozenset({"UNLIMITED", "Partition_Limit", "NONE", "INVALID"})
# A MIG profile ends the type, with its options (``+me``) if any: those are not modelled.
MIG_TYPE = re.compile(r"(?:^|_)(\d+g\.\d+gb(?:\+\w+)*)$")
_MIB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


class SacctOptions(BaseModel):
    """How sacct's site-specific names map onto gpufleet's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_models: dict[str, str] = {}
    """gres GPU type (``h100``) -> catalog model (``H100-80GB``); unmapped types take any."""
    origin: Literal["first", "day"] = "first"
    """Time 0: the earliest ``Submit``, or midnight of its day (the clock's phase kept)."""

    @field_validator("gpu_models")
    @classmethod
    def _known_models(cls, value: dict[str, str]) -> dict[str, str]:
        for model in value.values():
            gpu_memory_mib(model, "gpu_models")
        return value


def load_sacct(path: Path, options: SacctOptions | None = None) -> list[TraceJob]:
    """Jobs that ran, by submit time. TraceError names the line and column."""
    options = options or SacctOptions()
    started: list[tuple[datetime, TraceJob]] = []
    lines: list[int] = []
    tres_column = duration_column = ""
    for line, row in table_rows(path, COLUMNS, delimiter="|"):
        if not tres_column:
            tres_column = _pick(path, row, ("AllocTRES", "ReqTRES"))
            duration_column = _pick(path, row, ("Elapsed", "End"))
        if "." in row["JobID"]:
            continue
        start = _timestamp(path, line, "Start", row["Start"])
        state = row["State"].split(" ", 1)[0]
        if state == "PENDING" or start is None or not row[tres_column]:
            continue
        submit = _timestamp(path, line, "Submit", row["Submit"])
        if submit is None:
            raise TraceError(path, line, "Submit", f"{row['Submit']!r}: a job needs a submit time")
        if duration_column == "Elapsed":
            duration = _duration(path, line, "Elapsed", row["Elapsed"])
        else:
            end = _timestamp(path, line, "End", row["End"])
            if end is None:
                raise TraceError(path, line, "End", "a job that started needs an end time")
            duration = max(0, int((end - start).total_seconds()))
        nodes = count(path, line, "NNodes", row["NNodes"], minimum=1)
        with located(path, line, {"request": tres_column, "id": "JobID"}):
            job = TraceJob(
                id=row["JobID"],
                submit_time=0,  # set below, once the file's origin is known
                duration_s=duration,
                time_limit_s=_limit(path, line, row["Timelimit"]),
                request=_request(path, line, tres_column, row[tres_column], nodes, options),
                user=row["User"],
                account=row["Account"],
                qos=row.get("QOS", ""),
                partition=row["Partition"],
                labels=({"name": row["JobName"]} if row.get("JobName") else {})
                | {"status": state},
            )
        started.append((submit, job))
        lines.append(line)
    if not started:
        raise TraceError(path, None, None, "holds no job that started")
    if repeated := repeated_ids(path, [job.id for _, job in started], lines, "JobID"):
        raise repeated[0]
    origin = min(submit for submit, _ in started)
    if options.origin == "day":
        origin = origin.replace(hour=0, minute=0, second=0, microsecond=0)
    return by_submit(
        [
            replace(job, submit_time=int((submit - origin).total_seconds()))
            for submit, job in started
        ]
    )


def _pick(path: Path, row: dict[str, str], choices: tuple[str, ...]) -> str:
    """The first of ``choices`` the file has as a column."""
    for name in choices:
        if name in row:
            return name
    raise TraceError(path, 1, choices[0], "column missing from the header")


def _timestamp(path: Path, line: int, field: str, text: str) -> datetime | None:
    """An ISO timestamp, or None for Slurm's Unknown/None. Zoneless times read as UTC."""
    if text in NO_TIME:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(path, line, field, f"{text!r} is not an ISO timestamp") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def slurm_seconds(text: str) -> int:
    """Seconds of a Slurm duration: ``[D-]HH:MM:SS``, ``D-HH[:MM]``, ``MM:SS`` or minutes
    (the last two with any number of minutes).

    Raises ValueError on anything else. Fractional seconds round up.
    """
    days_text, dash, clock = text.rpartition("-") if "-" in text else ("0", "", text)
    parts = clock.split(":")
    # Bare minutes and MM:SS count minutes without bound, as Slurm reads them (90, 90:00).
    free_minutes = not dash and len(parts) <= 2
    if not dash and len(parts) == 1:
        parts = ["0", parts[0], "0"]  # bare minutes
    elif not dash and len(parts) == 2:
        parts = ["0", *parts]  # MM:SS
    if len(parts) > 3 or not all(parts) or not days_text.isdigit():
        raise ValueError(text)
    parts += ["0"] * (3 - len(parts))
    hours, minutes = int(parts[0]), int(parts[1])
    secs = float(parts[2])
    if hours < 0 or minutes < 0 or not (free_minutes or minutes < 60) or not 0 <= secs < 60:
        raise ValueError(text)
    return ((int(days_text) * 24 + hours) * 60 + minutes) * 60 + math.ceil(secs)


def _duration(path: Path, line: int, field: str, text: str) -> int:
    try:
        return slurm_seconds(text)
    except ValueError:
        raise TraceError(
            path, line, field, f"{text!r} is not a Slurm duration ([D-]HH:MM:SS)"
        ) from None


def _limit(path: Path, line: int, text: str) -> int | None:
    return None if text in NO_LIMIT else _duration(path, line, "Timelimit", text)


def _request(
    path: Path, line: int, field: str, text: str, nodes: int, options: SacctOptions
) -> Request:
    """One node's share of a TRES list such as ``cpu=4,mem=16G,gres/gpu:h100=8``."""
    tres: dict[str, str] = {}
    for entry in text.split(","):
        key, eq, value = entry.partition("=")
        if not eq or not key or not value:
            raise TraceError(path, line, field, f"{entry!r} is not a name=value TRES entry")
        tres[key] = value
    typed = {k.removeprefix("gres/gpu:"): v for k, v in tres.items() if k.startswith("gres/gpu:")}
    mig = {
        m.group(1): count(path, line, field, v)
        for t, v in typed.items()
        if (m := MIG_TYPE.search(t))
    }
    typed = {t: v for t, v in typed.items() if not MIG_TYPE.search(t)}
    if "gres/gpu" in tres:  # the total counts MIG devices too
        gpus = max(0, count(path, line, field, tres["gres/gpu"]) - sum(mig.values()))
    else:
        gpus = sum(count(path, line, field, v) for v in typed.values())
    cpus = count(path, line, field, tres.get("cpu", "0"))
    memory = _mib(path, line, field, tres.get("mem", "0"))
    if mig:
        return _mig_request(path, line, field, mig, gpus, cpus, memory, nodes)
    models = frozenset(options.gpu_models[t] for t in typed if t in options.gpu_models)
    return Request(
        gpus=-(-gpus // nodes),
        cpu_milli=-(-cpus * 1000 // nodes),
        memory_mib=-(-memory // nodes),
        gpu_models=models if gpus else frozenset(),
        nodes=nodes,
    )


def _mig_request(
    path: Path,
    line: int,
    field: str,
    mig: dict[str, int],
    gpus: int,
    cpus: int,
    memory: int,
    nodes: int,
) -> Request:
    """One node's share of a job holding MIG instances of one profile."""
    if len(mig) > 1 or gpus:
        raise TraceError(
            path, line, field, "a job holds MIG instances of one profile and no whole GPUs"
        )
    ((name, instances),) = mig.items()
    if problem := unknown_profile(name):
        raise TraceError(path, line, field, problem)
    return Request(
        mig_profile=name,
        mig_count=-(-instances // nodes),
        cpu_milli=-(-cpus * 1000 // nodes),
        memory_mib=-(-memory // nodes),
        nodes=nodes,
    )


def _mib(path: Path, line: int, field: str, text: str) -> int:
    """MiB of a Slurm memory amount such as ``4000M`` or ``62.50G`` (no unit: MiB)."""
    unit = text[-1].upper() if text[-1:].isalpha() else "M"
    number = text[:-1] if text[-1:].isalpha() else text
    try:
        value = float(number) * _MIB_PER_UNIT[unit]
    except (KeyError, ValueError):
        value = math.nan
    if not 0 <= value <= MAX_AMOUNT:  # also refuses nan and inf
        raise TraceError(path, line, field, f"mem={text!r} is not a memory amount")
    return math.ceil(value)
