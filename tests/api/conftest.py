"""A real controller behind a real server, once on SQLite and once on PostgreSQL.

Each test module gets, per database, a fresh store (the store tests' own
databases: a temporary SQLite file, or a PostgreSQL schema dropped after), a
started ``Controller`` built from a small configuration, the API served by
uvicorn on a free port of 127.0.0.1, and tokens for every role.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.live import client, serve
from gpufleet.api.app import create_app
from gpufleet.controller.config import config_from_dict
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import setup_from_config
from store.databases import BACKENDS, Database, database

CONFIG: dict[str, Any] = {
    "server": {"interval_s": 1, "heartbeat_interval_s": 5, "kill_grace_s": 1},
    "policy": {
        "qos": [{"name": "normal", "priority": 10}, {"name": "high", "priority": 100}],
        "partitions": [
            {"name": "gpu", "nodes": ["n1", "n2"], "default_time_s": 600, "max_time_s": 3600}
        ],
        "accounts": [{"name": "vision"}, {"name": "nlp"}],
    },
    "nodes": [
        {
            "names": "n[1-2]",
            "cpu_milli": 16000,
            "memory_mib": 65536,
            "gpus": {"model": "A100-80GB", "count": 4},
        }
    ],
    "principals": [
        {"name": "root", "role": "admin"},
        {"name": "ops", "role": "operator"},
        {"name": "alice", "role": "user", "accounts": ["vision"]},
        {"name": "bob", "role": "user", "accounts": ["nlp"]},
    ],
}

TOKENS: dict[str, tuple[str, str, str | None]] = {
    # key: (user, role, node)
    "admin": ("root", "admin", None),
    "operator": ("ops", "operator", None),
    "alice": ("alice", "user", None),
    "bob": ("bob", "user", None),
    "n1": ("node-n1", "node", "n1"),
    "n2": ("node-n2", "node", "n2"),
}


@pytest.fixture(scope="module", params=BACKENDS)
def db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Database]:
    """A fresh, empty store on each database, shared by one test module."""
    yield from database(request.param, tmp_path_factory.mktemp("data"))


@dataclass
class Cluster:
    """A served controller: its URL, the controller, and a token per role key."""

    url: str
    controller: Controller
    workdir: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, who: str | None) -> httpx.Client:
        """A client with the token of ``who`` (a TOKENS key), or none."""
        return client(self.url, self.tokens[who] if who else None)


@pytest.fixture(scope="module")
def cluster(db: Database, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    config = config_from_dict(CONFIG, "test")
    setup = setup_from_config(config.build("test"), config.to_dict())
    controller = Controller(setup=setup, db_url=db.url, schema=db.schema)
    controller.start()
    try:
        bootstrap = Principal(user="root", role="admin")
        tokens = {
            key: controller.create_token(
                principal=bootstrap, name=key, user=user, role=role, node=node  # type: ignore[arg-type]
            ).token
            for key, (user, role, node) in TOKENS.items()
        }
        with serve(create_app(controller)) as url:
            yield Cluster(url, controller, tmp_path_factory.mktemp("work"), tokens)
    finally:
        controller.stop()
