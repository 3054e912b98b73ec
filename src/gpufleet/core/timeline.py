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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial

import numpy as np
from numba import njit

from gpufleet.core.columns import Rows
from gpufleet.core.consecutive import consecutive_nodes
from gpufleet.core.fit import mig_instances, static_gpu_ok
from gpufleet.core.job import RunningJob
from gpufleet.core.model import MILLI, Request
from gpufleet.core.state import Assignment, BoolArray, ClusterState, IntArray

Releases = tuple[
    BoolArray, IntArray, IntArray, IntArray, IntArray,
    IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray,
]  # fmt: skip
"""What node times read of a timeline (``Timeline.releases``): the state's health and
free CPU, memory, milli-GPU and GPU memory, then the release events of tasks (node,
time, CPU, memory) and of GPU shares (slot, time, milli-GPU, GPU memory)."""
NO_RELEASES: Releases = (
    np.zeros(0, dtype=np.bool_),
    *(np.zeros(0, dtype=np.int64) for _ in range(2)),
    *(np.zeros((0, 0), dtype=np.int64) for _ in range(2)),
    *(np.zeros(0, dtype=np.int64) for _ in range(8)),
)  # type: ignore[assignment]
"""``Releases`` of nothing, for a pass that computes no node times."""

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
def insert_spans(
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
    return insert_spans(node, start, end, empty, 0, 0)


@njit(cache=True, nogil=True)
def usable_over(
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
def earliest_on(
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
    shifted = first
    while True:
        if (shifted < NEVER).sum() < k:
            return -1, np.zeros(0, dtype=np.int64)
        at = shifted.min() if k == 1 else np.sort(shifted)[k - 1]
        if at > horizon:
            return -1, np.zeros(0, dtype=np.int64)
        ok = (t <= at) & usable_over(len(t), node, start, end, at, length)
        if ok.sum() >= k:
            break
        shifted = _shift(np.maximum(t, at), length, node, start, end)
    candidates = np.flatnonzero(ok)
    chosen = candidates[np.argsort(first[candidates], kind="mergesort")[:k]]
    return at, np.sort(chosen)


@njit(cache=True, nogil=True)
def hold_span(start: int, length: int, step: int) -> tuple[int, int]:
    begin = start // step * step
    return begin, max((start + length) // step * step, begin + step)


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
        spans = self.node, self.start, self.end
        self.node, self.start, self.end = insert_spans(*spans, idx, start, end)

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
        return usable_over(self.nodes, self.node, self.start, self.end, at, length)

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
    consecutive: bool = False  # nodes picked as cons_tres does (``core.consecutive``)

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


@lru_cache(maxsize=1024)
def _one_task(r: Request) -> Request:
    """One task of ``r``: its node times do not depend on the gang size, so gangs share
    them. Kept, as each timeline asks again for the same few gangs."""
    return r if r.nodes == 1 else replace(r, nodes=1)


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
        rows: IntArray | None = None,
        needs: dict[Request, tuple[IntArray, BoolArray]] | None = None,
    ) -> None:
        """``running`` hold their assignments until their expected ends (read lazily).

        ``flattened``, kept by the caller across timelines, saves flattening
        the same running jobs' assignments again; ``rows``: the rows of
        ``running`` there, when the caller has them. ``will_run``: estimate
        as Slurm does (module docstring); None: exactly. ``needs``: the
        ``task_needs`` found so far, kept by the caller for timelines over
        states of the same shape (``ClusterState.epoch``).
        """
        self.state = state
        self.will_run = will_run
        self.now = now
        self.resolution = max(1, resolution)
        self._running = running
        self._flattened = flattened if flattened is not None else RunningEvents()
        self._rows = rows
        self._running_rows: BoolArray | None = None  # ``rows`` as a mask, once asked
        self._removed: set[str] = set()
        self._added: dict[str, tuple[int, tuple[Assignment, ...]]] = {}
        self._holders: _Flat | None = None
        self._built: _Events | None = None
        self._releases: Releases | None = None
        self._batched: dict[tuple[bytes, int], _Events] = {}
        self._times: dict[Request, IntArray] = {}  # node_times over the exact events
        self._on: dict[tuple[Request, bytes], IntArray] = {}
        # Per request, what node times read of it: its needs and the GPUs it may ever use.
        self._needs = needs if needs is not None else {}

    def add(self, key: str, assignments: Iterable[Assignment], end: int) -> None:
        """``key`` holds ``assignments`` until ``end`` (a job past its end frees now)."""
        held = (end, tuple(assignments))
        holders = self._holders
        if holders is not None and (key in self._added or self._running_holds(key)):
            holders = None  # what it held goes: flatten afresh
        self._added[key] = held
        self._changed()
        if holders is not None:  # a key that held nothing (a cycle's start) adds its entries
            self._holders = holders.merged(_Flat.of([held]))

    def _running_holds(self, key: str) -> bool:
        """Whether a running job of id ``key`` is among the holders ``_flat`` found."""
        if key in self._removed or self._rows is None:
            return False
        table = self._flattened
        if self._running_rows is None or len(self._running_rows) < len(table.objects):
            self._running_rows = np.zeros(len(table.objects), dtype=np.bool_)
            self._running_rows[self._rows] = True
        return bool(self._running_rows[table.rows_of([key])].any())

    def remove(self, key: str) -> None:
        """``key`` no longer holds anything (it was preempted or finished)."""
        self._removed.add(key)
        self._added.pop(key, None)
        self._changed()

    def _changed(self) -> None:
        self._holders = None
        self._built = None
        self._releases = None
        self._batched.clear()
        self._times.clear()
        self._on.clear()

    def _flat(self) -> _Flat:
        """Every holder's assignments and end, as flat arrays in order of their ends."""
        if self._holders is None:
            table = self._flattened
            if self._rows is None:
                self._rows = table.rows(self._running)
            rows = self._rows
            running = table.live(rows)
            gone = self._removed | self._added.keys()
            if gone:
                live = np.zeros(len(table.objects), dtype=np.bool_)
                live[rows] = True
                live[table.rows_of(gone)] = False
                running = running.where(live)
            added = list(self._added.values())
            self._holders = running.merged(_Flat.of(added)) if added else running
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
            built = self._batched[key] = _Events.build(self.state, flat.ending(batch), self.now)
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
                task = _one_task(r)
                times = self._times.get(task)
                if times is None:
                    times = self._times[task] = self._node_times(task, self._events())
                    times.flags.writeable = False  # shared by every query until then
                self._times[r] = times
            return times
        return self._node_times(r, ev)

    def times_on(self, r: Request, nodes: BoolArray) -> IntArray:
        """``node_times`` from now on, only on ``nodes`` (NEVER elsewhere); kept until a
        holder changes, as backfill asks it for many jobs of a few requests."""
        key = (r, nodes.tobytes())
        t = self._on.get(key)
        if t is None:
            t = self._on[key] = np.where(nodes, np.maximum(self.node_times(r), self.now), NEVER)
            t.flags.writeable = False
        return t

    def task_needs(self, r: Request) -> tuple[IntArray, BoolArray]:
        """What node times read of ``r`` (but MIG): one task's CPU, memory, GPUs,
        milli-GPU and GPU memory per GPU, and the GPUs it may ever use."""
        r = _one_task(r)
        needs = self._needs.get(r)
        if needs is None:
            need = [r.cpu_milli, r.memory_mib, r.gpu_count, r.milli_per_gpu, r.gpu_memory_mib]
            needs = self._needs[r] = (np.array(need, dtype=np.int64), static_gpu_ok(self.state, r))
        return needs

    def releases(self) -> Releases:
        """The state and the exact release events, as ``task_times`` reads them: those of
        ``_Events.build`` without its MIG ones, kept until a holder changes."""
        if self._releases is None:
            st = self.state
            free = (st.healthy, st.cpu_free, st.mem_free, st.gpu_milli_free, st.gpu_mem_free)
            self._releases = free + _release_arrays(self._flat(), self.now, st)
        return self._releases

    def _node_times(self, r: Request, ev: _Events) -> IntArray:
        st = self.state
        need, gpu_ok = self.task_needs(r)
        t: IntArray = _task_times(
            st.healthy,
            st.cpu_free,
            st.mem_free,
            st.gpu_milli_free,
            st.gpu_mem_free,
            gpu_ok,
            ev.cpu.slot,
            ev.cpu.time,
            ev.cpu.amount,
            ev.mem.amount,
            ev.milli.slot,
            ev.milli.time,
            ev.milli.amount,
            ev.gmem.amount,
            need,
            self.now,
        )
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
        if not_before <= self.now and not whole_nodes:
            t = self.times_on(r, nodes)
        else:
            t = np.maximum(self.node_times(r), max(self.now, not_before))
            if whole_nodes:
                t = np.maximum(t, self._events().node_idle())
            t = np.where(nodes, t, NEVER)
        spans = blocks.node, blocks.start, blocks.end
        start, chosen = earliest_on(t, length, r.nodes, horizon, *spans)
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
        consecutive = self.will_run is not None and self.will_run.consecutive
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
                if consecutive:
                    free = self.state.cpu_free + ev.cpu.by(start)
                    chosen = consecutive_nodes(t <= start, free, k, r.cpu_milli, self.state.removed)
                else:
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
        begin, end = hold_span(start, length, self.resolution)
        return int(begin), int(end)


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


@njit(cache=True, nogil=True)
def _first_both(
    slot: IntArray,
    time: IntArray,
    amount_a: IntArray,
    amount_b: IntArray,
    free_a: IntArray,
    free_b: IntArray,
    need_a: int,
    need_b: int,
    now: int,
) -> IntArray:
    """Per slot, the later of ``_first`` over two amounts the same events release."""
    a = _first(slot, time, amount_a, free_a, need_a, now)
    b = _first(slot, time, amount_b, free_b, need_b, now)
    return np.maximum(a, b)


@njit(cache=True, nogil=True)
def _task_times(
    healthy: BoolArray,
    cpu_free: IntArray,
    mem_free: IntArray,
    milli_free: IntArray,
    gmem_free: IntArray,
    gpu_ok: BoolArray,
    node: IntArray,
    end: IntArray,
    cpu: IntArray,
    mem: IntArray,
    slot: IntArray,
    g_end: IntArray,
    milli: IntArray,
    gmem: IntArray,
    need: IntArray,
    now: int,
) -> IntArray:
    """``Timeline._node_times`` but MIG, in one pass: per node, the first time one task
    (``need``: CPU, memory, GPUs, milli-GPU and GPU memory per GPU) fits there."""
    nodes, width = milli_free.shape
    out = np.full(nodes, NEVER, dtype=np.int64)
    k = need[2]
    if k > width:
        return out
    t = _first_both(node, end, cpu, mem, cpu_free, mem_free, need[0], need[1], now)
    for v in range(nodes):
        if healthy[v]:
            out[v] = max(now, t[v])
    if k:
        free_m, free_g = milli_free.ravel(), gmem_free.ravel()
        gpu_t = _first_both(slot, g_end, milli, gmem, free_m, free_g, need[3], need[4], now)
        row = np.empty(width, dtype=np.int64)
        for v in range(nodes):
            if out[v] == NEVER:  # no later GPU time can move it
                continue
            for j in range(width):
                row[j] = gpu_t[v * width + j] if gpu_ok[v, j] else NEVER
            out[v] = max(out[v], _kth(row, k))
    return out


@njit(cache=True, nogil=True)
def task_times(
    releases: Releases, gpu_ok: BoolArray, need: IntArray, nodes: BoolArray, now: int
) -> IntArray:
    """``Timeline.times_on`` of a request without MIG from its ``task_needs`` (``need``,
    ``gpu_ok``) and the timeline's ``releases``, computed in a compiled caller."""
    healthy, cpu_free, mem_free, milli_free, gmem_free = releases[:5]
    node, end, cpu, mem, slot, g_end, milli, gmem = releases[5:]
    t = _task_times(
        healthy, cpu_free, mem_free, milli_free, gmem_free, gpu_ok,
        node, end, cpu, mem, slot, g_end, milli, gmem, need, now,
    )  # fmt: skip
    out = np.full(len(t), NEVER, dtype=np.int64)
    for v in range(len(t)):
        if nodes[v]:
            out[v] = max(t[v], now)
    return out


@njit(cache=True, nogil=True)
def _kth(row: IntArray, k: int) -> int:
    """The ``k``-th smallest of ``row``, sorted in place: an insertion sort, which for a
    node's few GPUs costs far less than numba's general sort."""
    for i in range(1, len(row)):
        x, j = row[i], i - 1
        while j >= 0 and row[j] > x:
            row[j + 1] = row[j]
            j -= 1
        row[j + 1] = x
    return int(row[k - 1])


@dataclass(frozen=True)
class _Releases:
    """Release events of one resource (slot, time, amount), sorted by time."""

    slot: IntArray
    time: IntArray
    amount: IntArray
    slots: int

    def first(self, free: IntArray, need: int, now: int) -> IntArray:
        """Per slot, the first time ``free`` plus releases so far reaches ``need``."""
        free = free.astype(np.int64, copy=False)
        return _first(self.slot, self.time, self.amount, free, need, now)

    def by(self, at: int) -> IntArray:
        """Per slot, the amount released by ``at``."""
        n = int(np.searchsorted(self.time, at, side="right"))
        released: IntArray = np.bincount(
            self.slot[:n], weights=self.amount[:n], minlength=self.slots
        ).astype(np.int64)
        return released


def _by_end(entries: IntArray, end: int) -> IntArray:
    """The columns of ``entries`` (one per entry) in order of their row ``end``."""
    return entries[:, np.argsort(entries[end], kind="stable")]


@njit(cache=True, nogil=True)
def _merge(a: IntArray, b: IntArray, end: int) -> IntArray:
    """Columns of ``a`` and ``b``, each in order of row ``end``, merged in that order."""
    n, m = a.shape[1], b.shape[1]
    out = np.empty((a.shape[0], n + m), dtype=np.int64)
    i = j = 0
    while i < n or j < m:
        if j < m and (i >= n or b[end, j] < a[end, i]):
            out[:, i + j] = b[:, j]
            j += 1
        else:
            out[:, i + j] = a[:, i]
            i += 1
    return out


class _Row:
    """A field of a ``_Flat``: one row of one of its matrices."""

    def __init__(self, matrix: str, row: int) -> None:
        self.matrix, self.row = matrix, row

    def __get__(self, flat: _Flat, owner: type) -> IntArray:
        values: IntArray = getattr(flat, self.matrix)[self.row]
        return values


@dataclass(frozen=True)
class _Flat:
    """Assignments of holders as flat arrays: per task, per GPU share and per MIG instance.

    Each is a matrix with a column per entry (one numpy call moves every
    field). Tasks and GPU shares are kept in order of their end, so release
    events need no sort; the order of entries that end together is free
    (what is released by a time does not depend on it). ``*_owner`` is the
    holder each entry comes from (its row, or its position).
    """

    tasks: IntArray  # owner, node, end, cpu, mem
    shares: IntArray  # owner, node, gpu, end, milli, gpu memory
    mig: IntArray  # owner, instance, end

    owner = _Row("tasks", 0)
    node = _Row("tasks", 1)
    end = _Row("tasks", 2)
    cpu = _Row("tasks", 3)
    mem = _Row("tasks", 4)
    g_node = _Row("shares", 1)
    g_gpu = _Row("shares", 2)
    g_end = _Row("shares", 3)
    g_milli = _Row("shares", 4)
    g_mem = _Row("shares", 5)
    m_index = _Row("mig", 1)
    m_end = _Row("mig", 2)

    @classmethod
    def of(
        cls, holders: Sequence[tuple[int, tuple[Assignment, ...]]], owners: IntArray | None = None
    ) -> _Flat:
        """Flatten ``holders`` (end, assignments); owners are ``owners``, else positions."""
        tasks: list[tuple[int, ...]] = []
        shares: list[tuple[int, ...]] = []
        mig: list[tuple[int, ...]] = []
        who = range(len(holders)) if owners is None else owners.tolist()
        for k, (t, assignments) in zip(who, holders, strict=True):
            for a in assignments:
                tasks.append((k, a.node, t, a.cpu_milli, a.memory_mib))
                shares.extend((k, a.node, g, t, a.gpu_milli, a.gpu_memory_mib) for g in a.gpus)
                mig.extend((k, m, t) for m in a.mig)

        def matrix(rows: list[tuple[int, ...]], width: int) -> IntArray:
            return np.array(rows, dtype=np.int64).reshape(-1, width).T

        if len(holders) == 1:  # one end: already in order
            return cls(matrix(tasks, 5), matrix(shares, 6), matrix(mig, 3))
        return cls(_by_end(matrix(tasks, 5), 2), _by_end(matrix(shares, 6), 3), matrix(mig, 3))

    def merged(self, other: _Flat) -> _Flat:
        """These entries and ``other``'s, in order of their ends (owners kept as they are)."""
        if not other.tasks.shape[1]:
            return self
        return _Flat(
            _merge(self.tasks, other.tasks, 2),
            _merge(self.shares, other.shares, 3),
            np.concatenate([self.mig, other.mig], axis=1),
        )

    def where(self, live: BoolArray) -> _Flat:
        """Only the entries whose owner is ``live``."""
        return _Flat(
            self.tasks[:, live[self.tasks[0]]],
            self.shares[:, live[self.shares[0]]],
            self.mig[:, live[self.mig[0]]],
        )

    def ending(self, at: Callable[[IntArray], IntArray]) -> _Flat:
        """The same entries, each ending at ``at(its end)`` instead (in order again)."""
        tasks, shares, mig = self.tasks.copy(), self.shares.copy(), self.mig.copy()
        tasks[2], shares[3], mig[2] = at(tasks[2]), at(shares[3]), at(mig[2])
        return _Flat(_by_end(tasks, 2), _by_end(shares, 3), mig)


class RunningEvents(Rows[RunningJob]):
    """Running jobs' rows, and the flattened assignments of the jobs a cycle last
    read (``live``), kept across cycles."""

    def _reset(self) -> None:
        super()._reset()
        self._live = _Flat.of([])
        self._live_rows = np.zeros(0, dtype=np.bool_)
        self._by_id: dict[str, list[int]] = {}
        self._by_id_rows = 0

    def live(self, rows: IntArray) -> _Flat:
        """The flattened assignments of the jobs at ``rows``; owners are rows.

        Updated from the last call's by the jobs that left and came (a
        cycle's running jobs differ from the last cycle's by a few), so only
        new jobs are flattened; as if flattened afresh, in another order of
        entries that end together.
        """
        want = np.zeros(len(self.objects), dtype=np.bool_)
        want[rows] = True
        had = np.zeros(len(self.objects), dtype=np.bool_)
        had[: len(self._live_rows)] = self._live_rows
        live = self._live
        if (had & ~want).any():
            live = live.where(want)
        came = np.flatnonzero(want & ~had)
        if len(came):
            objects = self.objects
            fresh = [(objects[i].expected_end, objects[i].assignments) for i in came.tolist()]
            live = live.merged(_Flat.of(fresh, came))
        self._live, self._live_rows = live, want
        return live

    def rows_of(self, ids: Iterable[str]) -> IntArray:
        """Every row of a job of these ids (a job changed since has rows of old objects)."""
        for i in range(self._by_id_rows, len(self.objects)):
            self._by_id.setdefault(self.objects[i].job.id, []).append(i)
        self._by_id_rows = len(self.objects)
        found = [i for job_id in ids for i in self._by_id.get(job_id, ())]
        return np.array(found, dtype=np.int64)


def _release_arrays(
    f: _Flat, now: int, st: ClusterState
) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]:
    """The release events of ``f``'s tasks (node, time, CPU, memory) and GPU shares (slot,
    time, milli-GPU, GPU memory); past ends count as now (which keeps them in order)."""
    slot = f.g_node * st.gpu_milli_free.shape[1] + f.g_gpu
    end, g_end = np.maximum(f.end, now), np.maximum(f.g_end, now)
    return f.node, end, f.cpu, f.mem, slot, g_end, f.g_milli, f.g_mem


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
        """Events of ``f``: past ends count as now (which keeps them in order)."""
        width = st.gpu_milli_free.shape[1]
        _, end, _, _, slot, g_end, _, _ = _release_arrays(f, now, st)
        mig_end = np.zeros(len(st.mig_free), dtype=np.int64)
        mig_held = np.zeros(len(st.mig_free), dtype=np.bool_)
        mig_end[f.m_index] = f.m_end
        mig_held[f.m_index] = True
        n = st.num_nodes
        return cls(
            cpu=_Releases(f.node, end, f.cpu, n),
            mem=_Releases(f.node, end, f.mem, n),
            milli=_Releases(slot, g_end, f.g_milli, n * width),
            gmem=_Releases(slot, g_end, f.g_mem, n * width),
            mig_end=np.where(st.mig_free, 0, np.where(mig_held, np.maximum(mig_end, now), NEVER)),
            now=now,
            task_node=f.node,
            task_end=end,
        )
