"""The real API app (``create_app``) served on 127.0.0.1 over the stand-in service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from standin import StandIn

from api.live import serve
from gpufleet.api.app import create_app


@pytest.fixture
def stand_in() -> StandIn:
    return StandIn()


@pytest.fixture
def controller_url(stand_in: StandIn) -> Iterator[str]:
    with serve(create_app(stand_in)) as url:  # type: ignore[arg-type]
        yield url
