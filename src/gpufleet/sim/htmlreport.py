"""A self-contained HTML report of one or more replays, with its plots as PNGs beside it.

``write_report(out, results, summaries)`` writes ``report.html`` and five
PNGs into ``out``; the HTML embeds the same PNGs as base64, so it opens
anywhere without a network or the files beside it:

* ``utilisation.png``: GPU allocation and queue length over time;
* ``jct_cdf.png``: the CDF of job completion time, one line per profile;
* ``wait_by_size.png``: mean queueing delay by job size (GPUs);
* ``fairshare.png``: each account's share of GPU time against its entitlement;
* ``fragmentation.png``: FGD fragmentation over time;

followed by a table comparing the profiles' summaries.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from gpufleet.sim.driver import SimResult
from gpufleet.sim.metrics import account_shares, jct

TABLE_KEYS = (
    "jobs", "completed", "unschedulable", "timeouts", "cancelled", "unfinished", "node_failed",
    "jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s", "queue_mean_s",
    "slowdown_mean", "makespan_s", "gpu_alloc_mean_pct", "frag_mean_pct", "jain_fairness",
    "deadlines_met_pct", "preemptions", "requeues", "lost_gpu_hours", "wall_s",
)  # fmt: skip
SIZE_BUCKETS = ((0, 1, "<1"), (1, 2, "1"), (2, 4, "2-3"), (4, 8, "4-7"), (8, 1e18, "8+"))

Plot = Callable[[Any, Sequence[SimResult]], None]


def _hours(seconds: Sequence[int]) -> np.ndarray:
    return np.asarray(seconds, dtype=np.float64) / 3600


def _legend(ax: Any, **where: Any) -> None:
    """A legend, unless nothing was drawn (matplotlib would warn about an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**where)


def _utilisation(ax: Any, results: Sequence[SimResult]) -> None:
    twin = ax.twinx()
    for r in results:
        t = _hours([s.time - r.start for s in r.samples])
        cap = r.capacity_milli or 1
        ax.step(t, [s.alloc_milli / cap * 100 for s in r.samples], where="post", label=r.profile)
        twin.step(t, [s.pending for s in r.samples], where="post", linestyle=":", alpha=0.6)
    ax.set(xlabel="hours", ylabel="GPU allocated, %", title="Utilisation (solid), queue (dotted)")
    twin.set_ylabel("jobs waiting")
    _legend(ax, loc="upper left")


def _jct_cdf(ax: Any, results: Sequence[SimResult]) -> None:
    for r in results:
        values = np.sort([jct(j) for j in r.jobs if j.state == "completed"])
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), label=r.profile)
    ax.set_xscale("symlog")
    ax.set(xlabel="job completion time, s", ylabel="fraction of jobs", title="JCT CDF")
    _legend(ax, loc="lower right")


def _wait_by_size(ax: Any, results: Sequence[SimResult]) -> None:
    width = 0.8 / max(1, len(results))
    x = np.arange(len(SIZE_BUCKETS))
    for k, r in enumerate(results):
        means = []
        for lo, hi, _ in SIZE_BUCKETS:
            waits = [
                j.first_start - j.trace.submit_time
                for j in r.jobs
                if lo <= j.gpus < hi and j.first_start >= 0
            ]
            means.append(float(np.mean(waits)) if waits else 0.0)
        ax.bar(x + k * width, means, width, label=r.profile)
    ax.set_xticks(x + width * (len(results) - 1) / 2, [b[2] for b in SIZE_BUCKETS])
    ax.set(xlabel="GPUs per job", ylabel="mean queueing delay, s", title="Waiting by job size")
    _legend(ax)


def _fairshare(ax: Any, results: Sequence[SimResult]) -> None:
    shares = [account_shares(r) for r in results]
    names = sorted({a for s in shares for a in s})
    x = np.arange(len(names))
    width = 0.8 / (len(results) + 1)
    entitled = [shares[0].get(a, (0.0, 0.0))[1] * 100 for a in names]
    ax.bar(x, entitled, width, color="lightgrey", label="entitlement")
    for k, (r, s) in enumerate(zip(results, shares, strict=True)):
        ax.bar(x + (k + 1) * width, [s.get(a, (0.0, 0.0))[0] * 100 for a in names], width,
               label=r.profile)  # fmt: skip
    ax.set_xticks(x + width * len(results) / 2, names, rotation=45, ha="right", fontsize=7)
    ax.set(ylabel="% of GPU time", title="Share of GPU time per account")
    _legend(ax)


def _fragmentation(ax: Any, results: Sequence[SimResult]) -> None:
    for r in results:
        cap = r.capacity_milli or 1
        t = _hours([s.time - r.start for s in r.samples])
        ax.step(t, [s.frag_milli / cap * 100 for s in r.samples], where="post", label=r.profile)
    ax.set(xlabel="hours", ylabel="% of GPU capacity", title="FGD fragmentation")
    _legend(ax)


PLOTS: dict[str, Plot] = {
    "utilisation": _utilisation,
    "jct_cdf": _jct_cdf,
    "wait_by_size": _wait_by_size,
    "fairshare": _fairshare,
    "fragmentation": _fragmentation,
}


def _cell(value: object) -> str:
    """A summary value for the table: ``n/a`` for a metric over no jobs (None)."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return html.escape(str(value))


def _table(summaries: Sequence[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(s['profile']))}</th>" for s in summaries)
    rows = "".join(
        f"<tr><td>{key}</td>" + "".join(f"<td>{_cell(s.get(key, ''))}</td>" for s in summaries)
        + "</tr>"
        for key in TABLE_KEYS
    )  # fmt: skip
    return f"<table><tr><th>metric</th>{head}</tr>{rows}</table>"


def write_report(
    out: Path, results: Sequence[SimResult], summaries: Sequence[dict[str, Any]], title: str
) -> list[Path]:
    """Write the PNGs and ``report.html`` into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    figures: list[str] = []
    for name, plot in PLOTS.items():
        # A bare Figure draws with Agg and touches no pyplot state.
        fig = Figure(figsize=(8, 4))
        plot(fig.subplots(), results)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=100)
        written.append(path)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        figures.append(f'<h2>{name.replace("_", " ")}</h2><img src="data:image/png;base64,{data}">')
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;max-width:60em;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;"
        "text-align:right}img{max-width:100%}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><h2>summary</h2>{_table(summaries)}"
        + "".join(figures)
        + "</body></html>"
    )
    report = out / "report.html"
    report.write_text(page, encoding="utf-8")
    written.append(report)
    return written
