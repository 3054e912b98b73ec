"""How well a replay's runtime estimates matched, over the trace's time.

For every job that started, its estimate (``JobRecord.predicted_s``: the one
it first started with) is compared with what it ran, its duration capped by
its limit; the time limit, what schedulers plan with otherwise, is compared
the same way. ``prediction_error`` splits the jobs into ``buckets`` of equal
count by submit time, so the error shows the predictor learning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpufleet.sim.driver import JobRecord, SimResult


def _errors(jobs: Sequence[JobRecord], start: int) -> dict[str, Any]:
    actual = np.array([min(r.trace.duration_s, r.job.time_limit_s) for r in jobs], np.float64)
    estimate = np.array([r.predicted_s for r in jobs], np.float64)
    limit = np.array([r.job.time_limit_s for r in jobs], np.float64)
    runtime = np.maximum(actual, 1.0)
    return {
        "from_s": int(min(r.trace.submit_time for r in jobs)) - start,
        "to_s": int(max(r.trace.submit_time for r in jobs)) - start,
        "jobs": len(jobs),
        "mae_s": float(np.mean(np.abs(estimate - actual))),
        "median_error_pct": float(np.median(np.abs(estimate - actual) / runtime) * 100),
        "under_pct": float(np.mean(estimate < actual) * 100),
        "limit_mae_s": float(np.mean(np.abs(limit - actual))),
        "limit_median_error_pct": float(np.median(np.abs(limit - actual) / runtime) * 100),
    }


def prediction_error(result: SimResult, buckets: int = 10) -> dict[str, Any]:
    """The estimates' error overall and per bucket of submit time (see the module docstring).

    ``ValueError`` when no job that started carried an estimate (no ``[predict]``).
    """
    jobs = sorted((r for r in result.jobs if r.predicted_s >= 0), key=lambda r: r.trace.submit_time)
    if not jobs:
        raise ValueError("no job carried a runtime estimate: the profile needs a [predict] table")
    parts = [p for p in np.array_split(np.arange(len(jobs)), buckets) if len(p)]
    return {
        "overall": _errors(jobs, result.start),
        "buckets": [_errors([jobs[i] for i in p], result.start) for p in parts],
    }
