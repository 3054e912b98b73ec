"""What the fill experiment reports: per-policy summaries, curves, a plot and placements.

Files written by ``write_outputs``:

* ``curves.csv``: ``policy,seed,metric,0,1,...,130``, one row per run and
  metric (``alloc_pct``, ``frag_pct``); column *k* is the value when arrived
  GPU requests reached *k* % of capacity, as in the FGD artifact's tables.
  Then ``refused``, the pods refused so far, and ``refused:TYPE`` for each
  request type (``fill.request_type``) the run refused at least once.
* ``fill.png``: allocation against arrived load, one line per policy (the
  mean over seeds), with the diagonal that a perfect policy would follow;
  a second panel zooms in on the end of the run.
* ``placements-<policy>-<seed>.csv``: one row per task placed, or per pod
  left unplaced (empty ``node`` and ``gpus``); ``gpus`` lists GPU indices on
  the node separated by ``|``, each taking ``gpu_milli``.
"""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.sim.fill import PLACEMENT_COLUMNS, FillRun

METRICS = ("alloc_pct", "frag_pct")


def _by_policy(runs: Sequence[FillRun]) -> dict[str, list[FillRun]]:
    """Runs grouped by policy, in the order policies first appear."""
    groups: dict[str, list[FillRun]] = {}
    for run in runs:
        groups.setdefault(run.policy, []).append(run)
    return groups


def _point(curve: Sequence[float], level: int) -> float:
    """The curve's value at ``level`` % arrived (its last point if it stops short)."""
    return curve[min(level, len(curve) - 1)]


@dataclass(frozen=True)
class FillSummary:
    """One policy over all its seeds.

    ``first_gap_level`` is the lower median over seeds of the first arrived
    level at which allocation trails arrival by a point or more; a seed that
    never trails counts as beyond every level, and None means most never did.
    The lower median is a level some seed actually reached. ``first_refusal_pct``
    is the same for the arrived level of the first refused pod.

    ``refused_by_type`` maps each request type that arrived by 100% arrived to
    ``arrived`` and ``refused`` (pods, mean over seeds) and ``refused_pct``
    (refused over arrived, all seeds pooled).
    """

    policy: str
    alloc_pct_at_100: float
    alloc_pct_at_130: float
    per_seed_at_100: list[float]
    seconds_per_run: float
    frag_pct_at_100: float
    first_gap_level: int | None
    first_refusal_pct: int | None = None
    refused_by_type: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def refused_pct(self) -> float:
        """Share of all pods arrived by 100% arrived that were refused, in percent."""
        arrived = sum(t["arrived"] for t in self.refused_by_type.values())
        refused = sum(t["refused"] for t in self.refused_by_type.values())
        return 100.0 * refused / arrived if arrived else 0.0

    def as_json(self) -> dict[str, object]:
        return {
            "alloc_pct_at_100": round(self.alloc_pct_at_100, 4),
            "alloc_pct_at_130": round(self.alloc_pct_at_130, 4),
            "per_seed_at_100": [round(x, 4) for x in self.per_seed_at_100],
            "seconds_per_run": round(self.seconds_per_run, 4),
            "frag_pct_at_100": round(self.frag_pct_at_100, 4),
            "first_gap_level": self.first_gap_level,
            "first_refusal_pct": self.first_refusal_pct,
            "refused_by_type": {
                k: {m: round(v, 4) for m, v in t.items()} for k, t in self.refused_by_type.items()
            },
        }


def summarize(runs: Sequence[FillRun]) -> list[FillSummary]:
    """One summary per policy, in the order policies first appear in ``runs``."""
    summaries = []
    for policy, group in _by_policy(runs).items():
        at_100 = [run.at(100) for run in group]
        summaries.append(
            FillSummary(
                policy=policy,
                alloc_pct_at_100=statistics.fmean(at_100),
                alloc_pct_at_130=statistics.fmean(run.at(130) for run in group),
                per_seed_at_100=at_100,
                seconds_per_run=statistics.median(run.seconds for run in group),
                frag_pct_at_100=statistics.fmean(_point(run.frag_pct, 100) for run in group),
                first_gap_level=_median_level([run.first_gap_level for run in group]),
                first_refusal_pct=_median_level([run.first_refusal_pct for run in group]),
                refused_by_type=_refusals(group),
            )
        )
    return summaries


