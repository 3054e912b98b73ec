"""``gpufleet sim predict``: the estimates' error over the trace, against the limits'."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli.main import main
from sim.test_sim_cli import NODES, last_json, policy

TRACE = "synthetic:n_jobs=80,seed=2,gpus_total=64,load=1.5,max_duration_s=3600"


def test_predict_reports_error_per_slice_of_the_trace(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sim", "predict", "--cluster", str(NODES), "--trace", TRACE, "--buckets", "4"]
    assert main([*args, "--json"]) == 0
    report = last_json(capsys.readouterr().out)
    buckets, overall = report["buckets"], report["overall"]
    assert isinstance(buckets, list) and isinstance(overall, dict)
    assert [b["jobs"] for b in buckets] == [20, 20, 20, 20]
    assert overall["jobs"] == 80
    # limits round up to the hour and overestimate: the learnt estimates are closer
    assert overall["mae_s"] < overall["limit_mae_s"]
    assert 0 <= overall["under_pct"] <= 100
    assert main(args) == 0
    assert "limit MAE, s" in capsys.readouterr().out


def test_predict_uses_the_profiles_predict_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a quantile near 1 estimates at the top of each history: rarely short
    high = policy(tmp_path, "high", "[predict]\nquantile = 0.99\n")
    low = policy(tmp_path, "low", "[predict]\nquantile = 0.01\n")
    under = {}
    for name, path in (("high", high), ("low", low)):
        args = ["sim", "predict", "--cluster", str(NODES), "--trace", TRACE, "--profile", str(path)]
        assert main([*args, "--json"]) == 0
        overall = last_json(capsys.readouterr().out)["overall"]
        assert isinstance(overall, dict)
        under[name] = overall["under_pct"]
    assert under["high"] < under["low"]


def test_predict_replays_the_cluster_files_pools(capsys: pytest.CaptureFixture[str]) -> None:
    # elastic-cluster.toml has no fixed node: every job runs on a node of its pool
    cluster = Path(__file__).parents[2] / "examples" / "elastic-cluster.toml"
    trace = "synthetic:n_jobs=30,seed=1,gpus_total=64,load=0.5,max_duration_s=3600"
    args = ["sim", "predict", "--cluster", str(cluster), "--trace", trace, "--json"]
    assert main(args) == 0
    overall = last_json(capsys.readouterr().out)["overall"]
    assert isinstance(overall, dict) and overall["jobs"] == 30


def test_a_replay_where_nothing_started_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = '[[nodes]]\nnames = "n1"\ncpu_milli = 1000\nmemory_mib = 1024\n'
    tiny = policy(tmp_path, "tiny", node)  # no GPU: no job of the trace fits
    assert main(["sim", "predict", "--cluster", str(tiny), "--trace", TRACE]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: none of the 80 jobs started") and len(err.splitlines()) == 1
    assert "[predict]" not in err  # the profile is not to blame


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--trace", TRACE, "--buckets", "0"], "--buckets"),
        (["--trace", "nosuch:x"], "nosuch"),
        (["--trace", TRACE, "--trace", TRACE], "given more than once"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sim", "predict", "--cluster", str(NODES), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err
