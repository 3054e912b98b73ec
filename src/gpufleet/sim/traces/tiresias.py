"""Loader for Tiresias-style job CSVs (Gu et al., NSDI'19, and the simulators after it).

Columns: ``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``.
Only ``job_id``, ``num_gpu``, ``submit_time`` and ``duration`` (seconds) are
required and used; ``model_name`` becomes the job's ``name`` label (a
runtime predictor's feature); ``iterations`` and ``interval`` (the gap to
the previous arrival) describe the synthetic training job and carry no
scheduling information. A job wider than ``gpus_per_node`` (8 by default;
Tiresias' own testbed had 4) becomes a gang of whole nodes (``whole_gpus``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.fields import count, located, repeated_ids, seconds, table_rows
from gpufleet.sim.traces.record import TraceJob, by_submit, whole_gpus

COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")


class TiresiasOptions(BaseModel):
    """How a Tiresias job list meets the cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus_per_node: int = Field(8, gt=0, description="GPUs of one node, for gang sizes")


def load_tiresias(path: Path, options: TiresiasOptions | None = None) -> list[TraceJob]:
    """Jobs of a Tiresias CSV, by submit time. TraceError names the row and column."""
    gpus_per_node = (options or TiresiasOptions()).gpus_per_node
    jobs, lines = [], []
    for line, row in table_rows(path, COLUMNS):
        gpus = count(path, line, "num_gpu", row["num_gpu"], minimum=1)
        with located(path, line, {"id": "job_id", "duration_s": "duration"}):
            jobs.append(
                TraceJob(
                    id=row["job_id"],
                    submit_time=seconds(path, line, "submit_time", row["submit_time"]),
                    duration_s=seconds(path, line, "duration", row["duration"]),
                    request=whole_gpus(gpus, gpus_per_node),
                    labels={"name": row["model_name"]} if row.get("model_name") else {},
                )
            )
        lines.append(line)
    if not jobs:
        raise TraceError(path, None, None, "holds no jobs")
    if repeated := repeated_ids(path, [j.id for j in jobs], lines, "job_id"):
        raise repeated[0]
    return by_submit(jobs)