def _median_level(levels: Sequence[int | None]) -> int | None:
    """Lower median of per-seed levels, None (never) counting as beyond every level;
    None when most seeds never reached one."""
    beyond = float("inf")
    median = statistics.median_low([beyond if k is None else k for k in levels])
    return None if median == beyond else int(median)


def _refusals(group: Sequence[FillRun]) -> dict[str, dict[str, float]]:
    """Per request type: pods arrived and refused by 100% arrived, mean over the runs,
    and the refused share of all the runs' arrivals, in percent."""
    arrived: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for run in group:
        arrived.update(run.arrived_by_type)
        refused.update(run.refused_by_type)
    return {
        k: {
            "arrived": arrived[k] / len(group),
            "refused": refused[k] / len(group),
            "refused_pct": 100.0 * refused[k] / arrived[k],
        }
        for k in sorted(arrived)
    }


def write_curves(path: Path, runs: Sequence[FillRun]) -> None:
    """``curves.csv``: both metrics of every run, percentages to 4 decimals."""
    levels = max(len(run.alloc_pct) for run in runs)
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["policy", "seed", "metric", *range(levels)])
        for run in runs:
            for metric, curve in zip(METRICS, (run.alloc_pct, run.frag_pct), strict=True):
                out.writerow([run.policy, run.seed, metric, *(f"{x:.4f}" for x in curve)])
            total = [
                sum(c[k] for c in run.refused_curve.values()) for k in range(len(run.alloc_pct))
            ]
            out.writerow([run.policy, run.seed, "refused", *total])
            for kind, counts in run.refused_curve.items():
                out.writerow([run.policy, run.seed, f"refused:{kind}", *counts])


def write_placements(path: Path, run: FillRun) -> None:
    """``placements-<policy>-<seed>.csv``: the run's recorded placements, in arrival order."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(PLACEMENT_COLUMNS)
        out.writerows(run.placements)


def plot_fill(path: Path, runs: Sequence[FillRun]) -> None:
    """``fill.png``: mean allocation curve per policy against arrived load.

    The left panel shows the whole run; the right one zooms in on the last
    60 points of arrived load, where the policies part ways.
    """
    # matplotlib takes a second or more to import, and only this needs it.
    # A bare Figure renders with the Agg canvas and leaves pyplot's global
    # state (and the user's backend) alone.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    whole, zoom = fig.subplots(1, 2)
    last = max(len(run.alloc_pct) for run in runs) - 1
    start = max(0, last - 60)
    lowest = 100.0
    for ax in (whole, zoom):
        ax.plot([0, last], [0, last], color="grey", linestyle=":", label="arrived")
    for policy, group in _by_policy(runs).items():
        n = min(len(run.alloc_pct) for run in group)
        mean = [statistics.fmean(run.alloc_pct[k] for run in group) for k in range(n)]
        label = f"{policy} ({len(group)} seed{'s' if len(group) > 1 else ''})"
        for ax in (whole, zoom):
            ax.plot(range(n), mean, label=label)
        lowest = min(lowest, *mean[start:])
    whole.set_xlim(0, last)
    whole.set_ylim(0, 100)
    zoom.set_xlim(start, last)
    zoom.set_ylim(max(0.0, lowest - 2), 100)
    for ax in (whole, zoom):
        ax.set_xlabel("arrived GPU requests (% of GPU capacity)")
        ax.grid(alpha=0.3)
    whole.set_ylabel("GPU allocation (% of GPU capacity)")
    whole.legend(loc="upper left")
    fig.savefig(path, dpi=110)


def write_outputs(out_dir: Path, runs: Sequence[FillRun]) -> list[Path]:
    """Write every file of the module docstring into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    curves = out_dir / "curves.csv"
    write_curves(curves, runs)
    plot = out_dir / "fill.png"
    plot_fill(plot, runs)
    written = [curves, plot]
    for run in runs:
        path = out_dir / f"placements-{run.policy}-{run.seed}.csv"
        write_placements(path, run)
        written.append(path)
    return written
