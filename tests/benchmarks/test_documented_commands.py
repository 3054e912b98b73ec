"""Every benchmark command in the docs runs as written, in its quick mode.

The benchmarks take minutes, so each command runs with ``--quick`` added
(``benchmark_commands.py`` says how and where): it must exit 0 and end with a
JSON line holding every figure the docs' tables quote (``KEYS``). Every script in
``benchmarks/`` has a quick mode and runs here, whether a page names it or not,
except commands that need what the tests lack (``EXCLUDED``), whose flags are
checked against the script's ``--help`` instead.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from benchmark_commands import (
    ROOT,
    QuickRuns,
    commands_in,
    documented,
    quick,
    script_of,
    scripts,
)


@dataclass(frozen=True)
class Needs:
    """What a script's commands need that the tests do not have, unless given ``unless``."""

    what: str
    unless: str


EXCLUDED = {
    # Its replay of a saved export (--export, --conf) runs like any other command.
    "vs_slurm.py": Needs(
        "submits its workload to a real Slurm (slurmctld, slurmd and slurmdbd), "
        "which CI does not have",
        unless="--export",
    ),
}


def excluded(command: str) -> bool:
    needs = EXCLUDED.get(script_of(command))
    return needs is not None and needs.unless not in shlex.split(command)


def each(names: Iterable[str], leaves: Iterable[str], prefix: str = "") -> set[str]:
    """``[prefix.]NAME.LEAF`` for every name and leaf."""
    return {".".join(filter(None, (prefix, n, leaf))) for n in names for leaf in leaves}


