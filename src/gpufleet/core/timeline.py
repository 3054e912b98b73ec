"""When will capacity free up? The earliest start of a request, for backfill.

The timeline knows what is free now (the cluster state) and when each holder
of resources is expected to let go (running jobs' expected ends, and the
ends of jobs the cycle has just started). From these it answers, for a
request, the earliest time at which enough nodes could host it, and which
nodes those are: Slurm's ``select_g_job_test`` in its "will run" mode.

It is vectorised: release events are sorted once by (node or GPU, time) with
running sums of what they free, so one query is a handful of numpy passes
over the events and the GPU grid, whatever the number of running jobs.

Nodes may also be *blocked*: a planned start, an exclusive job or an advance
reservation keeps a node over a span [from, until); a node keeps each span
apart. A job of length L may use a blocked node at time t only if [t, t + L)
overlaps none of its spans, so it can never delay what holds the node. A
multi-node start is checked over its whole window on every node it takes.

A planned start holds its nodes from its start to its end, both rounded down
to the backfill resolution, as Slurm rounds its backfill reservations
(``Timeline.hold``): the hold begins early, so short jobs may not slip in
just before it.

With ``WillRun`` the timeline estimates as Slurm 22.05's backfill does
(``Timeline.earliest``). Its select plugin (cons_tres ``_will_run_test``)
takes the running jobs off in batches by expected end: the first batch holds
every end up to one 30 s window past the first multiple of 30 s after the
first end, each later batch reaches a window further, the window doubling
each time (``bf_window_linear`` makes it grow by a constant instead). The job
starts at the last end of the first batch after which it fits, so estimates
lose precision the further ahead they are, and only jobs on the nodes no hold
keeps count. The planned nodes are those the job would be placed on then,
best fit first (fewest GPUs free, then lowest index), not those that free up
first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial

import numpy as np
from numba import njit

from gpufleet.core.columns import Rows
from gpufleet.core.fit import mig_instances, static_gpu_ok
from gpufleet.core.job import RunningJob
from gpufleet.core.model import MILLI, Request
from gpufleet.core.state import Assignment, BoolArray, ClusterState, IntArray

NEVER = np.iinfo(np.int64).max // 4
"""A time later than any real one: 'not within the horizon'."""
_TRUE = np.ones(1, dtype=np.bool_)


def _after_true(flags: BoolArray) -> BoolArray:
    """True, then ``flags`` (``np.r_[True, flags]``, which costs more than the pass itself)."""
    return np.concatenate((_TRUE, flags))


def _then(values: IntArray, last: int) -> IntArray:
    """``values``, then ``last``."""
    return np.concatenate((values, np.array([last], dtype=values.dtype)))


# Compiled kernels over a Blocks' spans (sorted by node, then start; merged per
# node): backfill asks them once per waiting job, and a dozen numpy passes over
# a few hundred spans cost far more than one loop.


@njit(cache=True, nogil=True)
def _insert(
    node: IntArray, start: IntArray, end: IntArray, idx: IntArray, begin: int, until: int
) -> tuple[IntArray, IntArray, IntArray]:
    """The spans with [begin, until) added on the nodes ``idx`` (sorted), merged per node."""
    n, m = len(node), len(idx)
    out_node = np.empty(n + m, dtype=np.int64)
    out_start = np.empty(n + m, dtype=np.int64)
    out_end = np.empty(n + m, dtype=np.int64)
    c = i = j = 0
    while i < n or j < m:
        if j < m and (i >= n or idx[j] < node[i] or (idx[j] == node[i] and begin < start[i])):
            v, a, b = idx[j], begin, until
            j += 1
        else:
            v, a, b = node[i], start[i], end[i]
            i += 1
        if c > 0 and out_node[c - 1] == v and a <= out_end[c - 1]:
            out_end[c - 1] = max(out_end[c - 1], b)
        else:
            out_node[c], out_start[c], out_end[c] = v, a, b
            c += 1
    return out_node[:c], out_start[:c], out_end[:c]


@njit(cache=True, nogil=True)
def _merge_sorted(
    node: IntArray, start: IntArray, end: IntArray
) -> tuple[IntArray, IntArray, IntArray]:
    """Spans sorted by (node, start), those of a node that overlap or touch merged."""
    empty = np.zeros(0, dtype=np.int64)
    return _insert(node, start, end, empty, 0, 0)


@njit(cache=True, nogil=True)
def _usable(
    nodes: int, node: IntArray, start: IntArray, end: IntArray, at: int, length: int
) -> BoolArray:
    ok = np.ones(nodes, dtype=np.bool_)
    for i in range(len(node)):
        if start[i] < at + length and end[i] > at:
            ok[node[i]] = False
    return ok


@njit(cache=True, nogil=True)
def _shift(
    times: IntArray, length: int, node: IntArray, start: IntArray, end: IntArray
) -> IntArray:
    """``Blocks.shift``: per node, the first gap from its time on that holds ``length``."""
    out = times.copy()
    n, i = len(node), 0
    while i < n:
        v = node[i]
        at = times[v]
        found = False
        while i < n and node[i] == v:
            if not found:
                if at + length <= start[i]:
                    found = True
                else:
                    at = max(at, end[i])
            i += 1
        out[v] = NEVER if times[v] >= NEVER else at
    return out


@njit(cache=True, nogil=True)
def _earliest(
    t: IntArray,
    length: int,
    k: int,
    horizon: int,
    node: IntArray,
    start: IntArray,
    end: IntArray,
) -> tuple[int, IntArray]:
    """``Timeline.earliest`` once each node's own time ``t`` is known: the start and
    its nodes (start -1: none by ``horizon``)."""
    first = _shift(t, length, node, start, end)
    ready = t
    while True:
        shifted = _shift(ready, length, node, start, end)
        if (shifted < NEVER).sum() < k:
            return -1, np.zeros(0, dtype=np.int64)
        at = np.sort(shifted)[k - 1]
        if at > horizon:
            return -1, np.zeros(0, dtype=np.int64)
        ok = (t <= at) & _usable(len(t), node, start, end, at, length)
        if ok.sum() >= k:
            break
        ready = np.maximum(t, at)
    candidates = np.flatnonzero(ok)
    chosen = candidates[np.argsort(first[candidates], kind="mergesort")[:k]]
    return at, np.sort(chosen)


@njit(cache=True, nogil=True)
def _hold(start: int, length: int, step: int) -> tuple[int, int]:
    begin = start // step * step
    return begin, max((start + length) // step * step, begin + step)


@njit(cache=True, nogil=True)
def _plan_run(
    times: IntArray,
    kind: IntArray,
    length: IntArray,
    gang: IntArray,
    unplanned: IntArray,
    allowed: int,
    horizon: int,
    step: int,
    node: IntArray,
    start: IntArray,
    end: IntArray,
) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
    """``Timeline.plan_run``: each job's start (past ``horizon``: not planned, -1:
    none at all, -2: not asked), the nodes of the planned ones one after another,
    and the spans."""
    n = len(kind)
    starts = np.full(n, -2, dtype=np.int64)
    chosen = np.empty(int(gang.sum()), dtype=np.int64)
    c = planned = 0
    for i in range(n):
        s = kind[i]
        if length[i] >= unplanned[s] or planned >= allowed:
            continue
        at, nodes = _earliest(times[s], length[i], gang[i], NEVER, node, start, end)
        starts[i] = at
        if at < 0 or at > horizon:
            unplanned[s] = length[i]
            continue
        planned += 1
        chosen[c : c + len(nodes)] = nodes
        c += len(nodes)
        begin, until = _hold(at, length[i], step)
        node, start, end = _insert(node, start, end, nodes, begin, until)
    return starts, chosen[:c], node, start, end


@dataclass
class Blocks:
    """Per-node time spans that a job must not overlap (see module docstring).

    Spans are kept apart, as Slurm keeps a node's time slices: a job may fit
    in the gap between two holds on a node. Overlapping or touching spans of
    a node merge (that loses no gap). Kept sorted by (node, start).
    """

    nodes: int
    node: IntArray
    start: IntArray
    end: IntArray

    @classmethod
    def none(cls, nodes: int) -> Blocks:
        empty = np.zeros(0, dtype=np.int64)
        return cls(nodes, empty, empty, empty)

    def copy(self) -> Blocks:
        return replace(self)  # the arrays are never changed in place

    def add(self, nodes: IntArray | BoolArray, start: int, end: int) -> None:
        """Block ``nodes`` over [start, end)."""
        given = np.asarray(nodes)
        idx: IntArray = (
            np.flatnonzero(given) if given.dtype == np.bool_ else np.sort(given.astype(np.int64))
        )
        if start >= end or not len(idx):
            return
        self.node, self.start, self.end = _insert(self.node, self.start, self.end, idx, start, end)

    def merged(self, other: Blocks) -> Blocks:
        out = self.copy()
        node = np.concatenate([self.node, other.node])
        start = np.concatenate([self.start, other.start])
        order = np.lexsort((start, node))
        end = np.concatenate([self.end, other.end])[order]
        out.node, out.start, out.end = _merge_sorted(node[order], start[order], end)
        return out

    def usable(self, at: int, length: int) -> BoolArray:
        """Nodes a job may hold over [at, at + length) without overlapping a block."""
        return _usable(self.nodes, self.node, self.start, self.end, at, length)

    def next_end(self, after: int, nodes: BoolArray) -> int | None:
        """The first end of a span on ``nodes`` after ``after`` (None: none)."""
        ends = self.end[nodes[self.node] & (self.end > after)]
        return int(ends.min()) if len(ends) else None

    def shift(self, times: IntArray, length: int) -> IntArray:
        """Per node, the first time >= ``times`` at which a job of ``length`` fits around blocks."""
        return _shift(times, length, self.node, self.start, self.end)


@dataclass(frozen=True)
class WillRun:
    """Slurm's start estimates (see the module docstring): the first batch window in
    seconds, and how much each later one grows (0: it doubles; ``bf_window_linear``)."""

    window: int = 30
    linear: int = 0

    def batched(self, times: IntArray, now: int, ends: IntArray) -> IntArray:
        """``times`` after ``now`` moved to the last end of their batch; the batches are
        made of ``ends`` (the jobs the estimate looks at), later times stay."""
        ends = np.unique(ends[ends > now])
        if not len(ends):
            return times
        first = int(ends[0])
        barrier = first - first % self.window + self.window
        width = self.window
        last = np.empty(len(ends), dtype=np.int64)
        i = 0
        while i < len(ends):
            # The batch: at least the next end, and every end within the window.
            j = max(i + 1, int(np.searchsorted(ends, barrier + width, side="right")))
            last[i:j] = ends[j - 1]
            i = j
            while i < len(ends) and ends[i] > barrier + width:
                width = width + self.linear if self.linear else width * 2
        # A time after the last batch (a job on a node not looked at) stays.
        at = np.minimum(np.searchsorted(ends, times), len(ends) - 1)
        late = (times > now) & (times <= ends[-1])
        return np.where(late, last[at], times)


@dataclass(frozen=True)
class PlannedStart:
    """Where and when a waiting job is planned to start, and the span its nodes are
    held (``Timeline.hold``): its backfill reservation."""

    start: int
    nodes: IntArray
    hold: tuple[int, int]


class Timeline:
    """Expected releases of resources after ``now``; planned starts hold nodes in
    ``resolution`` steps (``hold``)."""

    def __init__(
        self,
        state: ClusterState,
        now: int,
        resolution: int = 60,
        running: Sequence[RunningJob] = (),
        flattened: RunningEvents | None = None,
        will_run: WillRun | None = None,
    ) -> None:
        """``running`` hold their assignments until their expected ends (read lazily).

        ``flattened``, kept by the caller across timelines, saves flattening
        the same running jobs' assignments again. ``will_run``: estimate as
        Slurm does (module docstring); None: exactly.
        """
        self.state = state
        self.will_run = will_run
        self.now = now
        self.resolution = max(1, resolution)
        self._running = running
        self._flattened = flattened if flattened is not None else RunningEvents()
        self._removed: set[str] = set()
        self._added: dict[str, tuple[int, tuple[Assignment, ...]]] = {}
        self._holders: _Flat | None = None
        self._built: _Events | None = None
        self._batched: dict[tuple[bytes, int], _Events] = {}
        self._times: dict[Request, IntArray] = {}  # node_times over the exact events

    def add(self, key: str, assignments: Iterable[Assignment], end: int) -> None:
        """``key`` holds ``assignments`` until ``end`` (a job past its end frees now)."""
        self._added[key] = (end, tuple(assignments))
        self._changed()

    def remove(self, key: str) -> None:
        """``key`` no longer holds anything (it was preempted or finished)."""
        self._removed.add(key)
        self._added.pop(key, None)
        self._changed()

    def _changed(self) -> None:
        self._holders = None
        self._built = None
        self._batched.clear()
        self._times.clear()

    def _flat(self) -> _Flat:
        """Every holder's assignments and end, as flat arrays."""
        if self._holders is None:
            flat = self._flattened
            rows = flat.rows(self._running)
            gone = self._removed | self._added.keys()
            if gone:
                ids = flat.values("id", _job_id, object)[rows]
                rows = rows[[i not in gone for i in ids]]
            live = np.zeros(len(flat.objects), dtype=np.bool_)
            live[rows] = True
            running = flat.flat().where(live)
            self._holders = running.then(_Flat.of(list(self._added.values())))
        return self._holders

    def _events(self, seen: BoolArray | None = None, since: int = 0) -> _Events:
        """Release events; with ``will_run`` and ``seen``, batched as Slurm's will-run
        test batches them for a start from ``since``: over the holders on the
        ``seen`` nodes (it skips jobs on none of the nodes it may use) that
        are still running then."""
        if self.will_run is None or seen is None:
            if self._built is None:
                self._built = _Events.build(self.state, self._flat(), self.now)
            return self._built
        key = seen.tobytes(), since
        built = self._batched.get(key)
        if built is None:
            flat = self._flat()
            batch = partial(self.will_run.batched, now=since, ends=flat.end[seen[flat.node]])
            flat = replace(
                flat, end=batch(flat.end), g_end=batch(flat.g_end), m_end=batch(flat.m_end)
            )
            built = self._batched[key] = _Events.build(self.state, flat, self.now)
        return built

    def node_times(self, r: Request, ev: _Events | None = None) -> IntArray:
        """Per node, the earliest time one task of ``r`` fits there (NEVER if it never does).

        Counts only releases; the state must already hold every holder's
        allocation, so capacity only grows along the timeline. ``ev``: the
        events to read (``_events``); without, the answer is kept until a holder
        changes (many waiting jobs of a backlog share a few requests).
        """
        if ev is None:
            times = self._times.get(r)
            if times is None:
                times = self._times[r] = self._node_times(r, self._events())
                times.flags.writeable = False  # shared by every query until then
            return times
        return self._node_times(r, ev)

    def _node_times(self, r: Request, ev: _Events) -> IntArray:
        st, now = self.state, self.now
        t = np.where(st.healthy, now, NEVER)
        t = np.maximum(t, ev.cpu.first(st.cpu_free, r.cpu_milli, now))
        t = np.maximum(t, ev.mem.first(st.mem_free, r.memory_mib, now))
        if r.gpu_count:
            gpu_t = np.maximum(
                ev.milli.first(st.gpu_milli_free.ravel(), r.milli_per_gpu, now),
                ev.gmem.first(st.gpu_mem_free.ravel(), r.gpu_memory_mib, now),
            ).reshape(st.gpu_milli_free.shape)
            gpu_t = np.where(static_gpu_ok(st, r), gpu_t, NEVER)
            k = r.gpu_count
            if k > gpu_t.shape[1]:
                return np.full(st.num_nodes, NEVER, dtype=np.int64)
            t = np.maximum(t, np.partition(gpu_t, k - 1, axis=1)[:, k - 1])
        if r.mig_profile:
            t = np.maximum(t, self._mig_times(r, ev))
        return t

    def _mig_times(self, r: Request, ev: _Events) -> IntArray:
        st, now = self.state, self.now
        out = np.full(st.num_nodes, NEVER, dtype=np.int64)
        if r.mig_profile not in st.mig_profiles:
            return out
        inst = np.flatnonzero(mig_instances(st, r, empty=True))
        times = np.where(st.mig_free[inst], now, ev.mig_end[inst])
        nodes = st.mig_node[inst]
        order = np.lexsort((times, nodes))
        nodes, times = nodes[order], times[order]
        # The k-th instance in time order on a node: its rank within the node's run.
        starts = np.flatnonzero(_after_true(nodes[1:] != nodes[:-1]))
        rank = np.arange(len(nodes)) - np.repeat(starts, np.diff(_then(starts, len(nodes))))
        kth = rank == r.mig_count - 1
        out[nodes[kth]] = times[kth]
        return out

    def earliest(
        self,
        r: Request,
        nodes: BoolArray,
        length: int,
        blocks: Blocks,
        not_before: int = 0,
        horizon: int = NEVER,
        whole_nodes: bool = False,
    ) -> PlannedStart | None:
        """The earliest start of ``r`` on ``nodes`` for ``length`` seconds, around ``blocks``.

        None if it cannot start by ``horizon``. The start names the ``r.nodes``
        nodes that free up first (ties to the lowest index). With
        ``whole_nodes`` (an exclusive job) a node counts only once every
        holder on it has let go.
        """
        if self.will_run is not None:
            since = max(self.now, not_before)
            return self._will_run(r, nodes, length, blocks, since, horizon, whole_nodes)
        t = np.maximum(self.node_times(r), max(self.now, not_before))
        if whole_nodes:
            t = np.maximum(t, self._events().node_idle())
        t = np.where(nodes, t, NEVER)
        spans = blocks.node, blocks.start, blocks.end
        start, chosen = _earliest(t, length, r.nodes, horizon, *spans)
        if start < 0:
            return None
        return PlannedStart(start, chosen, self.hold(start, length))

    def _will_run(
        self,
        r: Request,
        nodes: BoolArray,
        length: int,
        blocks: Blocks,
        since: int,
        horizon: int,
        whole_nodes: bool,
    ) -> PlannedStart | None:
        """``earliest`` as Slurm's backfill finds it (sched/backfill ``_attempt_backfill``).

        From ``since`` on: ask the will-run estimate (batched ends, on the nodes
        no hold keeps over the whole job, boundary included) for a start and
        the nodes that fit best then; if those overlap a hold, or a hold ends
        before that start (more nodes then), try again from there.
        """
        k = r.nodes
        while since <= horizon:
            seen = nodes & blocks.usable(since, length + 1)
            later = blocks.next_end(since, nodes)
            ev = self._events(seen, since)
            t = np.maximum(self.node_times(r, ev), since)
            if whole_nodes:
                t = np.maximum(t, ev.node_idle())
            t = np.where(seen, t, NEVER)
            if int((t < NEVER).sum()) >= k:
                start = int(np.partition(t, k - 1)[k - 1])
                if later is not None and start > later:
                    since = later
                    continue
                if start > horizon:
                    return None
                candidates = np.flatnonzero(t <= start)
                fit = np.argsort(self._gpus_free(start, ev)[candidates], kind="stable")
                chosen = candidates[fit[:k]]
                hold = self.hold(start, length)
                if blocks.usable(hold[0], hold[1] - hold[0])[chosen].all():
                    return PlannedStart(start, np.sort(chosen), hold)
                # Its hold, begun early, overlaps another: as Slurm, try from there
                # (a step on when that is where this try began).
                since = start if start > since else since + self.resolution
            elif later is None:
                return None
            else:
                since = later
        return None

    def _gpus_free(self, at: int, ev: _Events) -> IntArray:
        """Per node, the whole GPUs free at ``at`` (best fit ranks the fewest first)."""
        st = self.state
        whole = ev.milli.first(st.gpu_milli_free.ravel(), MILLI, self.now)
        free: IntArray = (whole.reshape(st.gpu_milli_free.shape) <= at).sum(axis=1)
        return free

    def hold(self, start: int, length: int) -> tuple[int, int]:
        """The span a planned start holds its nodes: start and end rounded down to
        ``resolution``, as Slurm's backfill does (bf_resolution).

        Holds so begin early, keeping short jobs off the nodes. A limit shorter
        than a step still holds one step, so a hold never vanishes.
        """
        begin, end = _hold(start, length, self.resolution)
        return int(begin), int(end)

    def plan_run(
        self,
        shapes: Sequence[tuple[Request, BoolArray]],
        kind: IntArray,
        length: IntArray,
        unplanned: IntArray,
        allowed: int,
        blocks: Blocks,
        horizon: int,
    ) -> tuple[IntArray, list[IntArray]]:
        """``earliest`` for a run of jobs in turn, each start holding its nodes in
        ``blocks`` before the next job is asked: job i has the request and nodes
        of ``shapes[kind[i]]`` and ``length[i]``.

        As a backfill walk asks: a job is not asked once ``allowed`` starts are
        planned or when a job of its kind at least as long found none
        (``unplanned[kind]``, lowered here as jobs find none). Returns each
        job's earliest start, planned only up to ``horizon`` (-1: none at all,
        -2: not asked), and the nodes of each planned one. Only without
        ``will_run``, for jobs that are not exclusive.
        """
        assert self.will_run is None
        times = np.empty((len(shapes), self.state.num_nodes), dtype=np.int64)
        for i, (r, nodes) in enumerate(shapes):
            times[i] = np.where(nodes, np.maximum(self.node_times(r), self.now), NEVER)
        gang = np.array([shapes[k][0].nodes for k in kind.tolist()], dtype=np.int64)
        starts, chosen, blocks.node, blocks.start, blocks.end = _plan_run(
            times,
            kind,
            length,
            gang,
            unplanned,
            allowed,
            horizon,
            self.resolution,
            blocks.node,
            blocks.start,
            blocks.end,
        )
        cuts = np.cumsum(np.where((starts >= 0) & (starts <= horizon), gang, 0))
        return starts, np.split(chosen, cuts[:-1])


