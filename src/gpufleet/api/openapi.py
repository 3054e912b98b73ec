"""The OpenAPI document: every route's problem responses, named once here.

Routers declare the failures particular to them (``problems(404, 409)``);
``document`` adds those every route shares: 401 and 403 on secured routes,
400 and 413 where there is a body, 422 where there is any input, 500 everywhere, each an
``application/problem+json`` ``Problem``. FastAPI's own validation-error
schema is replaced, since the API never sends it.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from gpufleet.api.problems import PROBLEM_JSON
from gpufleet.api.schemas import Problem

_REF = "#/components/schemas/Problem"

_WHEN: dict[int, str] = {
    400: "the body is not JSON",
    401: "no token, or an unknown or revoked one",
    403: "the token's role may not do this",
    404: "no such object, or not the caller's",
    409: "the action does not apply to the object's current state",
    413: "the request body is too large",
    422: "a field is invalid; `errors` names each one",
    500: "an unexpected error (a bug; it is logged)",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entries for ``statuses``, each a problem document."""
    return {
        status: {
            "description": _WHEN.get(status, HTTPStatus(status).phrase),
            "content": {PROBLEM_JSON: {"schema": {"$ref": _REF}}},
        }
        for status in statuses
    }


def document(app: FastAPI) -> dict[str, Any]:
    """Build (once) and return ``app``'s OpenAPI document with its problem responses."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for item in doc.get("paths", {}).values():
        for operation in item.values():
            statuses = [500]
            if "parameters" in operation or "requestBody" in operation:
                statuses.append(422)
            if operation.get("security"):
                statuses += [401, 403]
            if "requestBody" in operation:
                statuses += [400, 413]
            responses = operation.setdefault("responses", {})
            for status, response in problems(*statuses).items():
                responses.setdefault(str(status), response)
            if 422 in statuses:
                responses["422"] = problems(422)[422]
            operation["responses"] = dict(sorted(responses.items()))
    app.openapi_schema = doc
    return doc
