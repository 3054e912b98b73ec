"""Loader for the Standard Workload Format (SWF) of the Parallel Workloads Archive.

An SWF file has one job per line, 18 whitespace-separated fields, and header
lines starting with ``;``. Unknown values are ``-1``. The fields used:

====  ======================  =========================================
 #    SWF field               TraceJob
====  ======================  =========================================
 1    job number              ``id``
 2    submit time (s)         ``submit_time``
 4    run time (s)            ``duration_s``
 5    allocated processors    GPUs (see below); requested (8) if -1
 9    requested time (s)      ``time_limit_s`` (-1: none)
 12   user id                 ``user`` as ``u<id>``
 13   group id                ``account`` as ``g<id>``
 15   queue number            ``qos`` as ``q<n>``
 16   partition number        ``partition`` as ``p<n>``
====  ======================  =========================================

Processors become GPUs through ``SwfMapping``: ``ceil(processors /
procs_per_gpu)`` GPUs, on one node when they fit in ``gpus_per_node``, else a
gang of whole nodes (``whole_gpus``). Following SWF conventions, jobs with a
run time of 0 or -1 (cancelled before they ran) or no known processor count
are skipped; a cancelled job (status 5) that did run is kept, since it used
the machine.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.sim.openb import TraceError, open_text
from gpufleet.sim.traces.fields import count, located
from gpufleet.sim.traces.record import TraceJob, by_submit, whole_gpus

FIELDS = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time",
    "used_memory",
    "requested_processors",
    "requested_time",
    "requested_memory",
    "status",
    "user_id",
    "group_id",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
_COL = {name: i for i, name in enumerate(FIELDS)}


class SwfMapping(BaseModel):
    """How SWF processors turn into GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    procs_per_gpu: int = Field(1, gt=0, description="processors that make one GPU")
    gpus_per_node: int = Field(8, gt=0, description="GPUs of one node, for gang sizes")


def load_swf(path: Path, mapping: SwfMapping | None = None) -> list[TraceJob]:
    """Jobs of an SWF file, by submit time. TraceError names the line and field."""
    mapping = mapping or SwfMapping()
    jobs = []
    with open_text(path) as handle:
        for line, text in enumerate(handle, start=1):
            body = text.strip()
            if body and not body.startswith(";"):
                job = _job(path, line, body.split(), mapping)
                if job is not None:
                    jobs.append(job)
    if not jobs:
        raise TraceError(path, None, None, "holds no job that ran")
    return by_submit(jobs)


def _job(path: Path, line: int, values: list[str], mapping: SwfMapping) -> TraceJob | None:
    """The job of one SWF line, or None for one that never ran."""
    if len(values) != len(FIELDS):
        raise TraceError(path, line, None, f"expected {len(FIELDS)} fields, got {len(values)}")

    def field(name: str) -> int:
        return count(path, line, name, values[_COL[name]], minimum=-1)

    run_time = field("run_time")
    procs = field("allocated_processors")
    if procs <= 0:
        procs = field("requested_processors")
    if run_time <= 0 or procs <= 0:
        return None
    limit = field("requested_time")
    with located(path, line):
        return TraceJob(
            id=values[_COL["job_number"]],
            submit_time=field("submit_time"),
            duration_s=run_time,
            time_limit_s=limit if limit > 0 else None,
            request=whole_gpus(-(-procs // mapping.procs_per_gpu), mapping.gpus_per_node),
            user=_label("u", field("user_id")),
            account=_label("g", field("group_id")),
            qos=_label("q", field("queue")),
            partition=_label("p", field("partition")),
        )


def _label(prefix: str, number: int) -> str:
    """An SWF id as a name; -1 (unknown) becomes ''."""
    return f"{prefix}{number}" if number >= 0 else ""
