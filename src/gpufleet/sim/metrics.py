"""What a replay measured: job completion, waiting, utilisation, fragmentation, fairness.

Definitions (times in seconds; a job's *runtime* is its trace duration; its
*submit* is when the replay submitted it, for a job that follows another
(``TraceJob.after``) later than the trace says; ``JobRecord.submit_time``):

* **JCT** (job completion time): end - submit, over completed jobs; mean,
  p50, p95 and p99 (numpy's linear interpolation).
* **Queueing delay**: first start - submit, over jobs that started.
* **Bounded slowdown**: max(1, JCT / max(runtime, 10)), the 10 s bound
  keeping very short jobs from dominating (Feitelson's definition).
* **Makespan**: the last end minus the first submit.
* **GPU allocation**: allocated milli-GPU integrated over the makespan, over
  capacity x makespan, in percent; and the same integral over the *busy
  period* only, the time when some job waits or runs (the union of each
  schedulable job's [submit, end]), so that a trace with long idle gaps or
  one straggler does not hide how full the cluster was while there was work.
* **Fragmentation**: the FGD measure (``core.fragmentation``) against the
  trace's own request mix, in percent of capacity, averaged over samples.
* **Jain's fairness index** over accounts, while jobs wait: at each sample
  with a non-empty queue, over the accounts with jobs running or waiting,
  x_i = account i's share of the GPUs held over its entitlement (its
  fairshare shares, normalised among those accounts), and
  J = (sum x)^2 / (n sum x^2): 1 when every account holds exactly its
  entitlement, 1/n when one holds everything. The summary is the mean over
  those samples (1 if nobody ever waited). Over a whole replay every
  account ends up with the GPU time it asked for whatever the policy, so
  only the index under contention tells policies apart.
* **Deadlines met**: completed jobs that ended by submit + ``deadline_factor``
  x runtime, over all jobs that had to run.
* **Lost GPU-hours**: work thrown away by preemption and by node failures
  (since the last checkpoint). Work is conserved: allocated GPU-seconds =
  GPU-seconds of completed jobs + lost to preemption + lost to failures +
  lost to ends without completion (time limit, cancellation).

A metric over no jobs is None, never a perfect score: JCT and slowdown
when no job completed, queueing when none started, deadlines when none
could run, and fragmentation and Jain's index when no job ever started.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.core.job import JobState
from gpufleet.sim.driver import JobRecord, SimResult

SLOWDOWN_BOUND_S = 10
GROUPS = ("user", "account", "qos", "partition")
COMPLETED = JobState.COMPLETED.value
NEVER_QUEUED = frozenset({"unschedulable", "unsubmitted"})
"""Final states of jobs that never waited: they fit no node, or what they follow never ended."""

JOB_COLUMNS = (
    "id", "user", "account", "qos", "partition", "gpus", "submit", "first_start", "end",
    "duration", "state", "jct", "queue", "preemptions", "failures", "requeues",
    "allocated_gpu_s", "lost_gpu_s",
)  # fmt: skip
GROUP_COLUMNS = (
    "jobs", "jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s", "queue_mean_s",
    "slowdown_mean", "gpu_hours", "lost_gpu_hours", "share", "entitlement",
)  # fmt: skip
SERIES_COLUMNS = ("time", "alloc_pct", "frag_pct", "pending", "running", "nodes_down")


def _stats(values: Sequence[float], prefix: str) -> dict[str, float | None]:
    """Mean, p50, p95 and p99 of ``values``; all four None when there are none."""
    if not values:
        return {f"{prefix}_{k}_s": None for k in ("mean", "p50", "p95", "p99")}
    a = np.asarray(values, dtype=np.float64)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {
        f"{prefix}_mean_s": float(a.mean()),
        f"{prefix}_p50_s": float(p50),
        f"{prefix}_p95_s": float(p95),
        f"{prefix}_p99_s": float(p99),
    }


def jct(r: JobRecord) -> int:
    return r.end - r.submit_time


def slowdown(r: JobRecord) -> float:
    return max(1.0, jct(r) / max(r.trace.duration_s, SLOWDOWN_BOUND_S))


def lost_gpu_s(r: JobRecord) -> float:
    return r.lost_preemption_gpu_s + r.lost_failure_gpu_s


def jain(shares: Sequence[float], entitlements: Sequence[float]) -> float:
    """Jain's index of share / entitlement over the accounts (1.0 for none or one)."""
    x = np.asarray(shares, dtype=np.float64) / np.asarray(entitlements, dtype=np.float64)
    if len(x) <= 1 or not x.any():
        return 1.0
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


