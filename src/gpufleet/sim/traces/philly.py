"""Loader for Helios-style job logs: ``cluster_log.csv`` of Helios' clusters and of Philly.

The Helios release (Hu et al., SC'21, S-Lab-System-Group/HeliosData) gives
each cluster, Philly included, as one CSV::

    job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue

Times are ``YYYY-MM-DD HH:MM:SS`` without a zone (``PhillyOptions.timezone``
says which; only differences matter, so submit times count from the file's
first). ``duration`` is the runtime in seconds; a file without it gives the
runtime as ``end_time - start_time``. Mapping:

* ``job_id`` -> ``id``, ``user`` -> ``user``, ``vc`` (the virtual cluster, a
  team's quota) -> ``account``, so fairshare is shared per VC;
* ``gpu_num`` -> GPUs; a job wider than ``gpus_per_node`` becomes a gang of
  whole nodes;
* every other column (``cpu_num``, ``node_num``, ``state``, ``queue``, ...)
  is kept in ``labels``.

Jobs that asked for no GPU (the CPU jobs of Helios' clusters) and jobs that
never ran (an empty or zero runtime, a ``start_time`` of ``None``) are
skipped. The loader is the generic one under a fixed mapping, so it reports
every problem of a file at once.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.sim.openb import open_text
from gpufleet.sim.traces.generic import GenericOptions, TimeZone, load_generic
from gpufleet.sim.traces.record import TraceJob

COLUMNS = {"id": "job_id", "user": "user", "account": "vc", "gpus": "gpu_num"}
_NEVER_RAN = frozenset({"", "0", "None", "NaN", "nan"})


class PhillyOptions(BaseModel):
    """How a Helios-style log meets the cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpus_per_node: int = Field(8, gt=0, description="GPUs of one node, for gang sizes")
    timezone: TimeZone = Field("UTC", description="the zone the log's times were written in")


def load_philly(path: Path, options: PhillyOptions | None = None) -> list[TraceJob]:
    """GPU jobs that ran, by submit time. TraceProblems lists every malformed value."""
    options = options or PhillyOptions()
    with open_text(path) as handle:
        header = next(csv.reader(handle), [])
    columns = {**COLUMNS, "submit_time": "submit_time"}
    if "duration" in header:
        columns["duration_s"] = "duration"
        ran = "duration"
    else:
        columns |= {"start_time": "start_time", "end_time": "end_time"}
        ran = "start_time"
    if "user" not in header:
        del columns["user"]
    mapping = GenericOptions(
        columns=columns,
        time="iso",
        timezone=options.timezone,
        gpus_per_node=options.gpus_per_node,
    )

    def keep(row: Mapping[str, str]) -> bool:
        return row.get("gpu_num", "") not in _NEVER_RAN and row.get(ran, "") not in _NEVER_RAN

    return load_generic(path, mapping, keep)
