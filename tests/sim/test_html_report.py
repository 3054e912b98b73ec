"""The HTML report reads like the terminal table: labels, formats, wrapping names, clear bars."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from gpufleet.cli.main import main
from gpufleet.sim.cluster import load_cluster_arg
from gpufleet.sim.htmlreport import PLOTS, window_marks
from gpufleet.sim.labels import SUMMARY_ROWS
from gpufleet.sim.profile import default_profile, load_profile, replay
from gpufleet.sim.traces import load_trace

NODES = Path(__file__).parent / "fixtures" / "nodes8x8.csv"
TRACE = "synthetic:n_jobs=60,seed=2,gpus_total=64,max_duration_s=3600"
LONG = "a-very-long-profile-name-without-any-space-" * 3


class Rows(HTMLParser):
    """The first table's rows, as lists of cell texts, and each cell's class."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.classes: list[str | None] = []
        self.in_table = self.in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.in_table = True
        elif self.in_table and tag == "tr":
            self.rows.append([])
        elif self.in_table and tag in ("td", "th"):
            self.in_cell = True
            self.rows[-1].append("")
            self.classes.append(dict(attrs).get("class"))

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.in_table = False
        elif tag in ("td", "th"):
            self.in_cell = False

    def handle_data(self, data: str) -> None:
        if self.in_table and self.in_cell:
            self.rows[-1][-1] += data


def test_the_table_has_the_terminal_labels_and_formats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / f"{LONG}.toml"
    profile.write_text('[ordering]\nplugin = "fifo"\n')
    out = tmp_path / "out"
    args = ["sim", "run", "--cluster", str(NODES), "--trace", TRACE, "--profile", str(profile)]
    assert main([*args, "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    page = (out / "report.html").read_text()
    table = Rows()
    table.feed(page)
    header, *body = table.rows
    assert header == ["metric", LONG]
    assert [row[0] for row in body] == [label for _, label, _ in SUMMARY_ROWS]
    for key, label, _ in SUMMARY_ROWS:
        assert key == label or key not in page, key  # no raw key where a label goes
    cells = dict(body)
    assert cells["JCT mean, s"] == f"{summary['jct_mean_s']:,.0f}"
    assert cells["Jain's index"] == f"{summary['jain_fairness']:.3f}"
    assert cells["jobs"] == "60"
    # The long name and the title (the trace) break anywhere rather than overflow.
    assert table.classes[1] == "name"
    assert re.search(r"\.name\{[^}]*overflow-wrap:anywhere", page)
    assert re.search(r"<h1 class='name'>", page)


def test_legends_sit_outside_every_plot() -> None:
    nodes = load_cluster_arg(str(NODES))
    jobs = load_trace(TRACE)
    results = [replay(nodes, jobs, default_profile())]
    for name, plot in PLOTS.items():
        fig = Figure(figsize=(9, 4), layout="constrained")
        ax = fig.subplots()
        plot(ax, results)
        fig.draw_without_rendering()  # lays out, as savefig does
        assert ax.get_legend() is None, name
        (legend,) = fig.legends
        box, plot_area = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= plot_area.x1, name  # to the right of the axes, covering nothing


def test_every_profiles_window_changes_are_marked(tmp_path: Path) -> None:
    examples = Path(__file__).parents[2] / "examples"
    windowed = tmp_path / "windowed.toml"
    # day-night's day window opens 30 minutes into the trace
    base = examples / "day-night.toml"
    windowed.write_text(f'extends = "{base}"\n[sim]\ntime_origin = "2026-03-02T07:30:00Z"\n')
    nodes = load_cluster_arg(str(NODES))
    jobs = load_trace(TRACE)
    plain = replay(nodes, jobs, default_profile())
    day = replay(nodes, jobs, load_profile(windowed))
    alone = window_marks([day])
    assert [label for _, label in alone][:2] == ["base", "day"]
    assert 0 < alone[1][0] < 0.5
    # the first profile has no windows: the second's are still marked, named by profile
    marks = window_marks([plain, day])
    assert marks == [(x, f"windowed: {label}") for x, label in alone]
    assert window_marks([day, day]) == alone  # the same changes: marked once, as they are
    fig = Figure()
    ax = fig.subplots()
    PLOTS["utilisation"](ax, [plain, day])
    assert [t.get_text() for t in ax.texts] == [label for _, label in marks]
