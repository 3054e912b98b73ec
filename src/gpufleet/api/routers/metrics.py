"""Prometheus metrics: the scheduler's series and the GPUs' under dcgm-exporter's names.

Authenticated like every route: Prometheus sends a bearer token
(``authorization`` in its scrape config). A ``metrics`` token may read this
route and nothing else, so the secret a Prometheus server holds cannot
submit, cancel or read jobs; operators and admins may read it too. Users may
not: the series name every job's user and account.
"""

from __future__ import annotations

import gzip
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from gpufleet.adapters.prometheus import exposition
from gpufleet.api.auth import ControllerDep, require
from gpufleet.controller.service import Principal

router = APIRouter(tags=["metrics"])

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
"""What ``generate_latest`` writes, and what every Prometheus version reads."""

Scraper = Annotated[Principal, Depends(require("metrics", "operator", "admin"))]


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {TEXT_FORMAT: {}}, "description": "the text format"}},
)
def metrics(_: Scraper, controller: ControllerDep, request: Request) -> Response:
    """Queue, scheduler, node, partition, fairshare and per-GPU series, read at scrape time
    (``docs/metrics.md`` lists them); gzip-compressed when the scraper accepts it, as
    Prometheus does."""
    body = exposition(controller)
    if "gzip" not in request.headers.get("accept-encoding", ""):
        return Response(body, media_type=TEXT_FORMAT)
    # The label sets repeat on every line: level 1 already shrinks it about tenfold.
    packed = gzip.compress(body, compresslevel=1)
    return Response(packed, media_type=TEXT_FORMAT, headers={"Content-Encoding": "gzip"})
