"""Liveness: the one route that needs no token."""

from __future__ import annotations

from fastapi import APIRouter

from gpufleet.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The server is up")
def healthz() -> Health:
    """Answers as long as the server accepts requests; no token needed."""
    return Health()
