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
    n = len(neg)
    idx = np.empty(n, dtype=np.int64)
    m = 0
    for v in range(n):
        if neg[v] < bound or (neg[v] == bound and submit[v] <= bound_submit):
            idx[m] = v
            m += 1
    if m < first:
        idx, m = np.arange(n), n
    lo, hi, k = 0, m - 1, first - 1
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
    kn, ks = neg[idx[k]], submit[idx[k]]
    out = np.empty(n, dtype=np.int64)
    c = 0
    for v in range(n):
        if neg[v] < kn or (neg[v] == kn and submit[v] <= ks):
            out[c] = v
            c += 1
    return out[:c]
