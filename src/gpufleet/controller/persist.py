"""The SQL the controller runs: small functions over an open connection.

Each function does one change or one read and never commits: the caller
decides the transaction (the group writer batches them). Updates and inserts
of many rows go in one ``executemany``.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from gpufleet.adapters.store import tables as t

JobChange = dict[str, Any]
"""Column values for one job row, with its primary key under ``id``."""
NODE_ORDER = "nodes.joined"
"""store_meta key: the names of the nodes agents registered, in the order they joined."""


def token_hash(token: str) -> str:
    """SHA-256 hex of a token: tokens are 32 random bytes, so a fast hash is enough."""
    return hashlib.sha256(token.encode()).hexdigest()


def update_jobs(conn: sa.Connection, changes: Iterable[JobChange]) -> None:
    """Apply each change to its job row; rows changing the same columns share one statement."""
    groups: dict[tuple[str, ...], list[JobChange]] = defaultdict(list)
    for change in changes:
        groups[tuple(sorted(k for k in change if k != "id"))].append(change)
    for columns, rows in groups.items():
        stmt = (
            t.jobs.update()
            .where(t.jobs.c.id == sa.bindparam("b_id"))
            .values({c: sa.bindparam("b_" + c) for c in columns})
        )
        conn.execute(stmt, [{"b_" + k: v for k, v in row.items()} for row in rows])


def add_history(conn: sa.Connection, events: Sequence[Mapping[str, Any]]) -> None:
    """Insert job history rows: ``job`` (pk), ``time``, ``state``, ``reason``."""
    if events:
        conn.execute(t.job_history.insert(), list(events))


def start_runs(conn: sa.Connection, runs: Sequence[Mapping[str, Any]]) -> None:
    """Insert job run rows (their start)."""
    if runs:
        conn.execute(t.job_runs.insert(), list(runs))


def end_runs(conn: sa.Connection, ends: Sequence[Mapping[str, Any]]) -> None:
    """Close runs: each mapping has ``job``, ``run``, ``end_time``, ``outcome``, codes."""
    if not ends:
        return
    stmt = (
        t.job_runs.update()
        .where(t.job_runs.c.job == sa.bindparam("b_job"), t.job_runs.c.run == sa.bindparam("b_run"))
        .values(
            end_time=sa.bindparam("b_end_time"),
            outcome=sa.bindparam("b_outcome"),
            exit_code=sa.bindparam("b_exit_code"),
            signal=sa.bindparam("b_signal"),
        )
    )
    conn.execute(stmt, [{"b_" + k: v for k, v in e.items()} for e in ends])


def audit(
    conn: sa.Connection, *, time: float, who: str, action: str, target: str, detail: Any
) -> None:
    """Append one audit entry."""
    conn.execute(
        t.audit.insert().values(time=time, who=who, action=action, target=target, detail=detail)
    )


def upsert_node(conn: sa.Connection, values: Mapping[str, Any]) -> None:
    """Insert or replace the node row named ``values['name']``."""
    name = values["name"]
    done = conn.execute(t.nodes.update().where(t.nodes.c.name == name).values(**values))
    if done.rowcount == 0:
        conn.execute(t.nodes.insert().values(**values))


def meta_get(conn: sa.Connection, key: str) -> str | None:
    return conn.execute(
        sa.select(t.store_meta.c.value).where(t.store_meta.c.key == key)
    ).scalar_one_or_none()


def meta_set(conn: sa.Connection, key: str, value: str) -> None:
    done = conn.execute(t.store_meta.update().where(t.store_meta.c.key == key).values(value=value))
    if done.rowcount == 0:
        conn.execute(t.store_meta.insert().values(key=key, value=value))


def joined_nodes(conn: sa.Connection) -> list[str]:
    """The nodes agents registered, in the order they first did (``add_joined``)."""
    value = meta_get(conn, NODE_ORDER)
    return list(json.loads(value)) if value else []


def add_joined(conn: sa.Connection, name: str) -> None:
    """Record that ``name`` joined after every node already recorded (once)."""
    names = joined_nodes(conn)
    if name not in names:
        meta_set(conn, NODE_ORDER, json.dumps([*names, name]))


def booting_nodes(conn: sa.Connection) -> list[tuple[str, str, float]]:
    """The pool nodes asked for whose agents have not registered: (name, pool, when)."""
    rows = conn.execute(
        sa.select(t.booting_nodes).order_by(t.booting_nodes.c.created, t.booting_nodes.c.name)
    )
    return [(r.name, r.pool, r.created) for r in rows]


def add_booting(conn: sa.Connection, nodes: Sequence[Mapping[str, Any]]) -> None:
    """Record pool nodes just asked for: ``name``, ``pool``, ``created``."""
    if nodes:
        conn.execute(t.booting_nodes.insert(), list(nodes))


def drop_booting(conn: sa.Connection, name: str) -> None:
    """The node came up or was given up: no longer booting."""
    conn.execute(t.booting_nodes.delete().where(t.booting_nodes.c.name == name))
