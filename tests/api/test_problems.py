"""How the edge maps failures to problem+json, with a stand-in for the service.

The stand-in only raises what each case asks for; the behaviour of the real
service is covered by the tests that run it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api.live import client, serve
from gpufleet.api.app import create_app
from gpufleet.api.openapi import document
from gpufleet.api.problems import PROBLEM_JSON
from gpufleet.controller.errors import Conflict, Forbidden, Invalid, NotFound
from gpufleet.controller.service import Principal

TOKENS = {
    "gf_user": Principal(user="alice", role="user"),
    "gf_admin": Principal(user="root", role="admin"),
    "gf_node": Principal(user="node-a", role="node", node="a"),
}


class StandIn:
    """Authenticates the fixed tokens; ``get_job`` raises whatever ``raises`` holds."""

    def __init__(self) -> None:
        self.raises: Exception | None = None

    def authenticate(self, *, token: str) -> Principal | None:
        return TOKENS.get(token)

    authenticate_cached = authenticate

    def get_job(self, **_: Any) -> Any:
        assert self.raises is not None
        raise self.raises


@pytest.fixture(scope="module")
def stand_in() -> StandIn:
    return StandIn()


@pytest.fixture(scope="module")
def url(stand_in: StandIn) -> Iterator[str]:
    with serve(create_app(stand_in, max_body_bytes=1000)) as base:  # type: ignore[arg-type]
        yield base


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"] == "about:blank"
    assert body["title"]
    return body


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (NotFound("job 7 not found"), 404),
        (Forbidden("not yours"), 403),
        (Conflict("job 7 has ended"), 409),
        (RuntimeError("a bug"), 500),
    ],
)
def test_service_errors_map_to_their_status(
    url: str, stand_in: StandIn, exc: Exception, status: int
) -> None:
    stand_in.raises = exc
    with client(url, "gf_user") as c:
        body = _problem(c.get("/v1/jobs/7"), status)
    # A bug's message stays in the log, not in the answer.
    assert (str(exc) in body["detail"]) == (status != 500)


def test_invalid_names_its_field(url: str, stand_in: StandIn) -> None:
    stand_in.raises = Invalid("body.array", "bad range 5-1")
    with client(url, "gf_user") as c:
        body = _problem(c.get("/v1/jobs/7"), 422)
    assert body["errors"] == [{"field": "body.array", "message": "bad range 5-1"}]


def test_no_token_or_a_bad_one_is_401_with_a_challenge(url: str) -> None:
    for token in (None, "gf_nope", "x" * 10_000):
        with client(url, token) as c:
            response = c.get("/v1/jobs/7")
        _problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")
    with httpx.Client(base_url=url) as c:
        response = c.get("/v1/jobs/7", headers={"Authorization": "Basic Zm9vOmJhcg=="})
    _problem(response, 401)


def test_a_role_the_route_does_not_allow_is_403(url: str) -> None:
    with client(url, "gf_node") as c:
        _problem(c.get("/v1/jobs/7"), 403)
    with client(url, "gf_user") as c:
        _problem(c.get("/v1/tokens"), 403)
        _problem(c.post("/v1/agents/a/sync", json={}), 403)


def test_validation_names_every_bad_field(url: str) -> None:
    with client(url, "gf_user") as c:
        body = _problem(
            c.post("/v1/jobs", json={"workdir": "/w", "nodes": 0, "gpus_per_node": -1, "x": 1}),
            422,
        )
    fields = {e["field"] for e in body["errors"]}
    assert fields == {"body.nodes", "body.gpus_per_node", "body.x"}
    assert all(e["message"] for e in body["errors"])


def test_bad_query_and_path_values_name_their_place(url: str) -> None:
    with client(url, "gf_user") as c:
        body = _problem(c.get("/v1/jobs", params={"limit": 0, "state": "NOPE"}), 422)
        assert {e["field"] for e in body["errors"]} == {"query.limit", "query.state.0"}
        body = _problem(c.get("/v1/jobs/abc"), 422)
        assert [e["field"] for e in body["errors"]] == ["path.job_id"]


def test_a_body_that_is_not_json_is_400(url: str) -> None:
    with client(url, "gf_user") as c:
        response = c.post(
            "/v1/jobs", content=b'{"workdir": ', headers={"content-type": "application/json"}
        )
    assert "not valid JSON" in _problem(response, 400)["detail"]


def test_oversize_bodies_are_413_by_length_and_by_stream(url: str) -> None:
    with client(url, "gf_user") as c:
        _problem(c.post("/v1/jobs", json={"workdir": "/" * 2000}), 413)

        def chunks() -> Iterator[bytes]:
            # No Content-Length: the cap must count the streamed bytes.
            yield b'{"workdir": "'
            for _ in range(20):
                yield b"x" * 100
            yield b'"}'

        response = c.post(
            "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
        )
        assert "content-length" not in response.request.headers
        _problem(response, 413)


def test_unknown_routes_and_methods_are_problems(url: str) -> None:
    with client(url, "gf_user") as c:
        _problem(c.get("/v1/nope"), 404)
        _problem(c.delete("/v1/jobs"), 405)


def test_healthz_needs_no_token(url: str) -> None:
    with httpx.Client(base_url=url) as c:
        response = c.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_the_openapi_document_needs_a_token(url: str) -> None:
    with httpx.Client(base_url=url) as c:
        _problem(c.get("/v1/openapi.json"), 401)
    with client(url, "gf_node") as c:
        doc = c.get("/v1/openapi.json").json()
    assert doc["components"]["securitySchemes"]["token"]["scheme"] == "bearer"
    assert "HTTPValidationError" not in doc["components"]["schemas"]


def test_the_openapi_document_describes_every_route() -> None:
    doc = document(create_app(StandIn()))  # type: ignore[arg-type]
    problem_ref = {"schema": {"$ref": "#/components/schemas/Problem"}}
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            responses = operation["responses"]
            ok = [s for s in responses if s.startswith("2")]
            assert ok, where
            assert all(responses[s].get("content") or s == "204" for s in ok), where
            assert responses["500"]["content"] == {PROBLEM_JSON: problem_ref}, where
            if path == "/healthz":
                assert "security" not in operation
                continue
            assert operation["security"] == [{"token": []}], where
            has_input = "parameters" in operation or "requestBody" in operation
            for status in ("401", "403", "422") if has_input else ("401", "403"):
                assert responses[status]["content"] == {PROBLEM_JSON: problem_ref}, where
            if "requestBody" in operation:
                assert {"400", "413"} <= responses.keys(), where
    assert "Problem" in doc["components"]["schemas"]
