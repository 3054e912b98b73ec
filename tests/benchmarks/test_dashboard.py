"""benchmarks/dashboard.py --quick: the dashboard's first load on a small store, in seconds.

Keeps the benchmark working as the controller and the page change: the last
line is the JSON result with the contract's keys, counting the nodes and
jobs the store really holds, and the map it timed is not empty.
"""

from __future__ import annotations

import importlib.util
import shutil

from benchmark_commands import QuickRuns


def test_quick_run_reports_the_first_load_of_a_filled_store(quick_runs: QuickRuns) -> None:
    result = quick_runs.of("dashboard.py").result()
    assert list(result)[-3:] == ["first_load_s", "nodes", "jobs"]
    assert (result["nodes"], result["jobs"]) == (50, 1000)
    assert 0 < result["map_s"] <= result["first_load_s"]
    assert result["map_bytes"] > 50 * 8 * 10  # every GPU of every node is in it
    # The browser figure is there exactly when a browser, its driver and selenium are.
    browser = all(shutil.which(c) for c in ("chromium", "chromedriver"))
    browser = browser and importlib.util.find_spec("selenium") is not None
    assert (result["render_s"] is not None) == browser
    assert result["render_s"] is None or result["render_s"] > 0
