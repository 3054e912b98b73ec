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
 17   preceding job number    ``after``, with ``feedback``
 18   think time (s)          ``think_s``, with ``feedback`` (-1: 0)
====  ======================  =========================================

With ``feedback`` (off by default, as the file's submit times are then
only where a chain of jobs may begin), fields 17 and 18 make a job follow
its preceding job, submitted the think time after it ends (SWF's own
meaning of them; ``TraceJob.after``). A job that follows another takes the
submit time of its chain's first job, the earliest it can go in, so the
replay submits it when the preceding job's end and the think time say,
earlier or later than the log did. A preceding job that is not in the file
or never ran (skipped below) is dropped: its follower follows no job and
keeps its own submit time. A job that precedes itself, or a cycle, is an
error on its line.

Processors become GPUs through ``SwfMapping``: ``ceil(processors /
procs_per_gpu)`` GPUs, on one node when they fit in ``gpus_per_node``, else a
gang of whole nodes (``whole_gpus``). Following SWF conventions, jobs with a
run time of 0 or -1 (cancelled before they ran) or no known processor count
are skipped; a cancelled job (status 5) that did run is kept, since it used
the machine.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.sim.openb import TraceError, open_text
from gpufleet.sim.traces.fields import count, located, repeated_ids
from gpufleet.sim.traces.record import TraceJob, by_submit, follow_problems, whole_gpus

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
_COLUMNS = {"after": "preceding_job", "think_s": "think_time"}
"""The fields named as the SWF fields they come from, in errors."""


class SwfMapping(BaseModel):
    """How SWF processors turn into GPUs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    procs_per_gpu: int = Field(1, gt=0, description="processors that make one GPU")
    gpus_per_node: int = Field(8, gt=0, description="GPUs of one node, for gang sizes")
    feedback: bool = Field(
        False, description="fields 17 and 18: a job follows its preceding job (closed loop)"
    )


def load_swf(path: Path, mapping: SwfMapping | None = None) -> list[TraceJob]:
    """Jobs of an SWF file, by submit time. TraceError names the line and field."""
    mapping = mapping or SwfMapping()
    jobs, lines = [], []
    with open_text(path) as handle:
        for line, text in enumerate(handle, start=1):
            body = text.strip()
            if body and not body.startswith(";"):
                job = _job(path, line, body.split(), mapping)
                if job is not None:
                    jobs.append(job)
                    lines.append(line)
    if not jobs:
        raise TraceError(path, None, None, "holds no job that ran")
    if repeated := repeated_ids(path, [j.id for j in jobs], lines, "job_number"):
        raise repeated[0]
    if mapping.feedback:
        jobs = _chained(path, jobs, lines)
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
    preceding = field("preceding_job") if mapping.feedback else -1
    with located(path, line, _COLUMNS):
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
            after=str(preceding) if preceding >= 0 else None,
            think_s=max(0, field("think_time")) if preceding >= 0 else 0,
        )


def _chained(path: Path, jobs: list[TraceJob], lines: list[int]) -> list[TraceJob]:
    """The jobs with references to jobs not loaded dropped, each follower submitted from
    its chain's first job's submit time (the module docstring); TraceError on a bad chain."""
    loaded = {j.id for j in jobs}
    jobs = [
        j if j.after is None or j.after in loaded else replace(j, after=None, think_s=0)
        for j in jobs
    ]
    problems = follow_problems(jobs)
    if problems:
        i, reason = problems[0]
        raise TraceError(path, lines[i], "preceding_job", reason)
    by_id = {j.id: j for j in jobs}
    first: dict[str, int] = {}  # job id -> the submit time of its chain's first job

    def start(job: TraceJob) -> int:
        chain = [job]
        while chain[-1].after is not None and chain[-1].id not in first:
            chain.append(by_id[chain[-1].after])
        at = first.get(chain[-1].id, chain[-1].submit_time)
        for member in chain:
            first[member.id] = at
        return at

    return [j if j.after is None else replace(j, submit_time=start(j)) for j in jobs]


def _label(prefix: str, number: int) -> str:
    """An SWF id as a name; -1 (unknown) becomes ''."""
    return f"{prefix}{number}" if number >= 0 else ""
