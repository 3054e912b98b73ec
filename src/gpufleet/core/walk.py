"""The cycle's walk over a run of jobs, compiled: what ``_Cycle._consider`` does for
each job, as long as it only gives reasons, tests and plans starts.

A deep queue is mostly jobs that change nothing but the walk's memos: a
limit keeps them, their test fails as one of their shape did, their start is
planned. ``walk_run`` takes such jobs in order in one pass and stops at the
first job it cannot finish alone, *before* changing anything for it:

* ``ALONE``: the cycle considers it in Python (it may start, preempt, ask a
  gate or Slurm's will-run estimate, or be exclusive), then walks on;
* ``ROOM`` / ``TIMES``: it needs the room now or the node times on the
  timeline of a shape the pass cannot compute (MIG); the cycle finds them
  and calls again from there.

So the cycle's plan is exactly the job-by-job walk's. The arrays are the
walk's state, changed in place: per shape (``kind``) the failure memos of
``core.cycle._Shape``, per partition whether a job waits there and whether
it is blocked (no backfill), and the ``counters``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gpufleet.core.fit import FitState, room_now
from gpufleet.core.state import BoolArray, IntArray
from gpufleet.core.timeline import (
    NEVER,
    Releases,
    earliest_on,
    hold_span,
    insert_spans,
    task_times,
    usable_over,
)

DONE, ALONE, ROOM, TIMES = 0, 1, 2, 3
"""Why ``walk_run`` stopped."""
ADMISSION, PRIORITY, RESOURCES, NODE_NOT_AVAIL = 0, 1, 2, 3
"""The reason it gave a job (``ADMISSION``: the admission plugins' own)."""
TESTED, PLANNED, WAITING, CUT_UNKNOWN, CUT_AT = 0, 1, 2, 3, 4
"""Fields of ``counters``: tests made, starts planned, whether any partition has a job
waiting, whether a job found no start at all, and the earliest start found past the
horizon (NEVER: none)."""


@njit(cache=True, nogil=True)
def walk_run(
    begin: int,
    alone: BoolArray,
    admitted: BoolArray,
    kind: IntArray,
    part: IntArray,
    length: IntArray,
    gang: IntArray,
    never: BoolArray,
    nodes: BoolArray,
    failed_at: IntArray,
    unplanned_at: IntArray,
    unfit: BoolArray,
    has_unfit: BoolArray,
    room: BoolArray,
    has_room: BoolArray,
    fit_needs: IntArray,
    models: BoolArray,
    fitted: BoolArray,
    fit: FitState,
    times: IntArray,
    has_times: BoolArray,
    needs: IntArray,
    gpu_ok: BoolArray,
    computed: BoolArray,
    releases: Releases,
    waiting: BoolArray,
    blocked: BoolArray,
    counters: IntArray,
    limits: IntArray,
    flags: BoolArray,
    now: int,
    horizon: int,
    step: int,
    span_node: IntArray,
    span_start: IntArray,
    span_end: IntArray,
    reason: IntArray,
    start: IntArray,
    chosen: IntArray,
    c: int,
) -> tuple[int, int, int, int, IntArray, IntArray, IntArray]:
    """Walk the jobs from ``begin``; returns where and why it stopped (and the shape it
    needs), how many nodes ``chosen`` now holds (``c`` before), and the planned
    starts' spans.

    A shape ``fitted`` gets its room here, from its ``fit_needs`` and
    ``models`` (``core.fit``) and the state's ``fit``; another stops the walk
    (``ROOM``). A shape ``computed`` gets its node times here, from its
    ``needs`` and ``gpu_ok`` (``Timeline.task_needs``) and the timeline's
    ``releases``; another stops the walk (``TIMES``).

    ``limits``: the tests and the planned starts the backfill plugin allows
    in all; ``flags``: backfill, exact planned starts (no will-run
    estimate), a placement is known to fail from the room alone (no
    placement filter), preemption. Per job it writes ``reason`` and
    ``start`` (-2: not planned), and a planned one's nodes to ``chosen``.
    """
    backfill, exact, by_room, preempt = flags[0], flags[1], flags[2], flags[3]
    n_nodes = nodes.shape[1]
    for i in range(begin, len(kind)):
        if alone[i]:
            return i, ALONE, -1, c, span_node, span_start, span_end
        if not admitted[i]:
            reason[i] = ADMISSION
            continue
        p, s, length_i = part[i], kind[i], length[i]
        if blocked[p]:
            reason[i] = PRIORITY
            continue
        if never[s]:
            reason[i] = NODE_NOT_AVAIL
            continue
        capped = backfill and counters[WAITING] and counters[TESTED] >= limits[0]
        testing = length_i < failed_at[s] and not capped
        covered = False
        if testing:
            if preempt:  # the preemptor may pick victims for it
                return i, ALONE, -1, c, span_node, span_start, span_end
            usable = nodes[s] & usable_over(n_nodes, span_node, span_start, span_end, now, length_i)
            covered = has_unfit[s] and (usable & ~unfit[s]).sum() < gang[s]
            if not covered:
                if not by_room:
                    return i, ALONE, -1, c, span_node, span_start, span_end
                if not has_room[s]:
                    if not fitted[s]:
                        return i, ROOM, s, c, span_node, span_start, span_end
                    room[s] = room_now(fit, models[s], fit_needs[s])
                    has_room[s] = True
                if (room[s] & usable).sum() >= gang[s]:  # it starts
                    return i, ALONE, -1, c, span_node, span_start, span_end
        plans = backfill and length_i < unplanned_at[s] and counters[PLANNED] < limits[1]
        if plans and not exact:
            return i, ALONE, -1, c, span_node, span_start, span_end
        if plans and not has_times[s]:
            if not computed[s]:
                return i, TIMES, s, c, span_node, span_start, span_end
            times[s] = task_times(releases, gpu_ok[s], needs[s], nodes[s], now)
            has_times[s] = True
        # Nothing stops it: from here on, the job is walked.
        if testing:
            counters[TESTED] += 1
            if not covered:
                unfit[s] = ~room[s]
                has_unfit[s] = True
            failed_at[s] = min(failed_at[s], length_i)
        if waiting[p]:
            reason[i] = PRIORITY
        else:
            waiting[p] = True
            counters[WAITING] = 1
            reason[i] = RESOURCES
        if not backfill:
            blocked[p] = True
            continue
        if not plans:
            continue
        at, picked = earliest_on(
            times[s], length_i, gang[s], NEVER, span_node, span_start, span_end
        )
        if at < 0 or at > horizon:
            # Longer jobs of the shape, around only more planned starts, would find none either.
            unplanned_at[s] = length_i
            if at < 0:
                counters[CUT_UNKNOWN] = 1
            else:
                counters[CUT_AT] = min(counters[CUT_AT], at)
            continue
        counters[PLANNED] += 1
        start[i] = at
        chosen[c : c + len(picked)] = picked
        c += len(picked)
        lo, hi = hold_span(at, length_i, step)
        span_node, span_start, span_end = insert_spans(
            span_node, span_start, span_end, picked, lo, hi
        )
    return len(kind), DONE, -1, c, span_node, span_start, span_end


@njit(cache=True, nogil=True)
def compact(codes: IntArray) -> tuple[IntArray, IntArray]:
    """The distinct ``codes`` (small integers) in order, and each one's index among them:
    ``np.unique(codes, return_inverse=True)`` without its sort."""
    size = codes.max() + 1 if len(codes) else 0
    index = np.full(size, -1, dtype=np.int64)
    for c in codes:
        index[c] = 0
    distinct = np.flatnonzero(index == 0)
    index[distinct] = np.arange(len(distinct))
    out = np.empty(len(codes), dtype=np.int64)
    for i in range(len(codes)):
        out[i] = index[codes[i]]
    return distinct, out
