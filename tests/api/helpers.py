"""Small helpers for the API tests: a job body, problem assertions, a token made over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from gpufleet.api.problems import PROBLEM_JSON


def job(workdir: Path, **fields: Any) -> dict[str, Any]:
    """A submission body: one GPU, ``true``, in ``workdir``; ``fields`` override."""
    body: dict[str, Any] = {"command": ["true"], "workdir": str(workdir), "gpus_per_node": 1}
    body.update(fields)
    return body


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """The problem document of ``response``, after checking its status and shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["title"]
    return body


def token(admin: httpx.Client, user: str, role: str) -> str:
    """A new token for ``user`` with ``role``, made through the API with ``admin``'s client."""
    made = admin.post("/v1/tokens", json={"name": user, "user": user, "role": role})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def fields(response: httpx.Response, status: int = 422) -> set[str]:
    """The fields a problem response names."""
    return {e["field"] for e in problem(response, status)["errors"]}
