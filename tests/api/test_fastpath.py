"""POST /v1/jobs answers the same with and without the submission fast path.

Two controllers on fresh SQLite stores run the same requests in the same
order: one app as served, one with ``SubmitFastPath`` taken out, so every
request reaches the FastAPI route. Job ids count from 1 in both, so status,
content type and body must be equal for good submissions, retries and every
kind of refusal alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.conftest import CONFIG
from api.helpers import job
from gpufleet.adapters.store import sqlite_url
from gpufleet.api.app import create_app
from gpufleet.api.fastpath import SubmitFastPath
from gpufleet.controller.config import config_from_dict
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import setup_from_config

ROOT = Principal(user="root", role="admin")


def served(data: Path, *, fast: bool) -> tuple[Controller, Any, dict[str, str]]:
    config = config_from_dict(CONFIG, "test")
    controller = Controller(
        setup=setup_from_config(config.build("test"), config.to_dict()), db_url=sqlite_url(data)
    )
    controller.start(loop=False)
    tokens = {
        who: controller.create_token(
            principal=ROOT, name=who, user=user, role=role, node=node  # type: ignore[arg-type]
        ).token
        for who, user, role, node in [
            ("alice", "alice", "user", None),
            ("ops", "ops", "operator", None),
            ("node", "node-n1", "node", "n1"),
        ]
    }
    app = create_app(controller)
    if not fast:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not SubmitFastPath]
    return controller, app, tokens


@pytest.fixture
def apps(tmp_path: Path) -> Iterator[list[tuple[Any, dict[str, str]]]]:
    made = [served(tmp_path / name, fast=name == "fast") for name in ("fast", "route")]
    yield [(app, tokens) for _, app, tokens in made]
    for controller, _, _ in made:
        controller.stop()


def cases(workdir: Path) -> list[tuple[str | None, dict[str, str], Any]]:
    """(who, extra headers, body): good ones, retries and refusals of every kind."""
    json_ = {"content-type": "application/json"}
    return [
        ("alice", {}, job(workdir)),
        ("alice", {}, job(workdir, request_id="r1", name="first")),
        ("alice", {}, job(workdir, request_id="r1", name="retry")),  # 200, the first job
        ("alice", {}, job(workdir, array="0-3", request_id="a1")),
        ("alice", {}, job(workdir, request_id="a1")),  # a retry naming an array
        ("ops", {}, job(workdir, account="nlp", hold=True)),
        ("alice", {}, job(workdir, account="nlp")),  # not alice's account: 403
        ("alice", {}, job(workdir, partition="nope")),  # 422 from the service
        ("alice", {}, job(workdir, gpus_per_node=-1)),  # 422 from validation
        ("alice", {}, {**job(workdir), "surprise": 1}),  # unknown field
        ("alice", {}, job(workdir, dependency="afterok:999")),  # checked in the transaction
        ("alice", json_, b"{not json"),  # 400
        ("alice", {"content-type": "text/plain"}, b"{}"),
        ("node", {}, job(workdir)),  # a node token: 403
        ("alice-typo", {}, job(workdir)),  # an unknown token: 401
        (None, {}, job(workdir)),  # no token: 401
    ]


def test_the_fast_path_answers_as_the_route_does(
    apps: list[tuple[Any, dict[str, str]]], tmp_path: Path
) -> None:
    async def run(app: Any, tokens: dict[str, str]) -> list[tuple[int, str, Any]]:
        answers = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for who, headers, body in cases(tmp_path):
                headers = dict(headers)
                if who is not None:
                    headers["authorization"] = f"Bearer {tokens.get(who, 'gf_unknown')}"
                if isinstance(body, bytes):
                    r = await client.post("/v1/jobs", content=body, headers=headers)
                else:
                    r = await client.post("/v1/jobs", json=body, headers=headers)
                answers.append((r.status_code, r.headers["content-type"], r.json()))
        return answers

    fast, route = (asyncio.run(run(app, tokens)) for app, tokens in apps)
    assert fast == route
    statuses = [status for status, _, _ in fast]
    assert statuses[:6] == [201, 201, 200, 201, 200, 201]
    assert fast[2][2] == {"job_id": "2", "array_task_count": 0, "duplicate": True}
    # The retry took a number before it was found a retry: the array is 4.
    assert fast[4][2] == {"job_id": "4", "array_task_count": 4, "duplicate": True}
    assert statuses[6:] == [403, 422, 422, 422, 422, 400, 422, 403, 401, 401]
