"""Numpy columns over immutable objects (jobs, running jobs), kept across cycles.

A driver hands every cycle a fresh sequence of jobs, most of them the very
objects it handed the cycle before. ``Rows`` gives each object a row the
first time it is seen and finds it again by identity (a dictionary by
``id``), so what a job fixes (its time limit, its QoS, its request shape)
is extracted from it once, not once per cycle. A changed job is a new object
and gets a new row, so nothing stale is ever read. Rows hold a reference to
their object, so an identity cannot be reused while its row lives; once
rows outnumber twice the longest sequence asked since the columns last
started, they start afresh (a short one asked now and then, such as a
single job, so keeps the queue's rows).

A sequence that is an ``Entries`` view of a ``Log`` (the job book's queue)
is found without looking at its objects: its entries' positions in the log
map to rows, and only entries not seen before are looked at, so a cycle
over a deep queue does no Python work per queued job.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, MutableMapping, Sequence
from typing import Any, Generic, TypeVar, overload

import numpy as np
import numpy.typing as npt

from gpufleet.core.state import IntArray

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class Log(Generic[T]):
    """Objects by key in the order they were added, kept as an append-only list.

    Adding an object under a key already held replaces it at the end. A
    view (``entries``) shares the list, which only grows, so it stays valid
    however the log changes later; once dead entries outnumber the live ones
    the log starts a fresh list.
    """

    def __init__(self) -> None:
        self._items: list[T] = []
        self._live = np.zeros(0, dtype=np.bool_)
        self._at: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self._at)

    def add(self, key: Hashable, obj: T) -> None:
        self.discard(key)
        if len(self._items) > 2 * len(self._at) + 1024:
            self._compact()
        n = len(self._items)
        if n == len(self._live):
            self._live = np.concatenate([self._live, np.zeros(max(n, 64), dtype=np.bool_)])
        self._items.append(obj)
        self._live[n] = True
        self._at[key] = n

    def discard(self, key: Hashable) -> None:
        at = self._at.pop(key, None)
        if at is not None:
            self._live[at] = False

    def _compact(self) -> None:
        keep = sorted(self._at.items(), key=lambda kv: kv[1])
        self._items = [self._items[at] for _, at in keep]
        self._live = np.zeros(max(2 * len(keep), 64), dtype=np.bool_)
        self._live[: len(keep)] = True
        self._at = {key: i for i, (key, _) in enumerate(keep)}

    def entries(self) -> Entries[T]:
        """The live objects in order, as they are now."""
        return Entries(self._items, np.flatnonzero(self._live[: len(self._items)]))


class LogMap(MutableMapping[K, T]):
    """A dictionary that keeps its values in a ``Log`` too, so ``entries()`` lists them as
    a view whose rows ``Rows`` finds without looking at each one. The view has them in
    the order they were last set (the dictionary keeps the first)."""

    def __init__(self) -> None:
        self._by_key: dict[K, T] = {}
        self._log: Log[T] = Log()

    def __getitem__(self, key: K) -> T:
        return self._by_key[key]

    def __setitem__(self, key: K, value: T) -> None:
        self._by_key[key] = value
        self._log.add(key, value)

    def __delitem__(self, key: K) -> None:
        del self._by_key[key]
        self._log.discard(key)

    def __iter__(self) -> Iterator[K]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def entries(self) -> Entries[T]:
        """The values, as ``Log.entries``."""
        return self._log.entries()


class Entries(Sequence[T]):
    """Some objects of a ``Log``'s list, by their positions there (``Log.entries``)."""

    def __init__(self, items: list[T], positions: IntArray) -> None:
        self.items = items
        self.positions = positions

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, i: int) -> T: ...

    @overload
    def __getitem__(self, i: slice) -> Entries[T]: ...

    def __getitem__(self, i: int | slice) -> T | Entries[T]:
        if isinstance(i, slice):
            return Entries(self.items, self.positions[i])
        return self.items[int(self.positions[i])]

    def __iter__(self) -> Iterator[T]:
        items = self.items
        return (items[p] for p in self.positions.tolist())

    def take(self, indices: IntArray) -> Entries[T]:
        """The entries at ``indices`` of this view."""
        return Entries(self.items, self.positions[indices])


def subset(items: Sequence[T], indices: IntArray) -> Sequence[T]:
    """The items at ``indices``; a log's view stays one (``Entries``)."""
    if isinstance(items, Entries):
        return items.take(indices)
    return [items[i] for i in indices.tolist()]


