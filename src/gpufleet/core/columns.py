"""Numpy columns over immutable objects (jobs, running jobs), kept across cycles.

A driver hands every cycle a fresh sequence of jobs, most of them the very
objects it handed the cycle before. ``Rows`` gives each object a row the
first time it is seen and finds it again by identity, in one vectorised
pass, so what a job fixes (its time limit, its QoS, its request shape) is
extracted from it once, not once per cycle. A changed job is a new object
and gets a new row, so nothing stale is ever read. Rows hold a reference to
their object, so an identity cannot be reused while its row lives; once
rows outnumber twice the sequence, the columns start afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from gpufleet.core.state import IntArray

T = TypeVar("T")


class Rows(Generic[T]):
    """A row per object seen, and columns of facts about each row, computed once."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.objects: list[T] = []
        self._ids = np.zeros(0, dtype=np.uint64)  # id() of each row's object, sorted
        self._at = np.zeros(0, dtype=np.int64)  # the row of each sorted id
        self._values: dict[str, npt.NDArray[Any]] = {}
        self._codes: dict[str, tuple[dict[Hashable, int], list[Any], IntArray]] = {}

    def rows(self, objects: Sequence[T]) -> IntArray:
        """The row of each object, adding rows (in order of appearance) for new ones."""
        if len(self.objects) > 2 * len(objects) + 1024:
            self._reset()
        ids = np.fromiter(map(id, objects), dtype=np.uint64, count=len(objects))
        pos = np.minimum(np.searchsorted(self._ids, ids), max(len(self._ids) - 1, 0))
        hit = self._ids[pos] == ids if len(self._ids) else np.zeros(len(ids), dtype=np.bool_)
        out = np.where(hit, self._at[pos] if len(self._at) else 0, 0)
        miss = np.flatnonzero(~hit)
        if len(miss):
            new, first, inverse = np.unique(ids[miss], return_index=True, return_inverse=True)
            appear = np.argsort(first, kind="stable")
            rank = np.empty(len(new), dtype=np.int64)
            rank[appear] = np.arange(len(new))
            base = len(self.objects)
            self.objects.extend(objects[int(i)] for i in miss[first[appear]])
            out[miss] = base + rank[inverse.ravel()]
            ids_all = np.concatenate([self._ids, new])
            at_all = np.concatenate([self._at, base + rank])
            order = np.argsort(ids_all, kind="stable")
            self._ids, self._at = ids_all[order], at_all[order]
        return out.astype(np.int64, copy=False)

    def values(
        self, column: str, of: Callable[[T], Any], dtype: Any = np.int64
    ) -> npt.NDArray[Any]:
        """``of(obj)`` for every row, computed once per row."""
        array = self._values.get(column)
        done = 0 if array is None else len(array)
        if array is None or done < len(self.objects):
            fresh = np.array([of(o) for o in self.objects[done:]], dtype=dtype)
            array = fresh if array is None else np.concatenate([array, fresh])
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
            array = np.concatenate([array, np.array(fresh, dtype=np.int64)])
            self._codes[column] = (interned, keys, array)
        return array, keys