def contended_jain(result: SimResult) -> float:
    """Mean Jain's index over the samples with jobs waiting (see the module docstring)."""
    values = []
    for s in result.samples:
        if not s.pending or not s.accounts:
            continue
        names = sorted(s.accounts)
        held = [s.accounts[a] for a in names]
        total = sum(held)
        if not total:
            continue
        ent = [result.entitlement.get(a, 0.0) for a in names]
        ent_total = sum(ent) or 1.0
        values.append(jain([h / total for h in held], [e / ent_total for e in ent]))
    return float(np.mean(values)) if values else 1.0


def _job_stats(jobs: Sequence[JobRecord]) -> dict[str, float | None]:
    done = [r for r in jobs if r.state == COMPLETED]
    started = [r for r in jobs if r.first_start >= 0]
    out = _stats([jct(r) for r in done], "jct")
    out.update(_stats([r.first_start - r.submit_time for r in started], "queue"))
    out["slowdown_mean"] = float(np.mean([slowdown(r) for r in done])) if done else None
    return out


def busy_seconds(result: SimResult) -> int:
    """Seconds during which some schedulable job waited or ran: the union of [submit, end]."""
    spans = sorted(
        (r.submit_time, r.end if r.end >= 0 else result.end)
        for r in result.jobs
        if r.state not in NEVER_QUEUED
    )
    busy, reach = 0, spans[0][0] if spans else 0
    for lo, hi in spans:
        reach = max(reach, lo)
        if hi > reach:
            busy += hi - reach
            reach = hi
    return busy


def never_started(result: SimResult) -> int:
    """Jobs that never started: unschedulable, unsubmitted, or still waiting or cancelled at
    the end."""
    return sum(1 for r in result.jobs if r.first_start < 0)


def node_failed_jobs(result: SimResult) -> int:
    """Jobs with at least one run cut short by a node failure (requeued or not)."""
    return sum(1 for r in result.jobs if r.failures)


def account_shares(result: SimResult) -> dict[str, tuple[float, float]]:
    """Per account: (share of allocated GPU-seconds, entitlement among these accounts)."""
    used: defaultdict[str, float] = defaultdict(float)
    for r in result.jobs:
        used[r.job.account] += r.allocated_gpu_s
    total = sum(used.values())
    names = sorted(used)
    ent_total = sum(result.entitlement.get(a, 0.0) for a in names) or 1.0
    return {
        a: (used[a] / total if total else 0.0, result.entitlement.get(a, 0.0) / ent_total)
        for a in names
    }


def summarize(result: SimResult, deadline_factor: float = 2.0) -> dict[str, Any]:
    """The headline numbers of one replay (see the module docstring); for a trace whose
    jobs follow others, also ``unsubmitted``: those never submitted (``sim.driver``)."""
    jobs = result.jobs
    states = defaultdict(int, {s: 0 for s in (COMPLETED, "timeout", "cancelled")})
    for r in jobs:
        states[r.state] += 1
    span = max(0, result.end - result.start)
    busy = busy_seconds(result)
    cap = result.capacity_milli
    runnable = [r for r in jobs if r.state not in NEVER_QUEUED]
    met = sum(
        1
        for r in runnable
        if r.state == COMPLETED and r.end <= r.submit_time + deadline_factor * r.trace.duration_s
    )
    # Over an idle cluster, fragmentation and fairness measure nothing.
    ran = any(r.first_start >= 0 for r in jobs)
    frag = [s.frag_milli / cap * 100 for s in result.samples] if cap and ran else []
    hours = 3600.0
    summary: dict[str, Any] = {
        "profile": result.profile,
        "jobs": len(jobs),
        "completed": states[COMPLETED],
        "timeouts": states["timeout"],
        "cancelled": states["cancelled"],
        "unschedulable": states["unschedulable"],
        "unfinished": states["pending"] + states["running"],
    }
    if any(r.trace.after is not None for r in jobs):  # a closed-loop trace
        summary["unsubmitted"] = states["unsubmitted"]
    summary.update(_job_stats(jobs))
    summary.update(
        makespan_s=span,
        gpu_alloc_mean_pct=result.alloc_milli_s / (cap * span) * 100 if cap and span else 0.0,
        busy_s=busy,
        gpu_alloc_busy_pct=result.alloc_milli_s / (cap * busy) * 100 if cap and busy else None,
        frag_mean_pct=float(np.mean(frag)) if frag else None,
        jain_fairness=contended_jain(result) if ran else None,
        deadlines_met_pct=met / len(runnable) * 100 if runnable else None,
        preemptions=sum(r.preemptions for r in jobs),
        requeues=sum(r.requeues for r in jobs),
        node_failures=result.node_failures,
        reconfigurations=result.reconfigurations,
        lost_gpu_hours=sum(lost_gpu_s(r) for r in jobs) / hours,
        lost_preemption_gpu_hours=sum(r.lost_preemption_gpu_s for r in jobs) / hours,
        lost_failure_gpu_hours=sum(r.lost_failure_gpu_s for r in jobs) / hours,
        allocated_gpu_hours=sum(r.allocated_gpu_s for r in jobs) / hours,
        cycles=result.cycles,
        wall_s=result.wall_s,
    )
    if result.fleet is not None:  # what the pools' nodes cost (sim.autoscale)
        summary.update(
            pool_cost=result.fleet.cost,
            pool_gpu_hours=result.fleet.gpu_hours,
            pool_nodes_created=result.fleet.created,
        )
    if result.windows:  # when the policy switched, and to which windows
        summary["windows"] = [{"at": at, "open": list(names)} for at, names in result.windows]
    return summary


