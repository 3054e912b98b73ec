"""benchmarks/vs_slurm.py on a saved export: decisions in Slurm's own state.

Steered to follow Slurm's starts, the imported profile should make most of
Slurm's decisions in the same second, and few much earlier; on the export's
clock (Slurm rounds its holds on it) fewer than counted from the first
submission. The runs are the documented commands' (``test_documented_commands``
checks their keys).
"""

from __future__ import annotations

from benchmark_commands import QuickRuns

SEED1 = (
    "python benchmarks/vs_slurm.py --export benchmarks/data/vs_slurm/seed1/sacct.txt "
    "--conf benchmarks/data/vs_slurm/seed1"
)


def test_decisions_cover_every_start_and_mostly_match_slurms(quick_runs: QuickRuns) -> None:
    decisions = quick_runs.run(f"{SEED1} --json").result()["decisions"]
    shares = [v for k, v in decisions.items() if k.endswith("_pct")]
    assert decisions["jobs"] == 200
    assert abs(sum(shares) - 100) < 0.5
    assert decisions["same_second_pct"] + decisions["1s_before_pct"] >= 70
    assert decisions["over_5s_before_pct"] <= 5


def test_the_exports_clock_starts_fewer_jobs_much_earlier(quick_runs: QuickRuns) -> None:
    day = quick_runs.run(f"{SEED1} --json").result()["decisions"]
    first = quick_runs.run(f"{SEED1} --origin first --json").result()["decisions"]
    assert day["over_5s_before_pct"] < first["over_5s_before_pct"]