TARGET_FIGURES = (
    "default_at_100",
    "fgd_at_100",
    "lead_at_100",
    "worst_gap",
    "worst_refusal_excess",
    "worst_type",
    "worst_class_excess",
    "worst_class",
    "refused_pct.default",
    "refused_pct.fgd",
    "default_first_refusal_pct",
    "fgd_first_refusal_pct",
)
# The figures each script's JSON must hold, as dotted paths: what its section of
# docs/benchmarks.md quotes (for a script no page names, what its docstring lists).
KEYS: dict[str, set[str]] = {
    # Fill: the table, the 130% line, Speed (wall and CPU s; all runs in one call).
    "fill.py": {"sweep_s"}
    | each(
        ("random", "best-fit", "fgd", "default"),
        (
            "published_at_100",
            "alloc_pct_at_100",
            "per_seed_at_100",
            "alloc_pct_at_130",
            "wall_s",
            "cpu_s",
        ),
        "results",
    ),
    # Where the free capacity sits: a row per policy.
    "fill_waste.py": {"policy"}
    | each(["mean"], ("alloc", "free", "beside_large_share", "stranded", "other"))
    | {"mean.offline_bound"},
    # Other workloads: a row per variant, a column per policy.
    "fill_variants.py": each(
        ("cpu2x", "cpu4x", "share60", "share100", "spec33", "multi30", "whole"),
        ("best-fit", "fgd", "default"),
        "alloc_pct_at_100",
    ),
    # Who is refused: a row per workload (the quick run has openb and spec33).
    "fill_targets.py": each(
        ("openb", "spec33"),
        TARGET_FIGURES,
        "results",
    ),
    "cycle.py": {"full_cycle_median_s", "incremental_cycle_median_s", "peak_rss_mb"},
    "sim_replay.py": {"openb_replay_s", "synthetic_100k_s", "peak_rss_mb"},
    # MIG re-partitioning against the best static layout: the ratio and what it divides.
    "elastic_mig.py": {
        "mig_wait_ratio",
        "planner_mean_wait_s",
        "best_static_mean_wait_s",
        "proportional_static_mean_wait_s",
        "static_layouts_tried",
        "uniform_layouts_usable",
        "reconfigurations",
    },
    # Autoscaling against the pool fixed at its maximum size.
    "elastic_autoscale.py": {
        "autoscale_cost_ratio",
        "autoscale_jct_ratio",
        "autoscale_cost",
        "fixed_cost",
        "autoscale_mean_jct_s",
        "fixed_mean_jct_s",
    },
    "trace_load.py": each(
        ("philly", "generic_mapped", "generic_native"), ("jobs", "seconds", "rows_per_s")
    ),
    # Live controller: the table (a column per store), the crash test's line.
    "api_load.py": {
        f"{figure}_{store}"
        for figure in ("submit_per_s", "submit_held_per_s", "submit_server_cpu_ms")
        for store in ("sqlite", "postgres")
    }
    | {"array_10k_s", "array_10k_s_postgres", "read_p99_ms", "read_p99_ms_postgres"}
    | {"show_p99_ms", "show_p99_ms_postgres", "crash_acknowledged", "crash_lost"}
    | {"crash_duplicated", "crash_started_twice", "crash_runs", "crash_runs_after_restart"},
    "live_cycle.py": {
        "cycle_py_full_s",
        "cycle_py_cold_s",
        "live_first_cycle_s",
        "live_cycle_s",
        "same_state_bare_s",
        "first_to_cycle_py_full",
        "first_to_cycle_py_cold",
        "live_to_same_state_bare",
        "pending_in_book",
    },
    # Replay against real Slurm: the replay columns (the quick run replays an export), and
    # the steered replay's decisions against Slurm's.
    "vs_slurm.py": each(("imported", "gpufleet_cycle"), ("spearman", "far_pct", "mean_diff_s"))
    | each(
        ("decisions",),
        (
            *("same_second_pct", "1s_before_pct", "2_5s_before_pct"),
            *("over_5s_before_pct", "not_before_pct"),
        ),
    ),
    # A row per policy: wall and CPU time, cycles (skipped), mean and peak waiting, deep share.
    "backlog.py": each(
        ("fifo-strict", "fifo-easy", "multifactor-conservative"),
        (
            *("wall_s", "cpu_s", "cycles", "cycles_skipped"),
            *("waiting_mean", "waiting_peak", "share_deep"),
        ),
    ),
    # The contract: its five figures, and each part's time.
    "elastic.py": {
        "pred_jct_over_oracle",
        "pred_jct_over_limits",
        "mig_wait_ratio",
        "autoscale_cost_ratio",
        "autoscale_jct_ratio",
    }
    | each(("predict", "mig", "autoscale"), ["seconds"], "parts"),
    # Runtime prediction: the medians, and each seed's mean JCTs (the quick run has seed 1).
    "elastic_predict.py": {"pred_jct_over_oracle", "pred_jct_over_limits"}
    | each(["1"], ("limits", "predicted", "oracle"), "seeds"),
    "dashboard.py": {"first_load_s", "map_s", "map_bytes", "render_s"},
    "metrics.py": {"scrape_s", "collect_s", "lock_s", "samples", "bytes", "gzip_bytes"},
    "heartbeats.py": {"agents", "heartbeat_p99_ms", "heartbeat_p50_ms", "failover_s"}
    | {"failover_runs_s", "resumed_from_step"},
    # A row per policy, a column per request kind.
    "locality.py": each(
        ("topology", "default", "best-fit", "fgd"),
        ("2gpu", "4gpu", "gang2x4", "gang2x8"),
        "best_locality_pct",
    ),
    "fill_mig.py": each(
        ("best-fit", "fgd", "default"), ("alloc_pct_at_100", "mig_refused_pct"), "results"
    ),
    # A row per setting (as recorded, contended) and policy.
    "placement_departures.py": {
        path
        for setting in ("x1", "x400/8")
        for path in each(
            ("best-fit", "fgd", "default"),
            ("queue_mean_s", "jct_p95_s", "gpu_alloc_mean_pct"),
            f"results.{setting}",
        )
    },
}


