"""How far runtime estimates were off, over time: the figures of ``gpufleet sim predict``
and ``gpufleet predict report``.

An ``Outcome`` is one job that started: when it was submitted, the estimate
it first started with, how long it ran (at most its limit) and its limit,
what schedulers plan with otherwise. ``prediction_error`` splits outcomes
into ``buckets`` of equal count by submit time, so the error shows the
predictor learning, and gives per bucket and overall the estimates' mean
absolute error, their median error relative to the runtime, how often they
fell short, and the limits' same two errors.

``first_estimates`` rebuilds the outcomes of a driver that does not keep
its estimates (the controller): it replays the finished jobs through a
fresh predictor in the order they ended, and takes each job's estimate when
it first started, from the jobs that had ended by then (times are whole
seconds: an end in the same second counts, as it usually freed the room). Both drivers
estimate the waiting jobs again before any cycle that follows a finish, so
that is the estimate a job started with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpufleet.policies.predict import Features, RuntimePredictor


@dataclass(frozen=True, slots=True)
class Outcome:
    """One started job: submit time, first estimate, seconds run (capped by the limit), limit."""

    submit: int
    estimate: int
    actual: int
    limit: int


@dataclass(frozen=True, slots=True)
class Finished:
    """A job that ended by itself: what a predictor sees, when it first started and ended,
    the seconds it ran and whether it failed."""

    features: Features
    submit: int
    first_start: int
    end: int
    ran_s: int
    failed: bool = False


def first_estimates(jobs: Sequence[Finished], predictor: RuntimePredictor) -> list[Outcome]:
    """Each job's estimate at its first start, learnt only from jobs that ended by then.

    ``jobs`` are in the order they ended (ties as the driver told the
    predictor); ``predictor`` is fresh and is trained on all of them.
    """
    ends = sorted(jobs, key=lambda j: j.end)  # stable: ties keep the driver's order
    told = 0
    outcomes = []
    for job in sorted(jobs, key=lambda j: (j.first_start, j.submit)):
        # A job that ends in the second it started must not teach its own estimate.
        while told < len(ends) and ends[told].end <= job.first_start and ends[told] is not job:
            predictor.observe(ends[told].features, ends[told].ran_s, failed=ends[told].failed)
            told += 1
        limit = job.features.limit_s
        outcomes.append(
            Outcome(job.submit, predictor.predict(job.features), min(job.ran_s, limit), limit)
        )
    for job in ends[told:]:
        predictor.observe(job.features, job.ran_s, failed=job.failed)
    return outcomes


def _errors(jobs: Sequence[Outcome], start: int) -> dict[str, Any]:
    actual = np.array([o.actual for o in jobs], np.float64)
    estimate = np.array([o.estimate for o in jobs], np.float64)
    limit = np.array([o.limit for o in jobs], np.float64)
    runtime = np.maximum(actual, 1.0)
    return {
        "from_s": min(o.submit for o in jobs) - start,
        "to_s": max(o.submit for o in jobs) - start,
        "jobs": len(jobs),
        "mae_s": float(np.mean(np.abs(estimate - actual))),
        "median_error_pct": float(np.median(np.abs(estimate - actual) / runtime) * 100),
        "under_pct": float(np.mean(estimate < actual) * 100),
        "limit_mae_s": float(np.mean(np.abs(limit - actual))),
        "limit_median_error_pct": float(np.median(np.abs(limit - actual) / runtime) * 100),
    }


def prediction_error(outcomes: Sequence[Outcome], start: int, buckets: int = 10) -> dict[str, Any]:
    """The estimates' error overall and per bucket of submit time (see the module docstring).

    Times (``from_s``, ``to_s``) count from ``start``. ``ValueError`` when
    there is no outcome.
    """
    jobs = sorted(outcomes, key=lambda o: o.submit)
    if not jobs:
        raise ValueError("no job carried a runtime estimate")
    parts = [p for p in np.array_split(np.arange(len(jobs)), buckets) if len(p)]
    return {
        "overall": _errors(jobs, start),
        "buckets": [_errors([jobs[i] for i in p], start) for p in parts],
    }
