"""Loader for Alibaba's PAI trace of 2020 (cluster-trace-gpu-v2020; Weng et al., NSDI'22).

Two of the release's tables make the jobs; both are CSV, as released
without a header row (one is accepted too):

* ``pai_job_table.csv``: ``job_name,inst_id,user,status,start_time,end_time``,
  one row per job; ``start_time`` is when the job was submitted.
* ``pai_task_table.csv``: ``job_name,task_name,inst_num,status,start_time,
  end_time,plan_cpu,plan_mem,plan_gpu,gpu_type``, one row per task (a job's
  ``worker``, ``ps``, ...), each of ``inst_num`` instances asking for
  ``plan_cpu`` (100 = one core), ``plan_mem`` (GB, read as GiB) and
  ``plan_gpu`` (100 = one GPU; less is a share of one) on a ``gpu_type``
  (``V100``, ``P100``, ``T4``, ``MISC``...).

Times are seconds; submit times count from the first job's. A job whose
submit time is empty was submitted by the time its first task started, so
that start is taken. A job becomes
one request for all its tasks' instances together:

* GPUs: the sum of ``inst_num x plan_gpu`` / 100. Below one GPU it is a
  share of one GPU (``gpu_milli``); from one up, whole GPUs rounded up, a gang
  of whole nodes past ``gpus_per_node``. CPUs and memory are divided over the
  gang's nodes, rounded up.
* ``duration_s``: from the first task's start to the last task's end.
* ``user`` as it is; the GPU types of the job's GPU tasks are kept in
  ``labels["gpu_type"]`` (``|``-separated when several) and, with
  ``PaiOptions.gpu_models`` mapping every one of them to a catalog model,
  restrict where the job runs; ``status`` is kept in ``labels`` too.

Jobs that never ran (no task with both a start and an end time) or ask for
nothing are skipped. Every malformed value of both files is reported at once.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.model import MAX_AMOUNT, MILLI, InvalidSpec, Request
from gpufleet.sim.openb import TraceError, open_text
from gpufleet.sim.traces.fields import TraceProblems, repeated_ids
from gpufleet.sim.traces.record import TraceJob, by_submit, gpu_share, whole_gpus

JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
TASK_TABLE = "pai_task_table.csv"
_MIB_PER_GB = 1024


class PaiOptions(BaseModel):
    """Where the task table is, and how PAI's GPUs meet the cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tasks: Path | None = Field(None, description=f"task table; default: {TASK_TABLE} beside")
    gpus_per_node: int = Field(8, gt=0, description="GPUs of one node, for gang sizes")
    gpu_models: dict[str, str] = {}
    """PAI gpu_type (``V100``) -> catalog model (``V100M16``); unmapped types take any."""

    @field_validator("gpu_models")
    @classmethod
    def _known_models(cls, value: dict[str, str]) -> dict[str, str]:
        for pai_type, model in value.items():
            gpu_memory_mib(model, pai_type)
        return value


@dataclass
class _Job:
    """A job's tasks summed: planned totals and when they ran."""

    gpu_pct: float = 0.0
    cpu_pct: float = 0.0
    mem_gb: float = 0.0
    start: float = math.inf
    end: float = -math.inf
    gpu_types: set[str] = field(default_factory=set)


def load_pai(path: Path, options: PaiOptions | None = None) -> list[TraceJob]:
    """Jobs of PAI's job table (and its task table), by submit time.

    TraceProblems lists every malformed value of both files.
    """
    options = options or PaiOptions()
    problems = TraceProblems(path)
    tasks = _tasks(options.tasks or path.parent / TASK_TABLE, problems)
    submitted: list[tuple[float, int, TraceJob]] = []
    for line, row in _rows(path, JOB_COLUMNS, problems):
        submit = _number(path, line, row, "start_time", problems)
        job = tasks.get(row["job_name"])
        if job is None or job.end < job.start or (submit is None and row["start_time"]):
            continue  # never ran, or a bad submit time (noted)
        try:
            request = _request(job, options)
            if request is None:
                continue
            record = TraceJob(
                id=row["job_name"],
                submit_time=0,  # set below, once the file's origin is known
                duration_s=round(job.end - job.start),
                request=request,
                user=row["user"],
                labels=_labels(row["status"], job),
            )
        except InvalidSpec as e:
            problems.add(TraceError(path, line, e.field.removeprefix("request."), e.reason))
            continue
        # No submit time: it was submitted by the time its first task started.
        submitted.append((job.start if submit is None else submit, line, record))
    ids = [record.id for _, _, record in submitted]
    for repeated in repeated_ids(path, ids, [line for _, line, _ in submitted], "job_name"):
        problems.add(repeated)
    if problems:
        raise problems
    if not submitted:
        raise TraceError(path, None, None, "holds no job that ran")
    origin = min(submit for submit, _, _ in submitted)
    jobs = []
    for submit, line, record in submitted:
        if submit - origin > MAX_AMOUNT:
            reason = f"more than {MAX_AMOUNT} s after the first job's"
            problems.add(TraceError(path, line, "start_time", reason))
        else:
            jobs.append(replace(record, submit_time=round(submit - origin)))
    if problems:
        raise problems
    return by_submit(jobs)


