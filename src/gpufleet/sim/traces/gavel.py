"""Loader for Gavel's job traces (Narayanan et al., OSDI'20, stanford-futuredata/gavel).

A Gavel trace has one job per line, tab-separated, no header::

    job_type  command  working_directory  num_steps_arg  needs_data_dir
    total_steps  scale_factor  priority_weight  SLO  arrival_time

(older traces lack ``working_directory``: 9 fields). A job's size is in
training steps, not seconds: its runtime depends on the GPU it runs on. The
throughput table that comes with the traces (``simulation_throughputs.json``)
gives steps per second per GPU type and job::

    {"v100": {"('ResNet-18 (batch size 64)', 1)": {"null": 19.2, ...}, ...}, ...}

where ``1`` is the scale factor (GPUs of the job) and ``"null"`` the
throughput alone on the GPUs (other keys are co-located pairs, unused here).
Mapping:

* ``duration_s`` = ``ceil(total_steps / throughput)`` on ``GavelOptions.gpu_type``
  (default ``v100``, the fastest type of Gavel's clusters);
* ``scale_factor`` -> GPUs, a gang of whole nodes past ``gpus_per_node``;
* ``arrival_time`` -> ``submit_time`` (seconds, rounded);
* ``id`` is the job's 0-based position, as Gavel numbers its jobs;
* ``labels``: ``job_type``, ``gpu_type`` (the type the runtime is for), and
  ``duration_s.TYPE`` for every GPU type of the table, so a
  heterogeneity-aware policy can read the runtime on each;
  ``priority_weight`` and ``slo`` as written.

Every problem of the file is reported at once.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.adapters.textfile import UnreadableText, read_text
from gpufleet.core.model import InvalidSpec
from gpufleet.sim.openb import TraceError, open_text
from gpufleet.sim.traces.fields import TraceProblems, count, seconds
from gpufleet.sim.traces.record import TraceJob, by_submit, whole_gpus

FIELDS = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)
_OLD_FIELDS = tuple(f for f in FIELDS if f != "working_directory")
_KEY = re.compile(r"\('(.*)', (\d+)\)")

Throughputs = dict[str, dict[tuple[str, int], float]]
"""GPU type -> (job type, scale factor) -> steps per second alone."""


class GavelOptions(BaseModel):
    """Where the throughput table is, and which GPU type sets the runtimes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    throughputs: Path = Field(description="Gavel's throughput JSON (simulation_throughputs.json)")
    gpu_type: str = Field("v100", description="the GPU type whose throughput sets duration_s")
    gpus_per_node: int = Field(8, gt=0, description="GPUs of one node, for gang sizes")


def load_gavel(path: Path, options: GavelOptions) -> list[TraceJob]:
    """Jobs of a Gavel trace, by arrival. TraceProblems lists every malformed value."""
    table = load_throughputs(options.throughputs)
    if options.gpu_type not in table:
        known = ", ".join(sorted(table))
        reason = f"no GPU type {options.gpu_type!r} in the table (known: {known})"
        raise TraceError(options.throughputs, None, "gpu_type", reason)
    problems = TraceProblems(path)
    jobs: list[TraceJob] = []
    with open_text(path) as handle:
        for line, text in enumerate(handle, start=1):
            if text.strip():
                try:
                    jobs.append(_job(path, line, len(jobs), text, table, options))
                except TraceError as e:
                    problems.add(e)
    if problems:
        raise problems
    if not jobs:
        raise TraceError(path, None, None, "holds no jobs")
    return by_submit(jobs)


def load_throughputs(path: Path) -> Throughputs:
    """Gavel's throughput table: steps per second alone, by GPU type and job."""
    try:
        raw = json.loads(read_text(path))
    except UnreadableText as e:
        raise TraceError(path, e.line, None, e.reason) from None
    except json.JSONDecodeError as e:
        raise TraceError(path, e.lineno, None, f"not JSON: {e.msg}") from None
    if not isinstance(raw, dict):
        raise TraceError(path, None, None, "must map GPU types to tables of jobs")
    table: Throughputs = {}
    for gpu_type, jobs in raw.items():
        if not isinstance(jobs, dict):
            raise TraceError(path, None, gpu_type, "must map jobs to throughputs")
        table[gpu_type] = {}
        for key, entry in jobs.items():
            match = _KEY.fullmatch(key)
            alone = entry.get("null") if isinstance(entry, dict) else None
            if match is None or not isinstance(alone, int | float):
                reason = 'expected "(\'JOB TYPE\', SCALE)": {"null": STEPS_PER_S, ...}'
                raise TraceError(path, None, f"{gpu_type}.{key}", reason)
            table[gpu_type][(match[1], int(match[2]))] = float(alone)
    return table


def _job(
    path: Path, line: int, index: int, text: str, table: Throughputs, options: GavelOptions
) -> TraceJob:
    values = text.rstrip("\r\n").split("\t")
    names = {len(FIELDS): FIELDS, len(_OLD_FIELDS): _OLD_FIELDS}.get(len(values))
    if names is None:
        reason = f"expected {len(FIELDS)} tab-separated fields, got {len(values)}"
        raise TraceError(path, line, None, reason)
    row = dict(zip(names, (v.strip() for v in values), strict=True))
    steps = count(path, line, "total_steps", row["total_steps"], minimum=1)
    scale = count(path, line, "scale_factor", row["scale_factor"], minimum=1)
    arrival = seconds(path, line, "arrival_time", row["arrival_time"])
    key = (row["job_type"], scale)
    runtimes = {
        gpu_type: math.ceil(steps / jobs[key])
        for gpu_type, jobs in sorted(table.items())
        if jobs.get(key, 0) > 0
    }
    if options.gpu_type not in runtimes:
        reason = f"no throughput for {key} on {options.gpu_type} in {options.throughputs}"
        raise TraceError(path, line, "job_type", reason)
    labels = {
        "job_type": row["job_type"],
        "gpu_type": options.gpu_type,
        **{f"duration_s.{gpu}": str(s) for gpu, s in runtimes.items()},
        "priority_weight": row["priority_weight"],
        "slo": row["SLO"],
    }
    try:
        return TraceJob(
            id=str(index),
            submit_time=arrival,
            duration_s=runtimes[options.gpu_type],
            request=whole_gpus(scale, options.gpus_per_node),
            labels=labels,
        )
    except InvalidSpec as e:
        raise TraceError(path, line, e.field, e.reason) from None
