"""How a replay's summary reads, in the terminal table and the HTML report alike.

``SUMMARY_ROWS`` lists ``(key, label, format)`` for each summary metric shown,
in the order shown: ``key`` as in ``metrics.summarize``'s dict and the JSON
output, ``label`` for people, ``format`` a ``str.format`` pattern.
"""

from __future__ import annotations

SUMMARY_ROWS = (
    ("jobs", "jobs", "{:,}"),
    ("completed", "completed", "{:,}"),
    ("unschedulable", "unschedulable", "{:,}"),
    ("timeouts", "timed out", "{:,}"),
    ("cancelled", "cancelled", "{:,}"),
    ("unfinished", "unfinished", "{:,}"),
    ("node_failed", "hit by node failure", "{:,}"),
    ("jct_mean_s", "JCT mean, s", "{:,.0f}"),
    ("jct_p50_s", "JCT p50, s", "{:,.0f}"),
    ("jct_p95_s", "JCT p95, s", "{:,.0f}"),
    ("jct_p99_s", "JCT p99, s", "{:,.0f}"),
    ("queue_mean_s", "queueing mean, s", "{:,.0f}"),
    ("slowdown_mean", "bounded slowdown", "{:,.2f}"),
    ("makespan_s", "makespan, s", "{:,}"),
    ("gpu_alloc_mean_pct", "GPU allocated, %", "{:.2f}"),
    ("gpu_alloc_busy_pct", "GPU allocated while busy, %", "{:.2f}"),
    ("frag_mean_pct", "fragmentation, %", "{:.2f}"),
    ("jain_fairness", "Jain's index", "{:.3f}"),
    ("deadlines_met_pct", "deadlines met, %", "{:.1f}"),
    ("preemptions", "preemptions", "{:,}"),
    ("requeues", "requeues", "{:,}"),
    ("lost_gpu_hours", "GPU-hours lost", "{:,.1f}"),
    ("wall_s", "wall time, s", "{:.1f}"),
)

NOT_MEASURED = "n/a"
NOT_MEASURED_NOTE = f"{NOT_MEASURED}: no job to measure (none completed, started or ran)"


def metric_cell(value: object, fmt: str) -> str:
    """``value`` formatted by ``fmt``, or ``n/a`` for a metric over no jobs (None)."""
    return NOT_MEASURED if value is None else fmt.format(value)
