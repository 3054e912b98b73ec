"""How well a replay's runtime estimates matched, over the trace's time.

For every job that started, its estimate (``JobRecord.predicted_s``: the one
it first started with) is compared with what it ran, its duration capped by
its limit, with the figures of ``policies.prediction_error``.
"""

from __future__ import annotations

from typing import Any

from gpufleet.policies import prediction_error as figures
from gpufleet.sim.driver import SimResult


def prediction_error(result: SimResult, buckets: int = 10) -> dict[str, Any]:
    """The estimates' error overall and per bucket of submit time.

    ``ValueError`` when no job that started carried an estimate: none started, or the
    profile has no ``[predict]``.
    """
    outcomes = [
        figures.Outcome(
            r.submit_time,
            r.predicted_s,
            min(r.trace.duration_s, r.job.time_limit_s),
            r.job.time_limit_s,
        )
        for r in result.jobs
        if r.predicted_s >= 0
    ]
    if not outcomes:
        if any(r.first_start >= 0 for r in result.jobs):
            raise ValueError(
                "no job carried a runtime estimate: the profile needs a [predict] table"
            )
        raise ValueError(
            f"none of the {len(result.jobs)} jobs started on the cluster, so no runtime "
            "estimate was made (does the cluster have nodes or [[pools]] that fit them?)"
        )
    return figures.prediction_error(outcomes, result.start, buckets)
