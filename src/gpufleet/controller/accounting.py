"""GPU-hours from job runs, and the job history the simulator replays.

Usage counts each run's milli-GPU (fractions their share, MIG slices their
compute share) over the part of the run inside the asked range; a run still
going counts up to ``now``. The export writes one line per finished job in
the simulator's history format (``sim/traces/history.py``): the job's last
run is its duration, its submission its arrival, so replaying the file asks
the simulator for the work the cluster actually did.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator

import sqlalchemy as sa

from gpufleet.adapters.store import tables as t
from gpufleet.controller.views import UsageKey, UsageRow

_EXPORTED = ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "PREEMPTED", "NODE_FAIL")


def usage(
    conn: sa.Connection,
    *,
    start: float,
    end: float,
    by: UsageKey,
    now: float,
    user: str | None = None,
) -> list[UsageRow]:
    """GPU-hours per ``by`` key of the runs overlapping [start, end), largest first."""
    r = t.job_runs
    stmt = sa.select(r.c.job, r.c.start_time, r.c.end_time, r.c.gpu_milli, r.c[by]).where(
        r.c.start_time < end, sa.or_(r.c.end_time.is_(None), r.c.end_time > start)
    )
    if user is not None:
        stmt = stmt.where(r.c.user == user)
    hours: dict[str, float] = defaultdict(float)
    jobs: dict[str, set[int]] = defaultdict(set)
    runs: dict[str, int] = defaultdict(int)
    for row in conn.execute(stmt):
        job, s, e, milli, key = int(row[0]), float(row[1]), row[2], int(row[3]), str(row[4])
        seconds = min(e if e is not None else now, end) - max(s, start)
        hours[key] += max(0.0, seconds) * milli / 1000 / 3600
        jobs[key].add(job)
        runs[key] += 1
    return sorted(
        (UsageRow(key=k, gpu_hours=h, jobs=len(jobs[k]), runs=runs[k]) for k, h in hours.items()),
        key=lambda u: (-u.gpu_hours, u.key),
    )


def history_lines(
    conn: sa.Connection, *, start: float, end: float, user: str | None = None
) -> Iterator[str]:
    """Finished jobs submitted in [start, end) that ran, as history JSON lines by submission."""
    j, r = t.jobs, t.job_runs
    last = sa.select(r.c.job, sa.func.max(r.c.run).label("run")).group_by(r.c.job).subquery("last")
    stmt = (
        sa.select(
            j.c.job_id,
            j.c.submit_time,
            j.c.request,
            j.c.user,
            j.c.account,
            j.c.qos,
            j.c.partition,
            j.c.time_limit_s,
            j.c.requeue,
            r.c.start_time,
            r.c.end_time,
        )
        .join(last, last.c.job == j.c.id)
        .join(r, sa.and_(r.c.job == last.c.job, r.c.run == last.c.run))
        .where(
            j.c.submit_time >= start,
            j.c.submit_time < end,
            j.c.state.in_(_EXPORTED),
            r.c.end_time.is_not(None),
        )
        .order_by(j.c.submit_time, j.c.id)
    )
    if user is not None:
        stmt = stmt.where(j.c.user == user)
    for row in conn.execute(stmt):
        record = {
            "id": row.job_id,
            "submit_time": int(row.submit_time),
            "duration_s": max(0, round(row.end_time - row.start_time)),
            "request": row.request,
            "user": row.user,
            "account": row.account,
            "qos": row.qos,
            "partition": row.partition,
            "time_limit_s": row.time_limit_s or None,  # 0: no limit, the format's null
            "preemptible": bool(row.requeue),
            "priority_class": "normal",
            "checkpoint_interval_s": None,
        }
        yield json.dumps(record, separators=(",", ":")) + "\n"
