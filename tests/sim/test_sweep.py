"""``gpufleet sim sweep``: grid expansion, one-line spec errors, worker-count determinism, Ray."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.main import main
from gpufleet.sim.grid import (
    GridError,
    Run,
    SweepSpec,
    absolute_paths,
    run_grid,
    spec_from_dict,
)

NODES = str(Path(__file__).parent / "fixtures" / "nodes8x8.csv")
# Contended enough that FIFO and SJF differ, short enough for ~1 s per replay.
TRACE = "synthetic:n_jobs=200,seed=1,gpus_total=64,max_duration_s=3600"
SMALL = "synthetic:n_jobs=60,seed=2,gpus_total=64,max_duration_s=3600"
ORDERINGS = {
    "profile": {"sim": {"oracle_limits": True}, "backfill": {"mode": "easy"}},
    "grid": {"ordering.plugin": ["fifo", "sjf"]},
}


def spec_file(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def deterministic(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "wall_s"}  # wall time is the one exception


@pytest.fixture(scope="module")
def serial_runs() -> list[Run]:
    """The ordering grid on TRACE, in this process."""
    return run_grid(NODES, TRACE, spec_from_dict(ORDERINGS, Path(".")), workers=1)


def test_points_are_the_product_first_key_slowest() -> None:
    spec = SweepSpec({}, {"a.x": [1, 2], "b": ["p", "q", "r"]})
    points = spec.points()
    # 2 x 3 values -> 6 points; "a.x" changes every 3rd point
    assert [(p["a.x"], p["b"]) for p in points] == [
        (1, "p"), (1, "q"), (1, "r"), (2, "p"), (2, "q"), (2, "r"),
    ]  # fmt: skip


def test_settings_are_laid_over_a_copy_of_the_base() -> None:
    base = {"ordering": {"plugin": "multifactor"}, "placement": {"plugin": "best-fit"}}
    spec = SweepSpec(base, {})
    data = spec.profile_data(
        {"ordering.multifactor.weight_fairshare": 1000, "backfill.mode": "conservative"}
    )
    assert data == {
        "ordering": {"plugin": "multifactor", "multifactor": {"weight_fairshare": 1000}},
        "placement": {"plugin": "best-fit"},
        "backfill": {"mode": "conservative"},  # a table the base lacked is created
    }
    assert base == {"ordering": {"plugin": "multifactor"}, "placement": {"plugin": "best-fit"}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a key the profile schema does not know
        ('[grid]\n"ordering.multifactor.weight_fairshar" = [0, 1]\n',
         "ordering.multifactor.weight_fairshar: unknown key (known: "),
        # a value the profile schema rejects
        ('[grid]\n"backfill.mode" = ["easy", "greedy"]\n', "grid point backfill.mode=greedy:"),
        ('[grid]\n"placement.plugin" = ["best-fit", "worst-fit"]\n', "worst-fit"),
        # a dotted key through a value that is not a table
        ('[profile]\nordering.plugin = "fifo"\n[grid]\n"ordering.plugin.name" = ["x"]\n',
         "grid key 'ordering.plugin.name': ordering.plugin is not a table"),
        ('[grid]\n"backfill.mode" = []\n', "grid.backfill.mode: must be a non-empty list"),
        ('[grid]\n"backfill.mode" = "easy"\n', "grid.backfill.mode: must be a non-empty list"),
        ('[grid]\n"backfill.mode" = ["easy", "easy"]\n', "grid.backfill.mode: 'easy' is listed"),
        ("[profile]\n", "grid: must be a table"),
        ('[grids]\n"backfill.mode" = ["easy"]\n', "grids: unknown key (known: profile, grid)"),
        ('profile = "missing.toml"\n[grid]\n"backfill.mode" = ["easy"]\n', "profile: "),
        ('profile = 3\n[grid]\n"backfill.mode" = ["easy"]\n', "profile: must be a path"),
        ("[grid\n", "not valid TOML"),
    ],
)  # fmt: skip
def test_bad_specs_fail_in_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    spec = spec_file(tmp_path, text)
    args = ["sim", "sweep", "--cluster", NODES, "--trace", SMALL, "--spec", str(spec)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {spec}: ")
    assert message in err
    assert err.count("\n") == 1


def test_a_bad_trace_fails_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec_file(tmp_path, '[grid]\n"backfill.mode" = ["easy"]\n')
    trace = f"tiresias:{tmp_path / 'none.csv'}"
    assert main(["sim", "sweep", "--cluster", NODES, "--trace", trace, "--spec", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "none.csv" in err and err.count("\n") == 1


def test_base_profile_path_is_read_beside_the_spec(tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text('[ordering]\nplugin = "fifo"\n')
    spec = spec_from_dict({"profile": "policy.toml", "grid": {"backfill.mode": ["easy"]}}, tmp_path)
    assert spec.profile_data({"backfill.mode": "easy"}) == {
        "ordering": {"plugin": "fifo"},
        "backfill": {"mode": "easy"},
    }


def test_table_has_a_row_per_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that rich truncates nothing
    spec = spec_file(tmp_path, '[grid]\n"backfill.mode" = ["easy", "conservative"]\n')
    args = ["sim", "sweep", "--cluster", NODES, "--trace", SMALL, "--spec", str(spec)]
    assert main([*args, "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "backfill.mode" in out and "JCT mean" in out and "Jain" in out
    rows = [line for line in out.splitlines() if "easy" in line or "conservative" in line]
    assert len(rows) == 2 and "easy" in rows[0] and "conservative" in rows[1]


def test_serial_points_differ_and_follow_grid_order(serial_runs: list[Run]) -> None:
    fifo, sjf = serial_runs
    assert fifo.settings == {"ordering.plugin": "fifo"}
    assert sjf.settings == {"ordering.plugin": "sjf"}
    assert fifo.summary["jobs"] == sjf.summary["jobs"] == 200
    # shortest-first with oracle limits waits less on a contended trace
    assert sjf.summary["jct_mean_s"] < fifo.summary["jct_mean_s"]


@pytest.mark.slow
def test_two_workers_give_the_serial_results_in_json_and_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], serial_runs: list[Run]
) -> None:
    spec = spec_file(
        tmp_path,
        '[profile]\nsim.oracle_limits = true\nbackfill.mode = "easy"\n'
        '[grid]\n"ordering.plugin" = ["fifo", "sjf"]\n',
    )
    out = tmp_path / "out"
    args = ["sim", "sweep", "--cluster", NODES, "--trace", TRACE, "--spec", str(spec)]
    assert main([*args, "--workers", "2", "--json", "--out", str(out)]) == 0
    runs = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["runs"]
    assert [r["settings"] for r in runs] == [r.settings for r in serial_runs]
    assert [deterministic(r["summary"]) for r in runs] == [
        deterministic(r.summary) for r in serial_runs
    ]
    with (out / "sweep.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["ordering.plugin"] for row in rows] == ["fifo", "sjf"]
    assert [float(row["jct_mean_s"]) for row in rows] == [
        r.summary["jct_mean_s"] for r in serial_runs
    ]


def test_ray_without_the_extra_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    spec = spec_file(tmp_path, '[grid]\n"backfill.mode" = ["easy"]\n')
    args = ["sim", "sweep", "--cluster", NODES, "--trace", SMALL, "--spec", str(spec)]
    assert main([*args, "--ray", "local"]) == 2
    assert capsys.readouterr().err == (
        "error: --ray needs the 'ray' extra: pip install 'gpufleet[ray]'\n"
    )


def test_ray_without_a_cluster_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = spec_file(tmp_path, '[grid]\n"backfill.mode" = ["easy"]\n')
    args = ["sim", "sweep", "--cluster", NODES, "--trace", SMALL, "--spec", str(spec)]
    assert main([*args, "--ray", "auto"]) == 2  # "auto" attaches to a running cluster only
    err = capsys.readouterr().err
    assert err.startswith("error: --ray auto: ") and err.count("\n") == 1


@pytest.mark.slow
def test_local_ray_gives_the_serial_results(serial_runs: list[Run]) -> None:
    runs = run_grid(NODES, TRACE, spec_from_dict(ORDERINGS, Path(".")), ray_address="local")
    assert [r.settings for r in runs] == [r.settings for r in serial_runs]
    assert [deterministic(r.summary) for r in runs] == [
        deterministic(r.summary) for r in serial_runs
    ]


def test_grid_error_is_one_line() -> None:
    with pytest.raises(GridError, match=r"^grid point ordering\.plugin=lifo: ordering\.plugin"):
        spec_from_dict({"grid": {"ordering.plugin": ["fifo", "lifo"]}}, Path("."))


def test_file_paths_travel_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "nodes.csv").write_text("")
    (tmp_path / "jobs.swf").write_text("")
    monkeypatch.chdir(tmp_path)
    assert absolute_paths("nodes.csv", "swf:jobs.swf") == (
        str(tmp_path.resolve() / "nodes.csv"),
        f"swf:{tmp_path.resolve() / 'jobs.swf'}",
    )
    # names that are not files (the bundled cluster, generator options) pass unchanged
    assert absolute_paths("openb", SMALL) == ("openb", SMALL)


ROOT = Path(__file__).resolve().parents[2]
ELASTIC = str(ROOT / "examples" / "elastic-cluster.toml")
AUTOSCALE = {
    "profile": str(ROOT / "examples" / "autoscale.toml"),
    "grid": {"autoscale.idle_s": [300, 1800]},
}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sweep_over_an_elastic_cluster_grows_its_pools(workers: int) -> None:
    # The cluster file has no fixed nodes, only a pool: without its [[pools]] every job
    # would be unschedulable and no node created. Two workers read the file themselves.
    spec = spec_from_dict(AUTOSCALE, Path("."))
    trace = "synthetic:n_jobs=30,seed=1,gpus_total=16,max_duration_s=3600"
    runs = run_grid(ELASTIC, trace, spec, workers=workers)
    assert [r.settings for r in runs] == [{"autoscale.idle_s": 300}, {"autoscale.idle_s": 1800}]
    for r in runs:
        assert r.summary["pool_nodes_created"] > 1
        assert r.summary["jobs"] == 30


def test_a_sweep_point_capping_a_pool_the_cluster_lacks_fails_before_any_run() -> None:
    spec = spec_from_dict({**AUTOSCALE, "grid": {"autoscale.max_nodes.ghost": [1]}}, Path("."))
    with pytest.raises(GridError, match=r"^grid point autoscale\.max_nodes\.ghost=1: .*ghost"):
        run_grid(ELASTIC, SMALL, spec)
