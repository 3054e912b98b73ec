"""Sizes a typo can blow up have a limit, refused in one line with exit 2:
a synthetic trace's ``n_jobs`` and a sweep grid's number of points."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.sim.grid import MAX_POINTS, GridError, spec_from_dict
from gpufleet.sim.traces import TraceError, load_trace
from gpufleet.sim.traces.synthetic import MAX_JOBS

NODES = str(Path(__file__).parent / "fixtures" / "nodes8x8.csv")
SMALL = "synthetic:n_jobs=20,seed=2,gpus_total=64,max_duration_s=3600"


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_n_jobs_over_the_limit_is_refused_before_drawing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    trace = "synthetic:n_jobs=1000000000000,seed=1,gpus_total=64"
    with pytest.raises(TraceError, match=f"n_jobs: must be at most {MAX_JOBS}, got 1000000000000"):
        load_trace(trace)
    assert main(["sim", "run", "--cluster", NODES, "--trace", trace]) == 2
    assert f"at most {MAX_JOBS}" in one_error_line(capsys)


def test_n_jobs_at_the_limit_is_accepted() -> None:
    # The check itself, without drawing a million jobs: one more is refused, the limit is not.
    with pytest.raises(TraceError):
        load_trace(f"synthetic:n_jobs={MAX_JOBS + 1},seed=1,gpus_total=0")
    with pytest.raises(TraceError, match="gpus_total"):
        load_trace(f"synthetic:n_jobs={MAX_JOBS},seed=1,gpus_total=0")


def test_a_grid_over_the_limit_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1000 x 1000 points, each list long enough that searching it for repeats is slow.
    grid = {
        "ordering.multifactor.weight_age": list(range(1000)),
        "ordering.multifactor.weight_fairshare": list(range(1000)),
    }
    started = time.monotonic()
    with pytest.raises(GridError, match=f"grid: 1000000 points, more than {MAX_POINTS}"):
        spec_from_dict({"grid": grid}, tmp_path)
    assert time.monotonic() - started < 1
    spec = tmp_path / "spec.toml"
    spec.write_text(
        "[grid]\n"
        f'"ordering.multifactor.weight_age" = {list(range(1000))}\n'
        f'"ordering.multifactor.weight_fairshare" = {list(range(1000))}\n'
    )
    args = ["sim", "sweep", "--cluster", NODES, "--trace", SMALL, "--spec", str(spec)]
    assert main(args) == 2
    assert f"more than {MAX_POINTS}" in one_error_line(capsys)


def test_a_grid_at_the_limit_is_accepted(tmp_path: Path) -> None:
    grid = {
        "ordering.multifactor.weight_age": list(range(100)),
        "ordering.multifactor.weight_fairshare": list(range(100)),
    }
    assert len(spec_from_dict({"grid": grid}, tmp_path).points()) == MAX_POINTS
