"""The two databases every store and controller test runs against.

SQLite gets a fresh file in the test's temporary directory; PostgreSQL gets
a fresh schema with a unique name, dropped afterwards, so test runs sharing
the database never see each other's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.adapters.store import Store, sqlite_url

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BACKENDS = ["sqlite", "postgresql"]


@dataclass(frozen=True)
class Database:
    """Where one test's store lives: open it as often as the test likes."""

    url: str
    schema: str | None

    def open(self) -> Store:
        return Store(self.url, schema=self.schema)


def database(backend: str, tmp_path: Path) -> Iterator[Database]:
    if backend == "sqlite":
        yield Database(sqlite_url(tmp_path), None)
        return
    db = Database(POSTGRES_URL, f"t_{uuid.uuid4().hex[:16]}")
    try:
        yield db
    finally:
        db.open().drop_schema()


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    yield from database(request.param, tmp_path)


def job_row(pk: int, **overrides: object) -> dict[str, object]:
    """A minimal ``jobs`` row, for tests that write the table directly."""
    return {
        "id": pk,
        "job_id": str(pk),
        "job_num": pk,
        "name": "x",
        "user": "ana",
        "account": "a",
        "partition": "p",
        "qos": "q",
        "state": "PENDING",
        "submit_time": 1.0,
        "time_limit_s": 60,
        "request": {"cpu_milli": 1000},
        "spec": {},
        **overrides,
    }
