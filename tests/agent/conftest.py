"""Fixtures for agent tests: a runner on a temporary state directory, and launches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.support import Launches
from gpufleet.agent.runner import Runner


@pytest.fixture
def launch(tmp_path: Path) -> Launches:
    return Launches(tmp_path)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    runner = Runner(tmp_path / "state", "n1", same_user=True)
    yield runner
    runner.close()
