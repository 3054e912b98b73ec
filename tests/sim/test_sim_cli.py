"""``gpufleet sim run`` and ``sim compare``: JSON contract, files written, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.cli.main import main

NODES = Path(__file__).parent / "fixtures" / "nodes8x8.csv"
TRACE = "synthetic:n_jobs=60,seed=2,gpus_total=64,max_duration_s=3600"
REQUIRED = (
    "jobs", "jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s", "queue_mean_s", "makespan_s",
    "gpu_alloc_mean_pct", "jain_fairness", "preemptions", "lost_gpu_hours",
)  # fmt: skip


def policy(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def last_json(out: str) -> dict[str, object]:
    data = json.loads(out.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


def test_run_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    easy = policy(tmp_path, "easy", '[ordering]\nplugin = "fifo"\n[backfill]\nmode = "easy"\n')
    args = ["sim", "run", "--cluster", str(NODES), "--trace", TRACE, "--profile", str(easy)]
    assert main([*args, "--json"]) == 0
    summary = last_json(capsys.readouterr().out)
    for key in REQUIRED:
        assert isinstance(summary[key], int | float), key
    assert summary["jobs"] == 60
    assert summary["profile"] == "easy"


def test_run_writes_tables_and_a_self_contained_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["sim", "run", "--cluster", str(NODES), "--trace", TRACE, "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"jobs.csv", "series.csv", "groups.csv", "report.html", "jct_cdf.png"} <= names
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 5
    assert "http" not in html  # nothing to fetch
    assert "JCT mean" in capsys.readouterr().out  # the table still prints


def test_compare_runs_profiles_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = policy(tmp_path, "fifo", '[ordering]\nplugin = "fifo"\n')
    sjf = policy(tmp_path, "sjf", '[ordering]\nplugin = "sjf"\n[sim]\noracle_limits = true\n')
    args = ["sim", "compare", "--cluster", str(NODES), "--trace", TRACE]
    out = tmp_path / "out"
    assert (
        main([*args, "--profile", str(fifo), "--profile", str(sjf), "--json", "--out", str(out)])
        == 0
    )
    profiles = last_json(capsys.readouterr().out)["profiles"]
    assert isinstance(profiles, dict)
    assert list(profiles) == ["fifo", "sjf"]
    assert (out / "jobs-fifo.csv").exists() and (out / "jobs-sjf.csv").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "nope:x.csv"], "unknown trace format 'nope'"),
        (["--trace", "swf:/no/such.swf"], "no such file"),
        (["--trace", TRACE, "--cluster", "/no/nodes.csv"], "no such file"),
        (["--trace", TRACE, "--profile", "BAD"], "ordering.plugin"),
        (["--trace", TRACE, "--profile", "SIM"], "sim.interval_s"),
        (["--trace", TRACE, "--profile", "STR"], "backfill.max_job_test: must be a whole"),
        (["--trace", TRACE, "--profile", "/no/p.toml"], "p.toml: no such file"),
        # Names the cluster lacks: every job there would wait forever.
        (
            ["--trace", TRACE, "--profile", "NODE"],
            "node.toml: partitions.p.nodes: unknown node 'nope' "
            "(the cluster's nodes: n0, n1, n2, n3, n4, ...)",
        ),
        (["--trace", TRACE, "--profile", "POOL"], "pool.toml: partitions.p.pools: unknown pool"),
        (["--trace", TRACE, "--profile", "RES"], "res.toml: reservations.r.nodes: unknown node"),
        (
            ["--trace", TRACE, "--profile", "WIN"],
            "win.toml: windows.night.policy.partitions.p.nodes: unknown node 'nope'",
        ),
        (
            ["--trace", TRACE, "--profile", "ACCT"],
            "acct.toml: partitions.p.allowed_accounts: unknown account 'zzz'",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    files = {
        "BAD": policy(tmp_path, "bad", '[ordering]\nplugin = "random"\n'),
        "SIM": policy(tmp_path, "sim", "[sim]\ninterval_s = -1\n"),
        "STR": policy(tmp_path, "str", '[backfill]\nmax_job_test = "500"\n'),
        "NODE": policy(tmp_path, "node", '[[partitions]]\nname = "p"\nnodes = ["nope"]\n'),
        "POOL": policy(tmp_path, "pool", '[[partitions]]\nname = "p"\npools = ["gpu"]\n'),
        "RES": policy(
            tmp_path,
            "res",
            '[[reservations]]\nname = "r"\nstart = 0\nend = 60\nnodes = ["n1", "nope"]\n',
        ),
        "WIN": policy(
            tmp_path,
            "win",
            '[sim]\ntime_origin = "epoch"\n[[windows]]\nname = "night"\nstart = "20:00"\n'
            '[[windows.policy.partitions]]\nname = "p"\nnodes = ["nope"]\n',
        ),
        "ACCT": policy(
            tmp_path,
            "acct",
            '[[accounts]]\nname = "a"\n[[partitions]]\nname = "p"\nallowed_accounts = ["zzz"]\n',
        ),
    }
    args = [str(files.get(a, a)) for a in args]
    if "--cluster" not in args:
        args += ["--cluster", str(NODES)]
    assert main(["sim", "run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ")
    assert "\n" not in err
    assert message in err


def test_run_takes_a_cluster_toml_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = Path(__file__).parents[1] / "fixtures" / "cluster.toml"
    assert main(["sim", "run", "--cluster", str(cluster), "--trace", TRACE, "--json"]) == 0
    assert last_json(capsys.readouterr().out)["jobs"] == 60
    bad = policy(tmp_path, "cluster", '[[nodes]]\nnames = "n[1-2"\n')
    assert main(["sim", "run", "--cluster", str(bad), "--trace", TRACE]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert "group 1 (n[1-2): names: bad hostlist" in err