class Rows(Generic[T]):
    """A row per object seen, and columns of facts about each row, computed once."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.objects: list[T] = []
        self._row_of: dict[int, int] = {}  # the row of each object, by id()
        self._values: dict[str, npt.NDArray[Any]] = {}
        self._codes: dict[str, tuple[dict[Hashable, int], list[Any], IntArray]] = {}
        # Each column is a view of a larger array, so a few new rows cost no full copy.
        self._values_room: dict[str, npt.NDArray[Any]] = {}
        self._codes_room: dict[str, npt.NDArray[Any]] = {}
        self._log: list[T] | None = None  # the log list ``_log_rows`` maps (Entries.items)
        self._log_rows = np.zeros(0, dtype=np.int64)  # the row of each log position; -1: none
        self._longest = 0  # the longest sequence asked since

    def rows(self, objects: Sequence[T]) -> IntArray:
        """The row of each object, adding rows (in order of appearance) for new ones."""
        if len(self.objects) > 2 * max(self._longest, len(objects)) + 1024:
            self._reset()
        self._longest = max(self._longest, len(objects))
        if isinstance(objects, Entries):
            return self._entry_rows(objects)
        return self._identity_rows(objects)

    def _entry_rows(self, entries: Entries[T]) -> IntArray:
        """Rows of a log's entries: by position, looking only at positions not mapped yet."""
        if self._log is not entries.items:
            self._log, self._log_rows = entries.items, np.zeros(0, dtype=np.int64)
        pos = entries.positions
        size = len(entries.items)
        if len(self._log_rows) < size:
            grown = np.full(max(size, 2 * len(self._log_rows)), -1, dtype=np.int64)
            grown[: len(self._log_rows)] = self._log_rows
            self._log_rows = grown
        out = self._log_rows[pos]
        miss = np.flatnonzero(out < 0)
        if len(miss):
            items = entries.items
            found = self._identity_rows([items[p] for p in pos[miss].tolist()])
            self._log_rows[pos[miss]] = found
            out[miss] = found
        return out

    def _identity_rows(self, objects: Sequence[T]) -> IntArray:
        row_of = self._row_of
        out = np.fromiter(
            (row_of.get(i, -1) for i in map(id, objects)), dtype=np.int64, count=len(objects)
        )
        for i in np.flatnonzero(out < 0).tolist():
            obj = objects[i]
            row = row_of.get(id(obj))  # listed earlier in this sequence too
            if row is None:
                row = row_of[id(obj)] = len(self.objects)
                self.objects.append(obj)
            out[i] = row
        return out

    def values(
        self, column: str, of: Callable[[T], Any], dtype: Any = np.int64
    ) -> npt.NDArray[Any]:
        """``of(obj)`` for every row, computed once per row."""
        array = self._values.get(column)
        done, rows = (0 if array is None else len(array)), len(self.objects)
        if array is None or done < rows:
            fresh = np.array([of(o) for o in self.objects[done:]], dtype=dtype)
            array = fresh if array is None else grown(self._values_room, column, array, fresh)
            self._values[column] = array
        return array

    def codes(self, column: str, of: Callable[[T], Hashable]) -> tuple[IntArray, list[Any]]:
        """A small integer per row standing for ``of(obj)``, and the distinct keys by code.

        The list of keys is shared and only ever grows at its end: read it, never change it.
        """
        interned, keys, array = self._codes.get(column, ({}, [], np.zeros(0, dtype=np.int64)))
        if len(array) < len(self.objects):
            fresh = [interned.setdefault(of(o), len(interned)) for o in self.objects[len(array) :]]
            keys.extend(list(interned)[len(keys) :])
            codes = np.array(fresh, dtype=np.int64)
            array = grown(self._codes_room, column, array, codes)
            self._codes[column] = (interned, keys, array)
        return array, keys


def grown(
    room: dict[str, npt.NDArray[Any]], column: str, array: npt.NDArray[Any], fresh: npt.NDArray[Any]
) -> npt.NDArray[Any]:
    """``array`` with ``fresh`` after it, written into the room behind ``array`` (a view of
    ``room[column]``), which doubles when full. Rows never change, so arrays handed
    out earlier stay right."""
    done, size = len(array), len(array) + len(fresh)
    buffer = room.get(column)
    if buffer is None or array.base is not buffer or len(buffer) < size:
        buffer = np.empty((max(size, 2 * done, 64), *array.shape[1:]), dtype=array.dtype)
        buffer[:done] = array
        room[column] = buffer
    buffer[done:size] = fresh
    return buffer[:size]