# Commands whose figures differ from their script's default run (in quick mode).
COMMAND_KEYS: dict[str, set[str]] = {
    "python benchmarks/fill_targets.py --nodes all --workloads openb,cpu4x,share100,cpu3x,"
    "share80 --json --quick": each(
        ("openb", "cpu4x", "share100", "cpu3x", "share80"), TARGET_FIGURES, "results"
    ),
    "python benchmarks/fill_targets.py --workloads held-out --json --quick": each(
        (
            "cpu3x",
            "share30",
            "share80",
            "spec60",
            "multi20",
            "multi70",
            "multi30-share60",
        ),
        TARGET_FIGURES,
        "results",
    ),
}


def missing(result: dict[str, Any], paths: Iterable[str]) -> list[str]:
    """The dotted paths that ``result`` lacks."""
    gone = []
    for path in sorted(paths):
        node: Any = result
        for key in path.split("."):
            if not isinstance(node, dict) or key not in node:
                gone.append(path)
                break
            node = node[key]
    return gone


def runs() -> list[str]:
    """What runs: each page's commands, and each unnamed script's default."""
    named = documented()
    commands = [c for places in named.values() for _, c in places]
    commands += [f"python benchmarks/{s} --json" for s in scripts() if s not in named]
    return list(dict.fromkeys(quick(c) for c in commands if not excluded(c)))


def test_commands_are_found_in_blocks_and_spans() -> None:
    page = (
        "Run `python benchmarks/a.py --json` or\n"
        "```sh\npython benchmarks/b.py --json --x 1   # a comment\n"
        "python benchmarks/c.py \\\n  --json\ngpufleet sim run\n```\n"
        "`benchmarks/d.py` is a file, not a command; `python benchmarks/e.py --quick`.\n"
    )
    assert commands_in(page) == [
        "python benchmarks/b.py --json --x 1",
        "python benchmarks/c.py --json",
        "python benchmarks/a.py --json",
        "python benchmarks/e.py --quick",
    ]
    assert quick("python benchmarks/e.py --quick") == "python benchmarks/e.py --quick"
    assert quick("python benchmarks/a.py --json") == "python benchmarks/a.py --json --quick"


def test_the_docs_name_the_benchmarks() -> None:
    named = documented()
    assert {"fill.py", "cycle.py", "sim_replay.py", "api_load.py", "dashboard.py"} <= set(named)
    for script, places in named.items():
        for page, command in places:
            assert (ROOT / "benchmarks" / script).is_file(), f"{page}: {command}: no such script"


@pytest.mark.parametrize("script", sorted({script_of(c) for c in runs()}))
def test_every_script_lists_its_figures(script: str) -> None:
    # What its runs below must print.
    assert script in KEYS, (
        f"benchmarks/{script}: give it --quick (seconds, the same JSON keys) and list "
        "the figures the docs quote in KEYS"
    )


def test_every_command_with_figures_of_its_own_is_documented() -> None:
    assert set(COMMAND_KEYS) <= set(runs())


@pytest.mark.parametrize("command", runs())
def test_the_command_runs_quick_and_prints_the_documented_figures(
    command: str, quick_runs: QuickRuns
) -> None:
    result = quick_runs.run(command).result()
    gone = missing(result, COMMAND_KEYS.get(command, KEYS.get(script_of(command), set())))
    assert not gone, f"{command}: its JSON has no {gone}: {result}"


@pytest.mark.parametrize("script", sorted(EXCLUDED))
def test_an_excluded_script_takes_its_documented_flags(script: str) -> None:
    """It cannot run here, so its ``--help`` must at least start and list every flag
    that a page gives it."""
    assert (ROOT / "benchmarks" / script).is_file(), f"{script} is gone: drop it from EXCLUDED"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for page, command in documented().get(script, []):
        if not excluded(command):
            continue  # it runs
        for flag in (w.partition("=")[0] for w in shlex.split(command) if w.startswith("--")):
            listed = re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", done.stdout)
            assert listed, f"{page}: {command}: {script} has no {flag}"
