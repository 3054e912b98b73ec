"""Composable profiles (``extends``), backfill ``mode = "none"``, and the SJF limit warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli.main import main
from gpufleet.policies.config import overlay
from gpufleet.sim.cluster import load_cluster_arg
from gpufleet.sim.grid import GridError, run_grid, spec_from_dict
from gpufleet.sim.metrics import summarize
from gpufleet.sim.profile import (
    ProfileError,
    load_profile,
    profile_from_dict,
    read_profile,
    replay,
)
from gpufleet.sim.traces import load_trace

NODES = str(Path(__file__).parent / "fixtures" / "nodes8x8.csv")
# Contended: FIFO with and without EASY backfill differ on it.
TRACE = "synthetic:n_jobs=200,seed=1,gpus_total=64,max_duration_s=3600,load=1.3"
TIRESIAS = Path(__file__).parent / "traces" / "fixtures" / "tiresias.csv"

PARTITIONS = """
[[partitions]]
name = "gpu"
max_time_s = 86400
default_time_s = 3600

[[partitions]]
name = "debug"
max_time_s = 3600
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("base", "over", "expected"),
    [
        # tables merge key by key
        ({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}}, {"a": {"x": 1, "y": 3}}),
        # a value replaces a value, and a table replaces a value
        ({"a": 1}, {"a": {"x": 1}}, {"a": {"x": 1}}),
        # named tables merge by name: gpu changed, debug kept, cpu appended
        (
            {"p": [{"name": "gpu", "max": 1, "tier": 2}, {"name": "debug"}]},
            {"p": [{"name": "gpu", "max": 5}, {"name": "cpu"}]},
            {"p": [{"name": "gpu", "max": 5, "tier": 2}, {"name": "debug"}, {"name": "cpu"}]},
        ),
        # other arrays are replaced whole
        ({"a": {"nodes": ["n1", "n2"]}}, {"a": {"nodes": ["n3"]}}, {"a": {"nodes": ["n3"]}}),
        # an empty over changes nothing
        ({"a": {"x": 1}}, {}, {"a": {"x": 1}}),
    ],
)
def test_overlay(base: dict[str, Any], over: dict[str, Any], expected: dict[str, Any]) -> None:
    assert overlay(base, over) == expected
    assert overlay({}, base) == base  # the base alone is itself


def test_a_profile_extends_a_base_relative_to_itself(tmp_path: Path) -> None:
    write(tmp_path, "common/partitions.toml", PARTITIONS)
    write(tmp_path, "common/base.toml", 'extends = "partitions.toml"\n[backfill]\nmode = "easy"\n')
    child = write(
        tmp_path,
        "profiles/fifo.toml",
        'extends = "../common/base.toml"\n[ordering]\nplugin = "fifo"\n'
        '[[partitions]]\nname = "debug"\nmax_time_s = 1800\n',
    )
    profile = load_profile(child)
    config = profile.policy.config
    assert (profile.name, config.ordering.plugin, config.backfill and config.backfill.mode) == (
        "fifo",
        "fifo",
        "easy",
    )
    # the child changes debug's limit and keeps the rest of both partitions
    limits = {p.name: (p.max_time_s, p.default_time_s) for p in config.partitions}
    assert limits == {"gpu": (86400, 3600), "debug": (1800, 3600)}


def test_several_bases_are_laid_in_order(tmp_path: Path) -> None:
    write(tmp_path, "a.toml", '[ordering]\nplugin = "sjf"\n[sim]\ninterval_s = 30\n')
    write(tmp_path, "b.toml", '[ordering]\nplugin = "fifo"\n')
    child = write(tmp_path, "c.toml", 'extends = ["a.toml", "b.toml"]\n')
    assert read_profile(child) == {"ordering": {"plugin": "fifo"}, "sim": {"interval_s": 30}}


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"a.toml": 'extends = "a.toml"\n'}, "a.toml leads back to itself"),
        (
            {"a.toml": 'extends = "b.toml"\n', "b.toml": 'extends = "a.toml"\n'},
            "a.toml leads back to itself",
        ),
        ({"a.toml": 'extends = "nowhere.toml"\n'}, "nowhere.toml: no such file"),
        ({"a.toml": "extends = 3\n"}, "extends: must be a file name or a list of them"),
        ({"a.toml": 'extends = "b.toml"\n', "b.toml": "[ordering\n"}, "not valid TOML"),
    ],
)
def test_bad_extends_is_one_line(tmp_path: Path, files: dict[str, str], reason: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ProfileError) as err:
        load_profile(tmp_path / "a.toml")
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_cycle_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path, "a.toml", 'extends = "b.toml"\n')
    write(tmp_path, "b.toml", 'extends = "a.toml"\n')
    assert main(["sim", "run", "--cluster", NODES, "--trace", TRACE, "--profile", str(a)]) == 2
    err = capsys.readouterr().err
    cycle = f"{a.resolve()} -> {(tmp_path / 'b.toml').resolve()} -> {a.resolve()}"
    assert err == f"error: {tmp_path / 'b.toml'}: extends: a.toml leads back to itself ({cycle})\n"