def _tasks(path: Path, problems: TraceProblems) -> dict[str, _Job]:
    jobs: dict[str, _Job] = {}
    for line, row in _rows(path, TASK_COLUMNS, problems):
        values = {
            name: _number(path, line, row, name, problems)
            for name in ("inst_num", "plan_cpu", "plan_mem", "plan_gpu", "start_time", "end_time")
        }
        job = jobs.setdefault(row["job_name"], _Job())
        instances = values["inst_num"] or 0.0
        job.gpu_pct += instances * (values["plan_gpu"] or 0.0)
        job.cpu_pct += instances * (values["plan_cpu"] or 0.0)
        job.mem_gb += instances * (values["plan_mem"] or 0.0)
        start, end = values["start_time"], values["end_time"]
        if start is not None and end is not None:
            job.start, job.end = min(job.start, start), max(job.end, end)
        if (values["plan_gpu"] or 0) > 0 and row["gpu_type"]:
            job.gpu_types.add(row["gpu_type"])
    return jobs


def _request(job: _Job, options: PaiOptions) -> Request | None:
    """The request of all the job's instances; None if it asks for nothing."""
    models = frozenset(options.gpu_models[t] for t in job.gpu_types if t in options.gpu_models)
    if len(models) < len(job.gpu_types):
        models = frozenset()  # a type without a model may run anywhere, so the job may too
    cpu_milli = job.cpu_pct * MILLI / 100
    memory_mib = job.mem_gb * _MIB_PER_GB
    gpus, gpu_milli = gpu_share(job.gpu_pct)
    if not gpus and not gpu_milli:
        if cpu_milli <= 0:
            return None
        return Request(cpu_milli=math.ceil(cpu_milli), memory_mib=math.ceil(memory_mib))
    if gpu_milli:
        return Request(
            gpu_milli=gpu_milli,
            cpu_milli=math.ceil(cpu_milli),
            memory_mib=math.ceil(memory_mib),
            gpu_models=models,
        )
    shape = whole_gpus(gpus, options.gpus_per_node)
    return Request(
        gpus=shape.gpus,
        nodes=shape.nodes,
        cpu_milli=math.ceil(cpu_milli / shape.nodes),
        memory_mib=math.ceil(memory_mib / shape.nodes),
        gpu_models=models,
    )


def _labels(status: str, job: _Job) -> dict[str, str]:
    labels = {"status": status} if status else {}
    if job.gpu_types:
        labels["gpu_type"] = "|".join(sorted(job.gpu_types))
    return labels


def _rows(
    path: Path, columns: tuple[str, ...], problems: TraceProblems
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) of a table without a header (or with one naming ``columns``)."""
    with open_text(path) as handle:
        for line, values in enumerate(csv.reader(handle), start=1):
            if not values or (line == 1 and tuple(values) == columns):
                continue
            if len(values) != len(columns):
                reason = f"expected {len(columns)} fields ({','.join(columns)}), got {len(values)}"
                problems.add(TraceError(path, line, None, reason))
                continue
            yield line, dict(zip(columns, (v.strip() for v in values), strict=True))


def _number(
    path: Path, line: int, row: dict[str, str], name: str, problems: TraceProblems
) -> float | None:
    """A finite number of 0 or more; None for an empty cell or a bad one (noted)."""
    text = row[name]
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        problems.add(TraceError(path, line, name, f"{text!r} is not a number"))
        return None
    if not math.isfinite(value) or value < 0:
        reason = f"must be a finite number of 0 or more, got {text}"
        problems.add(TraceError(path, line, name, reason))
        return None
    return value
