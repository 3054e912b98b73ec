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

Failed runs are kept apart (``failures``, on by default). A user debugging
a script submits it again and again, each run failing within minutes
(Jeon et al., USENIX ATC'19), then the fixed run takes the script's usual
hours. Taken as runs of the script, failures would shorten the fixed run's
estimate to their minutes and put it ahead of the queue, and lower the
user's runtime-to-limit ratios. So only completed runs (timeouts included)
make the estimates above, and a failure-prone run is estimated at its
expected runtime::

    p x failed + (1 - p) x completed

``completed`` is the estimate above; ``failed`` the same quantile of the
recent failed runs of the user's script (of this GPU count, then any),
else of the user's, the account's or everyone's failed runs, never above
``completed``; and ``p`` how often, over everyone's scripts, a run failed
after as many failures of its script in a row as this script has now (0, 1,
2, or 3 and more), counted in the order the runs ended, with one completed
run counted besides (so 0 before such a run has failed): after a failure
the next run fails more often than after a completed run. Shortest expected
runtime first is the order that minimises the mean completion time on one
machine without preemption when only the runtimes' distributions are known
(Rothkopf 1966, Smith's rule over expectations).

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
from pydantic import Field, ValidationInfo, field_validator

from gpufleet.core.job import Job
from gpufleet.policies.tables import StrictTable


class PredictArgs(StrictTable):
    """The ``[predict]`` table: where estimates are used, and how they are made."""

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
    failures: bool = Field(
        True,
        description="failed runs are learnt apart: they do not shorten the estimates of "
        "completed runs, and a run is estimated at its expected runtime given how often "
        "runs failed after its script's recent failures",
    )

    @field_validator("min_history")
    @classmethod
    def _within_history(cls, value: int, info: ValidationInfo) -> int:
        # A group keeps its last `history` runs: it could never reach more.
        history = info.data.get("history")
        if history is not None and value > history:
            raise ValueError(
                f"{value} is more than history ({history}), the runs a group keeps: "
                "no estimate would ever be made"
            )
        return value


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
    (all runs together) and whether it failed; ``predict`` returns seconds
    in [1, limit]. Both are deterministic: the same observations in the same
    order give the same estimates.
    """

    def observe(self, f: Features, runtime_s: int, *, failed: bool = False) -> None: ...

    def predict(self, f: Features) -> int: ...


Group = tuple[Hashable, ...]


MAX_STREAK = 3
"""Failures in a row beyond which a script's next run is counted as after this many."""


def _script(f: Features) -> Group:
    """The group of a user's runs of one script (by job name)."""
    return ("name", f.user, f.name)


class QuantilePredictor:
    """Recent-history quantiles per group; see the module docstring."""

    def __init__(self, args: PredictArgs | None = None) -> None:
        self.args = args or PredictArgs()
        self.runtimes: dict[Group, deque[float]] = {}
        self.ratios: dict[Group, deque[float]] = {}
        self.failures: dict[Group, deque[float]] = {}
        # Each script's failures since its last completed run, and over all
        # scripts, after each streak, how many runs [failed, completed].
        self.streaks: dict[Group, int] = {}
        self.after_streak = [[0, 0] for _ in range(MAX_STREAK + 1)]
        # Each group's quantile until it learns more: a queue re-estimated at
        # once asks for the same few groups many times.
        self._quantiles: dict[tuple[str, Group], float | None] = {}

    @staticmethod
    def _by_name(f: Features) -> tuple[Group, ...]:
        return (*_script(f), f.gpus), _script(f)

    @staticmethod
    def _by_owner(f: Features) -> tuple[Group, ...]:
        return ("user", f.user), ("account", f.account), ("all",)

    def _by_failures(self, f: Features) -> tuple[Group, ...]:
        return (*self._by_name(f), *self._by_owner(f)) if f.name else self._by_owner(f)

    def _streak(self, f: Features) -> int:
        return self.streaks.get(_script(f), 0) if f.name else 0

    def _keep(self, kind: str, groups: tuple[Group, ...], value: float) -> None:
        """Append ``value`` to each group's history in the table named ``kind``."""
        table: dict[Group, deque[float]] = getattr(self, kind)
        for g in groups:
            table.setdefault(g, deque(maxlen=self.args.history)).append(value)
            self._quantiles.pop((kind, g), None)

    def observe(self, f: Features, runtime_s: int, *, failed: bool = False) -> None:
        runtime = max(1, min(runtime_s, f.limit_s))
        if failed and self.args.failures:
            self.after_streak[min(self._streak(f), MAX_STREAK)][0] += 1
            self._keep("failures", self._by_failures(f), runtime)
            if f.name:
                self.streaks[_script(f)] = self._streak(f) + 1
            return
        self.after_streak[min(self._streak(f), MAX_STREAK)][1] += 1
        self.streaks.pop(_script(f), None)
        if f.name:
            self._keep("runtimes", self._by_name(f), runtime)
        self._keep("ratios", self._by_owner(f), runtime / f.limit_s)

    def _quantile(self, kind: str, g: Group) -> float | None:
        """The group's quantile in the table named ``kind``; None under min_history."""
        key = (kind, g)
        if key not in self._quantiles:
            history = getattr(self, kind).get(g, ())
            enough = len(history) >= self.args.min_history
            values = np.fromiter(history, np.float64, count=len(history))
            self._quantiles[key] = (
                float(np.quantile(values, self.args.quantile)) if enough else None
            )
        return self._quantiles[key]

    def _first(self, kind: str, groups: tuple[Group, ...]) -> float | None:
        """The quantile of the first of ``groups`` with enough history."""
        return next((q for g in groups if (q := self._quantile(kind, g)) is not None), None)

    def completed(self, f: Features) -> float:
        """Seconds a run of ``f`` that does not fail is expected to take (not bounded)."""
        runtime = self._first("runtimes", self._by_name(f)) if f.name else None
        if runtime is not None:
            return runtime
        ratio = self._first("ratios", self._by_owner(f))
        return f.limit_s if ratio is None else ratio * f.limit_s

    def fail_chance(self, f: Features) -> float:
        """How often a run failed after as many failures in a row as ``f``'s script has
        now, with one completed run counted besides (0 before any such run failed)."""
        failed, completed = self.after_streak[min(self._streak(f), MAX_STREAK)]
        return failed / (failed + completed + 1)

    def predict(self, f: Features) -> int:
        estimate = self.completed(f)
        chance = self.fail_chance(f)
        if chance:
            failed = self._first("failures", self._by_failures(f))
            if failed is not None:
                estimate -= chance * max(0.0, estimate - failed)
        return max(1, min(f.limit_s, round(estimate)))


def with_estimate(job: Job, predictor: RuntimePredictor, name: str = "") -> Job:
    """``job`` carrying the predictor's estimate of its runtime."""
    return replace(job, runtime_estimate_s=predictor.predict(Features.of(job, name)))