_KEYS: dict[str, Callable[[JobRecord], str]] = {
    "user": lambda r: r.job.user,
    "account": lambda r: r.job.account,
    "qos": lambda r: r.job.qos,
    "partition": lambda r: r.job.partition,
}


def by_group(result: SimResult, group: str) -> dict[str, dict[str, float | None]]:
    """Per user, account, QoS or partition: jobs, JCT, queueing, slowdown, GPU-hours.

    As in ``summarize``, a metric over no jobs of the group is None.
    """
    if group not in _KEYS:
        raise ValueError(f"group: must be one of {', '.join(GROUPS)}, got {group!r}")
    members: defaultdict[str, list[JobRecord]] = defaultdict(list)
    for r in result.jobs:
        members[_KEYS[group](r)].append(r)
    shares = account_shares(result) if group == "account" else {}
    out: dict[str, dict[str, float | None]] = {}
    for name in sorted(members):
        rows = members[name]
        stats: dict[str, float | None] = {"jobs": len(rows)}
        stats.update(_job_stats(rows))
        stats["gpu_hours"] = sum(r.allocated_gpu_s for r in rows) / 3600
        stats["lost_gpu_hours"] = sum(lost_gpu_s(r) for r in rows) / 3600
        if name in shares:
            stats["share"], stats["entitlement"] = shares[name]
        out[name] = stats
    return out


def job_rows(result: SimResult) -> list[tuple[object, ...]]:
    """One row per job, aligned with ``JOB_COLUMNS`` (-1 for times that never came)."""
    rows: list[tuple[object, ...]] = []
    for r in result.jobs:
        j, t = r.job, r.trace
        rows.append(
            (
                j.id, j.user, j.account, j.qos, j.partition, round(r.gpus, 3), r.submit_time,
                r.first_start, r.end, t.duration_s, r.state,
                jct(r) if r.end >= 0 else -1,
                r.first_start - r.submit_time if r.first_start >= 0 else -1,
                r.preemptions, r.failures, r.requeues,
                round(r.allocated_gpu_s, 3), round(lost_gpu_s(r), 3),
            )
        )  # fmt: skip
    return rows


def series_rows(result: SimResult) -> list[tuple[object, ...]]:
    """The time series, aligned with ``SERIES_COLUMNS``."""
    cap = result.capacity_milli or 1
    return [
        (
            s.time,
            round(s.alloc_milli / cap * 100, 4),
            round(s.frag_milli / cap * 100, 4),
            s.pending,
            s.running,
            s.nodes_down,
        )
        for s in result.samples
    ]


def _csv_cell(value: float | None) -> object:
    """A metric for CSV: rounded, or empty where it was not measured."""
    return "" if value is None else round(value, 4)


def write_tables(out: Path, result: SimResult, suffix: str = "") -> list[Path]:
    """Write ``jobs{suffix}.csv``, ``series{suffix}.csv`` and ``groups{suffix}.csv`` into ``out``.

    ``groups`` has one row per (group, name): per user, account, QoS and partition.
    """
    out.mkdir(parents=True, exist_ok=True)
    group_rows: list[tuple[object, ...]] = []
    for group in GROUPS:
        for name, stats in by_group(result, group).items():
            cells = (_csv_cell(stats.get(k)) for k in GROUP_COLUMNS)
            group_rows.append((group, name, *cells))
    tables = {
        "jobs": (JOB_COLUMNS, job_rows(result)),
        "series": (SERIES_COLUMNS, series_rows(result)),
        "groups": (("group", "name", *GROUP_COLUMNS), group_rows),
    }
    written = []
    for stem, (header, rows) in tables.items():
        path = out / f"{stem}{suffix}.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(rows)
        written.append(path)
    return written
