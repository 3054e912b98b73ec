"""benchmarks/api_load.py --quick: a real controller, its API and a crash, in seconds.

Keeps the benchmark working as the controller changes: the figures are
measured, and a controller killed in the middle of a submission burst loses
no acknowledged submission and starts no job twice. The run is the
documented command's (``test_documented_commands`` checks its keys).
"""

from __future__ import annotations

import pytest
from benchmark_commands import QuickRuns


@pytest.mark.slow  # starts five controllers, an agent and a dozen client processes
def test_quick_run_reports_every_figure_and_a_clean_crash(quick_runs: QuickRuns) -> None:
    result = quick_runs.of("api_load.py").result()
    assert result["submit_per_s_sqlite"] > 0
    assert result["array_10k_s"] > 0
    assert result["read_p99_ms"] > 0
    # PostgreSQL is measured when it can be reached, and then fully.
    assert result["submit_per_s_postgres"] is None or result["read_p99_ms_postgres"] > 0
    # The crash happened mid-burst, with jobs running, and nothing was lost or doubled.
    assert result["crash_acknowledged"] > 0
    assert result["crash_runs"] > 0
    assert result["crash_runs_after_restart"] > 0
    assert result["crash_lost"] == 0
    assert result["crash_duplicated"] == 0
    assert result["crash_started_twice"] == 0
