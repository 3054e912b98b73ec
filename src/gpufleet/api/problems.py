"""RFC 9457 problem documents: every error the API returns has this one shape.

``install(app)`` maps each kind of failure to ``application/problem+json``:
request validation (422, each bad field named as ``body.nodes`` or
``query.limit``; 400 when the body is not JSON at all), HTTP errors raised by
the routers or by routing itself (401, 403, 404, 405, ...), and the service's
typed exceptions (404, 403, 422, 409). Anything else is a bug: ``Guard`` logs
it and answers a problem 500 rather than letting the server drop the
connection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.schemas import Problem
from gpufleet.controller import errors

PROBLEM_JSON = "application/problem+json"

log = logging.getLogger("gpufleet.api")


class ProblemResponse(JSONResponse):
    """A JSON response sent as ``application/problem+json``."""

    media_type = PROBLEM_JSON


def problem(
    status: int,
    detail: str = "",
    *,
    errors: Iterable[Mapping[str, str]] = (),
    headers: Mapping[str, str] | None = None,
) -> ProblemResponse:
    """The problem document for ``status``; its title is the status phrase."""
    body = Problem(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        errors=[dict(e) for e in errors],
    )
    return ProblemResponse(body.model_dump(), status_code=status, headers=headers)


def _field(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def _validation(_: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, RequestValidationError)
    errors: list[dict[str, str]] = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            # The body is not JSON at all: nothing to name but the body.
            ctx = err.get("ctx") or {}
            return problem(400, f"the body is not valid JSON: {ctx.get('error', 'parse error')}")
        errors.append({"field": _field(err.get("loc", ())), "message": str(err.get("msg", ""))})
    n = len(errors)
    return problem(422, f"{n} invalid field{'s' if n != 1 else ''}", errors=errors)


def _http(_: Request, exc: Exception) -> ProblemResponse:
    assert isinstance(exc, HTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else ""
    if detail == HTTPStatus(exc.status_code).phrase:
        detail = ""  # Starlette's default detail only repeats the title
    return problem(exc.status_code, detail, headers=exc.headers)


def _service(status: int) -> Any:
    def handle(_: Request, exc: Exception) -> ProblemResponse:
        if isinstance(exc, errors.Invalid):
            fields = [{"field": f, "message": m} for f, m in exc.problems]
            n = len(fields)
            return problem(status, exc.message if n == 1 else f"{n} invalid fields", errors=fields)
        return problem(status, str(exc))

    return handle


SERVICE_ERRORS: Mapping[type[Exception], int] = {
    errors.NotFound: 404,
    errors.Forbidden: 403,
    errors.Invalid: 422,
    errors.Conflict: 409,
}
"""The service's typed exceptions and the status each one answers."""


def install(app: FastAPI) -> None:
    """Register the problem handlers on ``app``."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    for exc_type, status in SERVICE_ERRORS.items():
        app.add_exception_handler(exc_type, _service(status))


class Guard:
    """Outermost ASGI middleware: caps request bodies and turns bugs into a problem 500.

    A body longer than ``max_body`` bytes is refused with 413 before the
    application sees it: at once when ``Content-Length`` says so, otherwise
    as soon as the streamed chunks pass the cap. The body is read here in
    full (it is small by then) and replayed to the application.
    """

    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Built only when needed: a response object per request costs the hot path.
        await problem(413, f"the request body is over {self.max_body} bytes")(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit():
            await problem(400, "Content-Length is not a number")(scope, receive, send)
            return
        if int(length) > self.max_body:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replay: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]

        async def receive_body() -> Message:
            return replay.pop() if replay else await receive()

        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive_body, send_tracked)
        except Exception:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            await problem(500, "an unexpected error; it has been logged")(scope, receive, send)
