"""Authentication and roles at the edge.

Every route but ``/healthz`` depends on ``require(...)``: the bearer token
must name a live principal (else 401 with ``WWW-Authenticate: Bearer``)
whose role is one the route allows (else 403). Ownership (a user's own
jobs, a node's own agent endpoints) is the service's to check: it knows
who owns what.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpufleet.api.schemas import Role
from gpufleet.controller.service import Controller, Principal

USERS: tuple[Role, ...] = ("user", "operator", "admin")
"""People: everyone but node tokens."""
OPERATORS: tuple[Role, ...] = ("operator", "admin")
ADMINS: tuple[Role, ...] = ("admin",)
AGENTS: tuple[Role, ...] = ("node", "admin")
"""Node tokens act for their own node; an admin may act for any node."""

MAX_TOKEN_LENGTH = 256

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    bearerFormat="gf_<43 url-safe characters>",
    description="a token from `gpufleet token create` or `POST /v1/tokens`",
)


# The dependencies are coroutines: a sync one costs a hop to the thread pool per request.
async def get_controller(request: Request) -> Controller:
    """The controller the app was built with."""
    controller: Controller = request.app.state.controller
    return controller


ControllerDep = Annotated[Controller, Depends(get_controller)]


def _unauthorized(detail: str, error: str | None) -> HTTPException:
    challenge = f'Bearer realm="gpufleet", error="{error}"' if error else 'Bearer realm="gpufleet"'
    return HTTPException(401, detail, headers={"WWW-Authenticate": challenge})


Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def _principal(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
    """The caller's principal, from ``Authorization: Bearer TOKEN``; 401 without one.

    A remembered token is answered in the event loop; only another one reads
    the store, in the thread pool."""
    if credentials is None:
        raise _unauthorized("an Authorization: Bearer token is required", None)
    controller: Controller = request.app.state.controller
    token = credentials.credentials
    principal = None
    if len(token) <= MAX_TOKEN_LENGTH:
        principal = controller.authenticate_cached(token=token) or await run_in_threadpool(
            partial(controller.authenticate, token=token)
        )
    if principal is None:
        raise _unauthorized("the token is unknown or revoked", "invalid_token")
    return principal


async def authenticate(request: Request, credentials: Credentials) -> Principal:
    """Any authenticated principal, whatever its role."""
    return await _principal(request, credentials)


def require(*roles: Role) -> Callable[..., Awaitable[Principal]]:
    """A dependency that admits only principals with one of ``roles`` (403 otherwise).

    One dependency with the bearer scheme as its only child: FastAPI resolves
    each dependency per request at a cost, and this runs on every call."""
    allowed = frozenset(roles)

    async def check(request: Request, credentials: Credentials) -> Principal:
        principal = await _principal(request, credentials)
        if principal.role not in allowed:
            raise HTTPException(403, f"the {principal.role} role may not do this")
        return principal

    return check


User = Annotated[Principal, Depends(require(*USERS))]
Operator = Annotated[Principal, Depends(require(*OPERATORS))]
Admin = Annotated[Principal, Depends(require(*ADMINS))]
Agent = Annotated[Principal, Depends(require(*AGENTS))]
