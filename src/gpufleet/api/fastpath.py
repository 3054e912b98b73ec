"""``POST /v1/jobs`` for a good request, past FastAPI's routing, dependencies and encoders.

Submission is the one route a flood hits, and in the service's one process
FastAPI's per-request machinery (route matching, the dependency graph,
validating a parsed dict, encoding the answer) costs more interpreter time
than the submission itself. This middleware answers the common case alone:
a bearer token the controller remembers, of a role that may submit, and a
body that ``JobSubmit`` accepts, which the service then accepts too. It
parses the body once, straight from JSON bytes, and writes the answer as
bytes.

Anything else (no token, an unknown one, a node token, a body that does not
validate, a submission the service refuses) goes on to the FastAPI route,
the one place that words every error. That is safe because a refused
submission has committed nothing: the route runs it again and refuses it
the same way. The route also still documents the operation in OpenAPI.
"""

from __future__ import annotations

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet.api.auth import USERS
from gpufleet.api.schemas import JobSubmit
from gpufleet.controller.errors import ControllerError
from gpufleet.controller.service import Controller, Principal

PATH = "/v1/jobs"


class SubmitFastPath:
    """ASGI middleware: a good ``POST /v1/jobs`` answered here, all else passed on.

    It sits inside ``problems.Guard``, which has read the whole body into one
    message by then.
    """

    def __init__(self, app: ASGIApp, *, controller: Controller) -> None:
        self.app = app
        self.controller = controller

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        message = await receive()
        whole = message["type"] == "http.request" and not message.get("more_body", False)
        principal = self._principal(scope) if whole else None
        if principal is not None:
            try:
                spec = JobSubmit.model_validate_json(message.get("body", b""))
                submitted = await self.controller.submit_async(principal=principal, spec=spec)
            except (ValidationError, ControllerError):
                pass  # the route words the refusal; nothing was committed
            else:
                body = submitted.model_dump_json().encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200 if submitted.duplicate else 201,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        replay: list[Message] = [message]

        async def again() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, again, send)

    def _principal(self, scope: Scope) -> Principal | None:
        """The remembered principal of the request's bearer token, if it may submit."""
        json_body = False
        token = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credentials = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    token = credentials.strip()
            elif name == b"content-type":
                json_body = value.split(b";")[0].strip().lower() == b"application/json"
        if token is None or not json_body:
            return None
        principal = self.controller.authenticate_cached(token=token)
        return principal if principal is not None and principal.role in USERS else None
