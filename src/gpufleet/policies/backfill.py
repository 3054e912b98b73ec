"""Backfill: let lower-priority jobs start early without delaying the planned ones.

When a job cannot start now it may get a *planned start* (Slurm's backfill
reservation; ``Plan.expected_start``): its earliest start on the timeline of
running jobs' expected ends, on the nodes that free up first. A
lower-priority job then starts now only on nodes no planned start covers, or
if it will finish (by its time limit) before that start. So backfill never
delays a planned job, and a gang at the head of the queue is planned like
any job.

* ``easy``: only the first waiting job gets a planned start (EASY backfill,
  as in the Argonne/IBM SP scheduler); cheap, and the head job cannot starve.
* ``conservative``: every waiting job gets one, in priority order, so no job
  is ever delayed by a lower one; costs a timeline query per job.
* ``none``: no backfill, a strict queue, as leaving the ``[backfill]`` table
  out; a profile that extends one with backfill, or a sweep, can say so.

Settings follow Slurm's SchedulerParameters: ``window_s`` (bf_window: starts
further ahead than this are not planned), ``resolution_s`` (bf_resolution:
a planned start's hold begins and ends rounded down to it, as in Slurm) and
``max_job_test`` (bf_max_job_test: once a job waits, at most this many jobs in
all are tried per cycle, and at most this many get a planned start, so a
conservative cycle over a deep queue stays bounded; jobs past it wait
unplanned, as past Slurm's limit).

``interval_s`` (bf_interval) gives Slurm's structure: backfill is a pass that
runs at most once per interval, and the cycles in between are Slurm's main
scheduler passes, which plan no start and stop each partition at its first
job that cannot start (as without backfill). With 0, the default, every
cycle backfills. A pass of its own walks past the ordering's
``queue_depth`` (default_queue_depth bounds Slurm's main scheduler only):
``max_job_test`` bounds it.

``will_run_window_s`` (0: off) estimates planned starts and their nodes as
Slurm's select plugin does (``core.timeline.WillRun``): running jobs' ends in
batches, the first ``will_run_window_s`` wide (30 in Slurm), each later one
twice as wide, or ``will_run_linear_s`` wider (bf_window_linear); the job is
planned on the nodes that fit it best then (``will_run_nodes = "best-fit"``:
the fewest free GPUs), or on those cons_tres picks (``"consecutive"``:
``core.consecutive``, as the ``cons-tres`` placement does for starts now).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from gpufleet.core.timeline import WillRun
from gpufleet.policies.tables import StrictTable


class BackfillArgs(StrictTable):
    mode: Literal["easy", "conservative", "none"] = "easy"
    window_s: int = Field(default=86_400, gt=0)
    resolution_s: int = Field(default=60, gt=0)
    max_job_test: int = Field(default=500, gt=0)
    interval_s: int = Field(default=0, ge=0)
    will_run_window_s: int = Field(default=0, ge=0)
    will_run_linear_s: int = Field(default=0, ge=0)
    will_run_nodes: Literal["best-fit", "consecutive"] = "best-fit"


class Backfill:
    NAME: ClassVar[str] = "backfill"
    clocked: ClassVar[bool] = False  # a planned start the horizon cuts off marks the plan instead

    def __init__(self, args: BackfillArgs | None = None) -> None:
        self.args = args or BackfillArgs()
        self.resolution = self.args.resolution_s
        window, linear = self.args.will_run_window_s, self.args.will_run_linear_s
        consecutive = self.args.will_run_nodes == "consecutive"
        self.will_run = WillRun(window, linear, consecutive) if window else None
        self.own_pass = self.args.interval_s > 0

    def wants_planned_start(self, planned: int) -> bool:
        if self.args.mode == "conservative":
            return planned < self.args.max_job_test  # a deep queue costs at most this many
        return planned == 0

    def horizon(self, now: int) -> int:
        return now + self.args.window_s

    def may_test(self, tested: int) -> bool:
        return tested < self.args.max_job_test

    def runs_at(self, now: int, last_pass: int | None) -> bool:
        interval = self.args.interval_s
        return not interval or last_pass is None or now - last_pass >= interval
