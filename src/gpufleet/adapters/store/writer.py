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
large ones), before the batch's other units run.
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


@dataclass(slots=True)
class _Unit:
    work: Work | None
    future: Future[Any]
    rows: Rows = ()


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
        with self._lock:
            if self._stopped:
                raise WriterStopped("the store writer is stopped")
            self._queue.put(_Unit(work, future))
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
        with self._lock:
            if self._stopped:
                raise WriterStopped("the store writer is stopped")
            self._queue.put(_Unit(None, future, rows))
        return future

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
                merged: dict[sa.Table, list[Mapping[str, Any]]] = {}
                for u in batch:
                    for table, rows in u.rows:
                        merged.setdefault(table, []).extend(rows)
                for table, rows in merged.items():
                    self.store.insert(conn, table, rows)
                results = [u.work(conn) if u.work is not None else None for u in batch]
        except Exception as e:
            if len(batch) == 1:
                batch[0].future.set_exception(e)
                return
            for unit in batch:
                self._write([unit])
            return
        for unit, result in zip(batch, results, strict=True):
            unit.future.set_result(result)
