"""Shared test configuration: modest hypothesis settings so the suite stays fast.

Property tests run 150 examples each with no per-example deadline (the first
example of a test may pay for numba compilation). Set HYPOTHESIS_PROFILE=thorough
for a longer search before a release.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("default", max_examples=150, deadline=None)
settings.register_profile("thorough", max_examples=2_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The suite runs on two pytest-xdist workers (``-n 2 --dist loadgroup``), each
    # with its own session- and module-scoped fixtures. A file whose fixtures start
    # servers or run benchmarks stays on one worker, and so do all the tests that read
    # the benchmarks' shared quick runs, so each of those starts or runs once.
    for item in items:
        if "quick_runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("quick-runs"))
        elif item.path.parent.name != "docs":
            item.add_marker(pytest.mark.xdist_group(str(item.path)))
