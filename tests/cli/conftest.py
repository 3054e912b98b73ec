"""One real ``gpufleet up`` per test module, with tokens for an admin, an operator
(``ops``) and two users (``ada``, ``bob``); see ``live.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cli.live import SITE, Up, running_up


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with running_up(tmp_path_factory.mktemp("up") / "data", SITE) as up:
        yield up
