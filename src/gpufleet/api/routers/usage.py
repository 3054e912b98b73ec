"""Accounting: GPU-hours per key, and the history export the simulator replays."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from gpufleet.api.auth import ControllerDep, User
from gpufleet.api.schemas import MAX_UNIX_TIME
from gpufleet.controller.views import UsageKey, UsageRow

router = APIRouter(prefix="/v1/usage", tags=["usage"])

Start = Annotated[float, Query(ge=0, le=MAX_UNIX_TIME, description="Unix time; default 0")]
End = Annotated[
    float | None, Query(ge=0, le=MAX_UNIX_TIME, description="Unix time, exclusive; default now")
]


@router.get("", summary="GPU-hours by user, account, partition or QoS")
def usage(
    who: User,
    controller: ControllerDep,
    start: Start = 0.0,
    end: End = None,
    by: UsageKey = "user",
) -> list[UsageRow]:
    """GPU-hours of runs clipped to [start, end), one row per key (a user sees its own)."""
    return controller.usage(
        principal=who, start=start, end=time.time() if end is None else end, by=by
    )


@router.get(
    "/export",
    summary="Finished jobs as history JSONL",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}, "description": "one job a line"}},
)
def export(
    who: User, controller: ControllerDep, start: Start = 0.0, end: End = None
) -> StreamingResponse:
    """Jobs submitted in [start, end) that have finished, one JSON object a line, as
    ``gpufleet sim run --trace history:FILE`` reads them."""
    lines = controller.export_usage(
        principal=who, start=start, end=time.time() if end is None else end
    )
    # Pull the first line here so that a refusal is a problem response, not a
    # stream cut short after its 200 status went out.
    first = next(lines, None)
    body: Iterator[str] = lines if first is None else itertools.chain([first], lines)
    return StreamingResponse(body, media_type="application/x-ndjson")