def summary(data: dict[str, Any], name: str = "p") -> dict[str, Any]:
    nodes = load_cluster_arg(NODES)
    jobs = load_trace(TRACE)
    result = summarize(replay(nodes, jobs, profile_from_dict(data, name)))
    return {k: v for k, v in result.items() if k not in ("wall_s", "profile")}


def test_backfill_none_is_a_strict_queue() -> None:
    fifo = {"ordering": {"plugin": "fifo"}}
    none = summary({**fifo, "backfill": {"mode": "none"}})
    assert profile_from_dict({"backfill": {"mode": "none"}}, "p").build([], 0).backfill is None
    assert none == summary(fifo)
    # and backfill would have changed the replay
    assert none != summary({**fifo, "backfill": {"mode": "easy"}})


def test_a_sweep_turns_backfill_off_over_a_base_with_it(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", '[ordering]\nplugin = "fifo"\n[backfill]\nmode = "easy"\n')
    spec = spec_from_dict(
        {"profile": {"extends": "base.toml"}, "grid": {"backfill.mode": ["none", "easy"]}},
        tmp_path,
    )
    off, easy = run_grid(NODES, TRACE, spec, workers=1)
    assert off.settings == {"backfill.mode": "none"}
    strip = {"wall_s", "profile"}
    assert {k: v for k, v in off.summary.items() if k not in strip} == summary(
        {"ordering": {"plugin": "fifo"}}
    )
    assert off.summary["jct_mean_s"] != easy.summary["jct_mean_s"]


def test_a_sweep_base_file_with_a_bad_extends_is_one_line(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", 'extends = "missing.toml"\n')
    with pytest.raises(GridError, match=r"^profile: .*base\.toml: extends: .*missing\.toml"):
        spec_from_dict({"profile": "base.toml", "grid": {"backfill.mode": ["none"]}}, tmp_path)


def test_sjf_without_limits_warns_that_it_orders_by_the_default_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sjf = write(tmp_path, "sjf.toml", '[ordering]\nplugin = "sjf"\n')
    oracle = write(
        tmp_path, "oracle.toml", '[ordering]\nplugin = "sjf"\n[sim]\noracle_limits = true\n'
    )
    args = ["sim", "compare", "--cluster", NODES, "--trace", f"tiresias:{TIRESIAS}", "--json"]
    assert main([*args, "--profile", str(sjf), "--profile", str(oracle)]) == 0
    err = capsys.readouterr().err
    # tiresias lists have no limits: all 3 jobs take their runtime rounded up to 3600 s
    assert err == (
        "warning: sjf: sjf orders by time limit and 3 of 3 jobs have none, so they are ordered "
        "by the default limit, the runtime rounded up to 3600 s (limit_round_s): jobs shorter "
        "than that tie and run in FIFO order; set [sim] oracle_limits = true to order by the "
        "real runtime\n"
    )
    # jobs with limits (the synthetic generator gives every job one) need no warning
    assert main(["sim", "run", "--cluster", NODES, "--trace", TRACE, "--profile", str(sjf)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_sweep_warns_for_its_sjf_points_without_limits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(tmp_path, "spec.toml", '[grid]\n"ordering.plugin" = ["fifo", "sjf"]\n')
    trace = f"tiresias:{TIRESIAS}"
    assert main(["sim", "sweep", "--cluster", NODES, "--trace", trace, "--spec", str(spec)]) == 0
    err = capsys.readouterr().err
    # one warning, for the sjf point alone
    assert err.count("warning: ") == 1
    assert err.startswith("warning: ordering.plugin=sjf: sjf orders by time limit and 3 of 3")
