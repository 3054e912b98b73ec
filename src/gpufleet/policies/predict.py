"""Runtime prediction: how long a job will really run, learnt from the jobs that finished.

Users' time limits overestimate, often by several times, so ordering by
them (SJF) or planning backfill with them wastes what shorter real runtimes
would allow. ``QuantilePredictor`` is the estimator Tiresias and Helios
(QSSF) build on: the recent runtimes of the same user's jobs of the same
name, a quantile of them, falling back to coarser groups.

For a job with features (user, account, name, GPUs, limit) it tries, most
specific first, the recent history of

1. the user's jobs of this name and GPU count, then of this name
   (the same script run again: a quantile of their runtimes);
2. the user's jobs, then the account's, then everyone's (a quantile of
   runtime over limit, times this job's limit: how much a user
   overestimates carries over to a new script);

and takes the first with at least ``min_history`` finished jobs. With none,
the estimate is the limit. An estimate never exceeds the limit (the hard
bound) and is at least one second.

The predictor is pure and deterministic, and it learns only what a driver
tells it (``observe``): the simulator tells it of each job when the job
finishes, so a prediction at time t uses only jobs finished by t. Its state
lives with the driver, which stamps the estimate on the job it queues
(``Job.runtime_estimate_s``); the cycle reads it there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gpufleet.core.job import Job


class PredictArgs(BaseModel):
    """The ``[predict]`` table: where estimates are used, and how they are made."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ordering: bool = Field(
        True, description="sjf ranks jobs by their estimates (else by their limits)"
    )
    backfill: bool = Field(
        False,
        description="backfill plans with estimated ends in place of limits; the limit stays "
        "the hard bound",
    )
    quantile: float = Field(0.5, gt=0, lt=1, description="quantile of the history taken")
    history: int = Field(10, gt=0, description="recent finished jobs kept per group")
    min_history: int = Field(2, gt=0, description="finished jobs a group needs to be used")


@dataclass(frozen=True, slots=True)
class Features:
    """What a prediction may look at: known at submission, never the runtime itself."""

    user: str
    account: str
    name: str
    gpus: float
    limit_s: int

    @classmethod
    def of(cls, job: Job, name: str = "") -> Features:
        return cls(job.user, job.account, name, job.gpu_milli / 1000, job.time_limit_s)


class RuntimePredictor(Protocol):
    """Learns from finished jobs and estimates new ones.

    ``observe`` is told each finished job once, with the seconds it ran
    (all runs together); ``predict`` returns seconds in [1, limit]. Both are
    deterministic: the same observations in the same order give the same
    estimates.
    """

    def observe(self, f: Features, runtime_s: int) -> None: ...

    def predict(self, f: Features) -> int: ...


Group = tuple[Hashable, ...]


class QuantilePredictor:
    """Recent-history quantiles per group; see the module docstring."""

    def __init__(self, args: PredictArgs | None = None) -> None:
        self.args = args or PredictArgs()
        self.runtimes: dict[Group, deque[int]] = {}
        self.ratios: dict[Group, deque[float]] = {}
        # Each group's quantile until it learns more: a queue re-estimated at
        # once asks for the same few groups many times.
        self._quantiles: dict[tuple[bool, Group], float | None] = {}

    @staticmethod
    def _by_name(f: Features) -> tuple[Group, ...]:
        return ("name", f.user, f.name, f.gpus), ("name", f.user, f.name)

    @staticmethod
    def _by_owner(f: Features) -> tuple[Group, ...]:
        return ("user", f.user), ("account", f.account), ("all",)

    def observe(self, f: Features, runtime_s: int) -> None:
        keep = self.args.history
        runtime = max(1, min(runtime_s, f.limit_s))
        if f.name:
            for g in self._by_name(f):
                self.runtimes.setdefault(g, deque(maxlen=keep)).append(runtime)
                self._quantiles.pop((True, g), None)
        for g in self._by_owner(f):
            self.ratios.setdefault(g, deque(maxlen=keep)).append(runtime / f.limit_s)
            self._quantiles.pop((False, g), None)

    def _quantile(self, by_name: bool, g: Group) -> float | None:
        """The group's quantile of runtimes (by name) or ratios; None under min_history."""
        key = (by_name, g)
        if key not in self._quantiles:
            history = (self.runtimes if by_name else self.ratios).get(g, ())
            enough = len(history) >= self.args.min_history
            values = np.fromiter(history, np.float64, count=len(history))
            self._quantiles[key] = (
                float(np.quantile(values, self.args.quantile)) if enough else None
            )
        return self._quantiles[key]

    def predict(self, f: Features) -> int:
        estimate = float(f.limit_s)
        for g in self._by_name(f) if f.name else ():
            runtime = self._quantile(True, g)
            if runtime is not None:
                estimate = runtime
                break
        else:
            for g in self._by_owner(f):
                ratio = self._quantile(False, g)
                if ratio is not None:
                    estimate = ratio * f.limit_s
                    break
        return max(1, min(f.limit_s, round(estimate)))


def with_estimate(job: Job, predictor: RuntimePredictor, name: str = "") -> Job:
    """``job`` carrying the predictor's estimate of its runtime."""
    return replace(job, runtime_estimate_s=predictor.predict(Features.of(job, name)))
