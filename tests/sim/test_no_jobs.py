"""A replay where no job can run: metrics over no jobs are n/a, never perfect scores.

Jobs that never ran are counted by outcome in the table, and a replay where
any job never started ends with one warning line on stderr.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.sim.metrics import by_group, summarize, write_tables
from gpufleet.sim.openb import load_nodes
from gpufleet.sim.profile import default_profile, replay
from gpufleet.sim.traces import load_trace

NODES = Path(__file__).parent / "fixtures" / "nodes8x8.csv"
NOT_MEASURED = (
    "jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s", "queue_mean_s", "queue_p50_s",
    "queue_p95_s", "queue_p99_s", "slowdown_mean", "frag_mean_pct", "jain_fairness",
    "deadlines_met_pct",
)  # fmt: skip


@pytest.fixture
def huge(tmp_path: Path) -> str:
    """A trace of one job asking for more GPUs than any cluster has."""
    path = tmp_path / "huge.csv"
    path.write_text("id,submit_time,duration_s,gpus\nbig,0,100,100000\n")
    return f"generic:{path}"


def run(*args: str) -> list[str]:
    return ["sim", "run", "--cluster", str(NODES), *args]


def test_summary_over_no_jobs_is_none_not_perfect(huge: str) -> None:
    result = replay(load_nodes(NODES), load_trace(huge), default_profile())
    summary = summarize(result)
    assert summary["unschedulable"] == 1 and summary["completed"] == 0
    for key in NOT_MEASURED:
        assert summary[key] is None, key
    account = by_group(result, "account")["default"]
    assert account["jct_mean_s"] is None and account["queue_p95_s"] is None


def test_group_csv_leaves_unmeasured_cells_empty(huge: str, tmp_path: Path) -> None:
    result = replay(load_nodes(NODES), load_trace(huge), default_profile())
    write_tables(tmp_path, result)
    row = (tmp_path / "groups.csv").read_text().splitlines()[1].split(",")
    assert row[:3] == ["user", "default", "1"]
    assert row[3:7] == ["", "", "", ""]  # JCT mean, p50, p95, p99


def test_run_table_shows_na_and_warns_once(huge: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run("--trace", huge)) == 0
    captured = capsys.readouterr()
    lines = {line.split("│")[1].strip(): line.split("│")[2].strip()
             for line in captured.out.splitlines() if line.count("│") == 3}  # fmt: skip
    assert lines["JCT p95, s"] == "n/a"
    assert lines["Jain's index"] == "n/a"
    assert lines["deadlines met, %"] == "n/a"
    assert lines["unschedulable"] == "1"
    assert "n/a: no job to measure" in captured.out
    assert captured.err.startswith("warning: ")
    assert "1 of 1 jobs never started (1 fit no node" in captured.err
    assert captured.err.count("\n") == 1


def test_run_json_reports_null_not_perfect(huge: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(run("--trace", huge, "--json")) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    for key in NOT_MEASURED:
        assert summary[key] is None, key
    assert summary["node_failed"] == 0


def test_compare_over_no_jobs(
    huge: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "fifo.toml"
    fifo.write_text('[ordering]\nplugin = "fifo"\n')
    args = ["sim", "compare", "--cluster", str(NODES), "--trace", huge]
    assert main([*args, "--profile", str(fifo), "--profile", str(fifo)]) == 0
    captured = capsys.readouterr()
    assert "n/a" in captured.out
    assert captured.err.count("\n") == 1 and "fifo-1: 1 of 1" in captured.err


def test_sweep_over_no_jobs(huge: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text('[grid]\n"backfill.mode" = ["easy"]\n')
    args = ["sim", "sweep", "--cluster", str(NODES), "--trace", huge, "--spec", str(spec)]
    assert main([*args, "--workers", "1", "--out", str(tmp_path / "out")]) == 0
    assert "n/a" in capsys.readouterr().out
    header, row = (tmp_path / "out" / "sweep.csv").read_text().splitlines()
    assert dict(zip(header.split(","), row.split(","), strict=True))["jct_p95_s"] == ""


def test_report_over_no_jobs_writes_without_warnings(
    huge: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a matplotlib warning would leak to stderr
        assert main(run("--trace", huge, "--out", str(out))) == 0
    assert "<td>n/a</td>" in (out / "report.html").read_text()
    assert "Warning" not in capsys.readouterr().err


def test_a_replay_where_every_job_ran_does_not_warn(capsys: pytest.CaptureFixture[str]) -> None:
    trace = "synthetic:n_jobs=20,seed=2,gpus_total=64,max_duration_s=3600"
    assert main(run("--trace", trace)) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "n/a" not in captured.out


def test_warning_names_jobs_never_submitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "chain.csv"
    path.write_text("id,submit_time,duration_s,gpus,after\nbig,0,100,100000,\nfix,0,10,1,big\n")
    assert main(run("--trace", f"generic:{path}", "--json")) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[-1])["unsubmitted"] == 1
    assert (
        "2 of 2 jobs never started (1 fit no node of the cluster, "
        "1 never submitted: the job they follow never ended)" in captured.err
    )
