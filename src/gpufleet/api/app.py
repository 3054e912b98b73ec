"""The controller's HTTP API: ``create_app(controller)`` builds the ASGI application.

The app holds no state of its own and manages no lifecycle: whoever serves
it starts the controller before and stops it after. Every route but
``/healthz`` and the dashboard's static page (``/ui/``, ``api.web``) needs a
bearer token, the OpenAPI document included (served at
``/v1/openapi.json``). Every error is ``application/problem+json``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, FastAPI

from gpufleet.api import openapi, problems, web
from gpufleet.api.auth import authenticate
from gpufleet.api.fastpath import SubmitFastPath
from gpufleet.api.routers import (
    agents,
    alerts,
    cluster,
    config,
    dashboard,
    health,
    jobs,
    metrics,
    nodes,
    tokens,
    usage,
    whoami,
)
from gpufleet.controller.service import Controller, Principal

MAX_BODY_BYTES = 2 << 20
"""Requests with a longer body are refused with 413 (a script is capped at 1 MB)."""

VERSION = "1"


def create_app(controller: Controller, *, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The API application serving ``controller``."""
    app = FastAPI(
        title="gpufleet",
        version=VERSION,
        description="The gpufleet controller: jobs, nodes, policy, accounting and agents.",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.controller = controller
    app.state.stopping = False  # see routers.agents.stop_long_polls
    problems.install(app)
    app.add_middleware(SubmitFastPath, controller=controller)  # inside Guard: one body message
    app.add_middleware(problems.Guard, max_body=max_body_bytes)
    for module in (
        health,
        jobs,
        nodes,
        cluster,
        usage,
        tokens,
        config,
        agents,
        dashboard,
        metrics,
        alerts,
        whoami,
    ):
        app.include_router(module.router)
    app.include_router(web.router())

    @app.get("/v1/openapi.json", include_in_schema=False)
    def openapi_json(_: Annotated[Principal, Depends(authenticate)]) -> dict[str, Any]:
        return openapi.document(app)

    return app
