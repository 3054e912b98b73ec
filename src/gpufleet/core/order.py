"""The first jobs of a deep queue, compiled: which jobs ``core.cycle.queue_order`` must
sort when a cycle considers only the first few (``[ordering] queue_depth``).

One quickselect over (priority descending, submit time) finds the ``first``-th
job's key; every job whose key is no greater is kept, ties included, so the
sort that follows (which breaks ties by id) sees every job that may be among
the first. numpy would need a partition per key and the masks between.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gpufleet.core.accounts import FloatArray
from gpufleet.core.state import IntArray


@njit(cache=True, nogil=True)
def leading(
    neg: FloatArray, submit: IntArray, first: int, bound: float = np.inf, bound_submit: int = 0
) -> IntArray:
    """Indices, ascending, of the jobs whose (``neg``, ``submit``) is at most the
    ``first``-th smallest (1 <= ``first`` <= the number of jobs).

    (``bound``, ``bound_submit``) is a guess of a key that at least ``first`` jobs do
    not exceed, such as the last cycle's cut: when they are so many, the select runs
    over them alone (the first-th key is among them, so the answer is the same);
    otherwise over every job.
    """
    idx = _within(neg, submit, bound, bound_submit)
    if len(idx) < first:
        idx = np.arange(len(neg))
    lo, hi, k = 0, len(idx) - 1, first - 1
    while lo < hi:  # Hoare's selection: idx[k] ends as the k-th smallest key
        p = idx[(lo + hi) // 2]
        pn, ps = neg[p], submit[p]
        i, j = lo, hi
        while i <= j:
            while neg[idx[i]] < pn or (neg[idx[i]] == pn and submit[idx[i]] < ps):
                i += 1
            while neg[idx[j]] > pn or (neg[idx[j]] == pn and submit[idx[j]] > ps):
                j -= 1
            if i <= j:
                idx[i], idx[j] = idx[j], idx[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return _within(neg, submit, neg[idx[k]], submit[idx[k]])


@njit(cache=True, nogil=True)
def _within(neg: FloatArray, submit: IntArray, key: float, key_submit: int) -> IntArray:
    """Indices, ascending, of the jobs whose (``neg``, ``submit``) is at most the key."""
    out = np.empty(len(neg), dtype=np.int64)
    c = 0
    for v in range(len(neg)):
        if neg[v] < key or (neg[v] == key and submit[v] <= key_submit):
            out[c] = v
            c += 1
    return out[:c]
