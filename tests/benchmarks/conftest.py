"""One quick run of each benchmark command per session (``benchmark_commands``)."""

from __future__ import annotations

import pytest
from benchmark_commands import QuickRuns


@pytest.fixture(scope="session")
def quick_runs(tmp_path_factory: pytest.TempPathFactory) -> QuickRuns:
    return QuickRuns(tmp_path_factory.mktemp("clone"))
