"""``gpufleet sim fill`` end to end on a six-node fixture cluster."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpufleet.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KEYS = {
    "alloc_pct_at_100",
    "alloc_pct_at_130",
    "per_seed_at_100",
    "seconds_per_run",
    "frag_pct_at_100",
    "first_gap_level",
    "refused_by_type",
    "first_refusal_pct",
}


def fill(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    trace = ["--nodes", str(FIXTURES / "nodes.csv"), "--pods", str(FIXTURES / "pods.csv")]
    status = main(["sim", "fill", *trace, *args])
    out, err = capsys.readouterr()
    return status, out, err


def results(out: str) -> dict[str, dict[str, object]]:
    doc = json.loads(out.splitlines()[-1])
    assert list(doc) == ["results"]
    return doc["results"]  # type: ignore[no-any-return]


def test_json_results_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = fill(
        capsys, "--policy", "best-fit,random", "--seeds", "42-44", "--workers", "1", "--json"
    )
    assert status == 0
    by_policy = results(out)
    assert list(by_policy) == ["best-fit", "random"]
    for r in by_policy.values():
        assert set(r) == KEYS
        per_seed = r["per_seed_at_100"]
        assert isinstance(per_seed, list) and len(per_seed) == 3
        assert r["alloc_pct_at_100"] == pytest.approx(statistics.fmean(per_seed), abs=1e-3)
        # No pod ever leaves, so allocation can only grow from 100% to 130% arrived.
        assert 0 < r["alloc_pct_at_100"] <= r["alloc_pct_at_130"] <= 100  # type: ignore[operator]
        gap = r["first_gap_level"]
        assert gap is None or (isinstance(gap, int) and 0 < gap <= 130)
    # Progress is one line per run on stderr, none of it on stdout.
    assert len([line for line in err.splitlines() if line.startswith("[")]) == 6
    assert len(out.splitlines()) == 1


def test_defaults_to_the_default_policy_and_seed_42(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = fill(capsys, "--workers", "1", "--json")
    assert status == 0
    by_policy = results(out)
    assert list(by_policy) == ["default"]
    assert len(by_policy["default"]["per_seed_at_100"]) == 1  # type: ignore[arg-type]


def test_seeds_change_the_arrivals(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = fill(capsys, "--policy", "random", "--seeds", "1-4", "--workers", "1", "--json")
    per_seed = results(out)["random"]["per_seed_at_100"]
    assert len(set(per_seed)) > 1  # type: ignore[arg-type]


@pytest.mark.slow  # starting worker processes takes seconds
def test_worker_processes_give_the_same_results(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--policy", "fgd,best-fit", "--seeds", "42,7", "--json")
    _, inline, _ = fill(capsys, *args, "--workers", "1")
    status, pooled, _ = fill(capsys, *args, "--workers", "2")
    assert status == 0
    # Everything but the timing is a function of (trace, policy, seed).
    for a, b in zip(results(inline).values(), results(pooled).values(), strict=True):
        a.pop("seconds_per_run")
        b.pop("seconds_per_run")
        assert a == b


def test_human_output_is_a_table_row_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = fill(capsys, "--policy", "best-fit,fgd", "--workers", "1")
    assert status == 0
    rows = [line for line in out.splitlines() if "best-fit" in line or "fgd" in line]
    assert len(rows) == 2
    assert not out.lstrip().startswith("{")


def test_tune_sets_the_last_level(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, _ = fill(capsys, "--policy", "best-fit", "--tune", "1.1", "--out", str(tmp_path))
    assert status == 0
    header = (tmp_path / "curves.csv").read_text().splitlines()[0].split(",")
    # 1.1 x capacity arrives, so the curve has points at 0..110%.
    assert header[3:] == [str(k) for k in range(111)]
