"""A self-contained HTML report of one or more replays, with its plots as PNGs beside it.

``write_report(out, results, summaries)`` writes ``report.html`` and five
PNGs into ``out``; the HTML embeds the same PNGs as base64, so it opens
anywhere without a network or the files beside it:

* ``utilisation.png``: GPU allocation and queue length over time, with a
  dashed line where a profile's open policy windows changed (named above it,
  after the profile when the profiles' windows differ);
* ``jct_cdf.png``: the CDF of job completion time, one line per profile;
* ``wait_by_size.png``: mean queueing delay by job size (GPUs);
* ``fairshare.png``: each account's share of GPU time against its entitlement;
* ``fragmentation.png``: FGD fragmentation over time;

followed by a table comparing the profiles' summaries, with the terminal
table's labels and number formats (``labels.SUMMARY_ROWS``). Legends sit
outside the plotting area, so they never cover a bar or a line; long trace
or profile names wrap instead of running off the page.
"""

from __future__ import annotations

import base64
import html
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from gpufleet.sim.driver import SimResult
from gpufleet.sim.labels import NOT_MEASURED_NOTE, SUMMARY_ROWS, metric_cell
from gpufleet.sim.metrics import account_shares, jct

LEGEND_WIDTH = 24
SIZE_BUCKETS = ((0, 1, "<1"), (1, 2, "1"), (2, 4, "2-3"), (4, 8, "4-7"), (8, 1e18, "8+"))

Plot = Callable[[Any, Sequence[SimResult]], None]


def _hours(seconds: Sequence[int]) -> np.ndarray:
    return np.asarray(seconds, dtype=np.float64) / 3600


def _legend(ax: Any) -> None:
    """The axes' legend to the right of the plot, outside it (the figure lays out
    with "constrained"); none when nothing was drawn (matplotlib would warn).

    Labels wrap at ``LEGEND_WIDTH`` characters, so a long profile name does not
    squeeze the plot away."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        wrapped = [textwrap.fill(label, LEGEND_WIDTH) for label in labels]
        ax.figure.legend(handles, wrapped, loc="outside right upper", fontsize="small")


def window_marks(results: Sequence[SimResult]) -> list[tuple[float, str]]:
    """Where the utilisation plot marks a change of the open policy windows: hours from
    the start, and the windows then open (``base`` for none).

    Every profile's changes are marked, so a profile without windows compared first hides
    nothing; when the profiles' changes differ, each label starts with its profile.
    """
    marks = [
        [((at - r.start) / 3600, "+".join(names) or "base") for at, names in r.windows]
        for r in results
    ]
    if all(m == marks[0] for m in marks):
        return marks[0] if marks else []
    named = zip(results, marks, strict=True)
    return [(x, f"{r.profile}: {label}") for r, m in named for x, label in m]


def _utilisation(ax: Any, results: Sequence[SimResult]) -> None:
    twin = ax.twinx()
    for r in results:
        t = _hours([s.time - r.start for s in r.samples])
        cap = r.capacity_milli or 1
        ax.step(t, [s.alloc_milli / cap * 100 for s in r.samples], where="post", label=r.profile)
        twin.step(t, [s.pending for s in r.samples], where="post", linestyle=":", alpha=0.6)
    for x, label in window_marks(results):
        ax.axvline(x, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(label, (x, 1), xycoords=("data", "axes fraction"), fontsize="x-small")
    ax.set(xlabel="hours", ylabel="GPU allocated, %", title="Utilisation (solid), queue (dotted)")
    twin.set_ylabel("jobs waiting")
    _legend(ax)


def _jct_cdf(ax: Any, results: Sequence[SimResult]) -> None:
    for r in results:
        values = np.sort([jct(j) for j in r.jobs if j.state == "completed"])
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), label=r.profile)
    ax.set_xscale("symlog")
    ax.set(xlabel="job completion time, s", ylabel="fraction of jobs", title="JCT CDF")
    _legend(ax)


def _wait_by_size(ax: Any, results: Sequence[SimResult]) -> None:
    width = 0.8 / max(1, len(results))
    x = np.arange(len(SIZE_BUCKETS))
    for k, r in enumerate(results):
        means = []
        for lo, hi, _ in SIZE_BUCKETS:
            waits = [
                j.first_start - j.submit_time
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


def _table(summaries: Sequence[dict[str, Any]]) -> str:
    """The summaries side by side: one row per ``SUMMARY_ROWS`` entry, by its label."""
    head = "".join(f"<th class='name'>{html.escape(str(s['profile']))}</th>" for s in summaries)
    rows = "".join(
        f"<tr><th>{html.escape(label)}</th>"
        + "".join(f"<td>{html.escape(metric_cell(s.get(key), fmt))}</td>" for s in summaries)
        + "</tr>"
        for key, label, fmt in SUMMARY_ROWS
    )
    unmeasured = any(s.get(key) is None for s in summaries for key, _, _ in SUMMARY_ROWS)
    note = f"<caption>{html.escape(NOT_MEASURED_NOTE)}</caption>" if unmeasured else ""
    return f"<table>{note}<tr><th>metric</th>{head}</tr>{rows}</table>"


def write_report(
    out: Path, results: Sequence[SimResult], summaries: Sequence[dict[str, Any]], title: str
) -> list[Path]:
    """Write the PNGs and ``report.html`` into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    figures: list[str] = []
    for name, plot in PLOTS.items():
        # A bare Figure draws with Agg and touches no pyplot state.
        fig = Figure(figsize=(9, 4), layout="constrained")
        plot(fig.subplots(), results)
        path = out / f"{name}.png"
        fig.savefig(path, dpi=100)
        written.append(path)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        figures.append(f'<h2>{name.replace("_", " ")}</h2><img src="data:image/png;base64,{data}">')
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;max-width:60em;margin:auto}"
        # A trace path or profile name has no spaces to break at: let it break anywhere.
        ".name{overflow-wrap:anywhere;word-break:break-word}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;"
        "text-align:right}tr>th:first-child{text-align:left;font-weight:normal}"
        "th.name{font-weight:bold;max-width:20em}caption{caption-side:bottom}"
        "img{max-width:100%}</style></head><body>"
        f"<h1 class='name'>{html.escape(title)}</h1><h2>summary</h2>{_table(summaries)}"
        + "".join(figures)
        + "</body></html>"
    )
    report = out / "report.html"
    report.write_text(page, encoding="utf-8")
    written.append(report)
    return written