@njit(cache=True, nogil=True)
def _first(
    slot: IntArray, time: IntArray, amount: IntArray, free: IntArray, need: int, now: int
) -> IntArray:
    """``_Releases.first`` over events sorted by time: one pass, each slot's sum so far."""
    out = np.full(len(free), NEVER, dtype=np.int64)
    for s in range(len(free)):
        if free[s] >= need:
            out[s] = now
    if need <= 0:
        return out
    released = np.zeros(len(free), dtype=np.int64)
    for i in range(len(slot)):
        s = slot[i]
        if out[s] == NEVER:
            released[s] += amount[i]
            if free[s] + released[s] >= need:
                out[s] = time[i]
    return out


@dataclass(frozen=True)
class _Releases:
    """Release events of one resource (slot, time, amount), sorted by time."""

    slot: IntArray
    time: IntArray
    amount: IntArray
    slots: int

    @classmethod
    def build(
        cls, slot: IntArray, time: IntArray, amounts: Sequence[IntArray], slots: int
    ) -> list[_Releases]:
        """One ``_Releases`` per amount released by the same events (sorted once)."""
        order = np.argsort(time, kind="stable")
        slot, time = slot[order], time[order]
        return [cls(slot, time, amount[order], slots) for amount in amounts]

    def first(self, free: IntArray, need: int, now: int) -> IntArray:
        """Per slot, the first time ``free`` plus releases so far reaches ``need``."""
        free = free.astype(np.int64, copy=False)
        return _first(self.slot, self.time, self.amount, free, need, now)


