"""benchmarks/api_load.py --quick: a real controller, its API and a crash, in seconds.

Keeps the benchmark working as the controller changes: the last line is the
JSON result with every key the documentation quotes, and a controller killed
in the middle of a submission burst loses no acknowledged submission and
starts no job twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "api_load.py"
KEYS = {
    "submit_per_s_sqlite",
    "submit_per_s_postgres",
    "array_10k_s",
    "read_p99_ms",
    "crash_acknowledged",
    "crash_lost",
    "crash_duplicated",
}


@pytest.mark.slow  # starts five controllers, an agent and a dozen client processes
def test_quick_run_reports_every_figure_and_a_clean_crash() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.keys() >= KEYS
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
