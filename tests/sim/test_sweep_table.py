"""``sim sweep``'s table reads at 80 columns, the width rich gives a pipe."""

from __future__ import annotations

import io
import itertools
from typing import Any

from rich.console import Console

from gpufleet.cli.sim_sweep import _table, short_labels
from gpufleet.sim.grid import Run

SUMMARY: dict[str, Any] = {
    "jct_mean_s": 27_606.4,
    "jct_p95_s": 134_891.0,
    "queue_mean_s": 12_046.0,
    "gpu_alloc_mean_pct": 10.44,
    "jain_fairness": 0.438,
    "preemptions": 1_204,
}


def render(settings: list[dict[str, Any]]) -> str:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(_table([Run(s, SUMMARY) for s in settings]))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def test_examples_grid_is_whole_at_80_columns() -> None:
    out = render(
        [
            {"backfill.mode": mode, "placement.plugin": plugin}
            for mode in ("easy", "conservative")
            for plugin in ("best-fit", "default")
        ]
    )
    lines = out.splitlines()
    assert "…" not in out and max(map(len, lines)) <= 80
    header = next(line for line in lines if "JCT mean" in line)
    assert header.split() == ["mode", "plugin", "JCT", "mean", "JCT", "p95", "queue", "GPU",
                              "%", "Jain", "preempt"]  # fmt: skip
    rows = [line.split() for line in lines if "27,606" in line]
    assert [row[:2] for row in rows] == [
        ["easy", "best-fit"], ["easy", "default"],
        ["conservative", "best-fit"], ["conservative", "default"],
    ]  # fmt: skip
    assert rows[0][2:] == ["27,606", "134,891", "12,046", "10.44", "0.438", "1,204"]
    assert "mode = backfill.mode; plugin = placement.plugin" in out


def test_clashing_last_parts_keep_whole_keys() -> None:
    assert short_labels(["ordering.plugin", "placement.plugin", "sim.seed"]) == {
        "ordering.plugin": "ordering.plugin",
        "placement.plugin": "placement.plugin",
        "sim.seed": "seed",
    }
    out = render([{"ordering.plugin": "multifactor", "placement.plugin": "best-fit"}])
    assert "…" not in out and max(map(len, out.splitlines())) <= 80
    assert "ordering.plugin" in out and "placement.plugin" in out and "multifactor" in out


def test_long_value_folds_but_is_never_cut() -> None:
    value = "a-very-long-profile-value-that-cannot-fit-in-one-cell"
    lines = render([{"backfill.mode": value}]).splitlines()
    assert "…" not in "".join(lines) and max(map(len, lines)) <= 80
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    firsts = [line.split()[0] for line in lines[rule + 1 :] if line.strip()]
    assert "".join(itertools.takewhile(lambda part: part in value, firsts)) == value