def _job_id(r: RunningJob) -> str:
    return r.job.id


@dataclass(frozen=True)
class _Flat:
    """Assignments of holders as flat arrays: per task, per GPU share and per MIG instance.

    ``*_owner`` is the holder each entry comes from (its row, or its position).
    """

    owner: IntArray
    node: IntArray
    end: IntArray
    cpu: IntArray
    mem: IntArray
    g_owner: IntArray
    g_node: IntArray
    g_gpu: IntArray
    g_end: IntArray
    g_milli: IntArray
    g_mem: IntArray
    m_owner: IntArray
    m_index: IntArray
    m_end: IntArray

    @classmethod
    def of(cls, holders: Sequence[tuple[int, tuple[Assignment, ...]]]) -> _Flat:
        """Flatten ``holders`` (end, assignments); owners are their positions."""
        cols: list[list[int]] = [[] for _ in range(14)]
        (owner, node, end, cpu, mem, g_owner, g_node, g_gpu, g_end, g_milli, g_mem) = cols[:11]
        m_owner, m_index, m_end = cols[11:]
        for k, (t, assignments) in enumerate(holders):
            for a in assignments:
                owner.append(k)
                node.append(a.node)
                end.append(t)
                cpu.append(a.cpu_milli)
                mem.append(a.memory_mib)
                for g in a.gpus:
                    g_owner.append(k)
                    g_node.append(a.node)
                    g_gpu.append(g)
                    g_end.append(t)
                    g_milli.append(a.gpu_milli)
                    g_mem.append(a.gpu_memory_mib)
                for m in a.mig:
                    m_owner.append(k)
                    m_index.append(m)
                    m_end.append(t)
        return cls(*(np.array(c, dtype=np.int64) for c in cols))

    def offset(self, by: int) -> _Flat:
        """The same entries with owners shifted by ``by``."""
        return replace(
            self, owner=self.owner + by, g_owner=self.g_owner + by, m_owner=self.m_owner + by
        )

    def then(self, other: _Flat) -> _Flat:
        """These entries followed by ``other``'s (owners kept as they are)."""
        return _Flat(
            *(np.concatenate([a, b]) for a, b in zip(self._arrays(), other._arrays(), strict=True))
        )

    def where(self, live: BoolArray) -> _Flat:
        """Only the entries whose owner is ``live``."""
        keep, g_keep, m_keep = live[self.owner], live[self.g_owner], live[self.m_owner]
        return _Flat(
            *(a[keep] for a in self._arrays()[:5]),
            *(a[g_keep] for a in self._arrays()[5:11]),
            *(a[m_keep] for a in self._arrays()[11:]),
        )

    def _arrays(self) -> tuple[IntArray, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


class RunningEvents(Rows[RunningJob]):
    """Running jobs' assignments flattened once per job and kept across cycles."""

    def _reset(self) -> None:
        super()._reset()
        self._flat = _Flat.of([])
        self._flat_rows = 0

    def flat(self) -> _Flat:
        """The flattened assignments of every row; owners are rows."""
        if self._flat_rows < len(self.objects):
            fresh = [(r.expected_end, r.assignments) for r in self.objects[self._flat_rows :]]
            self._flat = self._flat.then(_Flat.of(fresh).offset(self._flat_rows))
            self._flat_rows = len(self.objects)
        return self._flat


@dataclass(frozen=True)
class _Events:
    cpu: _Releases
    mem: _Releases
    milli: _Releases
    gmem: _Releases
    mig_end: IntArray
    now: int
    task_node: IntArray  # per task of a holder: its node and end (now if past)
    task_end: IntArray

    def node_idle(self) -> IntArray:
        """Per node, when its last holder lets go (now if none)."""
        idle = np.full(self.cpu.slots, self.now, dtype=np.int64)
        np.maximum.at(idle, self.task_node, self.task_end)
        return idle

    @classmethod
    def build(cls, st: ClusterState, f: _Flat, now: int) -> _Events:
        """Events of ``f``: past ends count as now."""
        width = st.gpu_milli_free.shape[1]

        def at_least_now(times: IntArray) -> IntArray:
            return np.maximum(times, now)

        end, g_end = at_least_now(f.end), at_least_now(f.g_end)
        slot = f.g_node * width + f.g_gpu
        mig_end = np.zeros(len(st.mig_free), dtype=np.int64)
        mig_held = np.zeros(len(st.mig_free), dtype=np.bool_)
        mig_end[f.m_index] = f.m_end
        mig_held[f.m_index] = True
        n = st.num_nodes
        cpu, mem = _Releases.build(f.node, end, (f.cpu, f.mem), n)
        milli, gmem = _Releases.build(slot, g_end, (f.g_milli, f.g_mem), n * width)
        return cls(
            cpu=cpu,
            mem=mem,
            milli=milli,
            gmem=gmem,
            mig_end=np.where(st.mig_free, 0, np.where(mig_held, at_least_now(mig_end), NEVER)),
            now=now,
            task_node=f.node,
            task_end=end,
        )
