"""Group commit: one thread writes, batching concurrent requests into one transaction.

A commit costs the same whether it carries one submission or a thousand (on
SQLite it is one WAL append; on PostgreSQL one round trip and one flush), so
callers that arrive while a commit is in progress are gathered and written
together by the next one. Each caller gets its result only after the
transaction holding its work has committed.

A failing unit of work must not sink the others in its batch: when a batched
transaction fails, the writer rolls it back and retries every unit alone,
so each caller sees its own result or its own exception.

Plain inserts (``insert``) are merged further: the rows of every insert in a
batch go to the database as one statement per table (PostgreSQL: COPY for
large ones), before the batch's other units run. So are inserts guarded by a
natural key (``insert_new_future``): the batch looks up all their keys in one
query per table, and only the rows whose key is new join the merged insert.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa

from gpufleet.adapters.store.store import Store

T = TypeVar("T")
Work = Callable[[sa.Connection], Any]

MAX_BATCH = 512
"""Most units in one transaction: bounds how long one commit keeps the others waiting."""


Rows = Sequence[tuple[sa.Table, Sequence[Mapping[str, Any]]]]
"""Inserts: each table with its rows (every row of a table with the same keys)."""

Key = tuple[sa.Table, tuple[tuple[str, Any], ...]]
"""A natural key: a table and (column, value) pairs, in a fixed column order."""


@dataclass(slots=True)
class _Unit:
    work: Work | None
    future: Future[Any]
    rows: Rows = ()
    key: Key | None = None


class WriterStopped(RuntimeError):
    """The writer was stopped before it could run the work."""


class GroupWriter:
    """Runs units of work ``fn(conn) -> result`` in as few transactions as possible.

    ``call`` blocks until the unit committed and returns its result (or raises
    its exception); ``submit`` returns a Future instead. A unit must only
    use the connection it is handed, must not commit, and may run twice if
    its batch failed (the first time rolled back), so it must not have side
    effects outside the transaction.
    """

    def __init__(self, store: Store, *, name: str = "store-writer") -> None:
        self.store = store
        self._queue: queue.SimpleQueue[_Unit | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = False
        self._lock = threading.Lock()
        self.batches = 0
        self.units = 0
        self._thread.start()

    def submit(self, work: Callable[[sa.Connection], T]) -> Future[T]:
        """Queue ``work``; the future resolves after its transaction commits."""
        future: Future[T] = Future()
        self._put(_Unit(work, future))
        return future

    def call(self, work: Callable[[sa.Connection], T]) -> T:
        """Run ``work`` in a committed transaction and return its result."""
        return self.submit(work).result()

    def insert(self, rows: Rows) -> None:
        """Insert ``rows`` (tables in dependency order) and return once committed.

        Merged with the batch's other inserts, table by table in the order
        first seen, ahead of its other units.
        """
        self.insert_future(rows).result()

    def insert_future(self, rows: Rows) -> Future[Any]:
        """``insert`` without waiting: the future resolves (to None) once committed."""
        future: Future[Any] = Future()
        self._put(_Unit(None, future, rows))
        return future

    def insert_new_future(self, rows: Rows, key: Key) -> Future[Mapping[str, Any] | None]:
        """``insert_future`` unless a row with ``key`` exists: the future resolves to None
        once the rows are committed, or to the existing row (as a mapping), inserting
        nothing. Within one batch the first of two units with the same key wins."""
        future: Future[Mapping[str, Any] | None] = Future()
        self._put(_Unit(None, future, rows, key))
        return future

    def _put(self, unit: _Unit) -> None:
        with self._lock:
            if self._stopped:
                raise WriterStopped("the store writer is stopped")
            self._queue.put(unit)

    def stop(self) -> None:
        """Finish the queued work, then stop the thread. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    unit = self._queue.get_nowait()
                except queue.Empty:
                    break
                if unit is None:
                    stop = True
                    break
                batch.append(unit)
            self._write(batch)
            if stop:
                return

    def _write(self, batch: list[_Unit]) -> None:
        self.batches += 1
        self.units += len(batch)
        try:
            with self.store.write() as conn:
                results: list[Any] = [None] * len(batch)
                found = _existing(conn, [u.key for u in batch if u.key is not None])
                merged: dict[sa.Table, list[Mapping[str, Any]]] = {}
                for i, u in enumerate(batch):
                    if u.key is not None:
                        if u.key in found:
                            results[i] = found[u.key]
                            continue
                        found[u.key] = u.rows[0][1][0]  # a later unit with this key: this row
                    for table, rows in u.rows:
                        merged.setdefault(table, []).extend(rows)
                for table, rows in merged.items():
                    self.store.insert(conn, table, rows)
                for i, u in enumerate(batch):
                    if u.work is not None:
                        results[i] = u.work(conn)
        except Exception as e:
            if len(batch) == 1:
                batch[0].future.set_exception(e)
                return
            for unit in batch:
                self._write([unit])
            return
        for unit, result in zip(batch, results, strict=True):
            unit.future.set_result(result)


def _existing(conn: sa.Connection, keys: Sequence[Key]) -> dict[Key, Mapping[str, Any]]:
    """The rows that ``keys`` name: one query per table and set of key columns.

    Keys sharing all but their last value are asked with one IN over the last
    column, which SQLite answers from the unique index; a row-value IN
    ((a, b), ...) would make it scan the table.
    """
    groups: dict[tuple[sa.Table, tuple[str, ...]], dict[tuple[Any, ...], list[Any]]] = {}
    for table, pairs in keys:
        columns = tuple(c for c, _ in pairs)
        values = tuple(v for _, v in pairs)
        groups.setdefault((table, columns), {}).setdefault(values[:-1], []).append(values[-1])
    found: dict[Key, Mapping[str, Any]] = {}
    for (table, columns), by_prefix in groups.items():
        *lead, tail = [table.c[c] for c in columns]
        stmt = sa.select(table).where(
            sa.or_(
                *(
                    sa.and_(*(c == v for c, v in zip(lead, prefix, strict=True)), tail.in_(last))
                    for prefix, last in by_prefix.items()
                )
            )
        )
        for row in conn.execute(stmt):
            m = dict(row._mapping)
            found[(table, tuple((c, m[c]) for c in columns))] = m
    return found
