"""MIG re-partitioning: new layouts for idle GPUs, cut to what waits.

A static MIG split serves one mix of slice sizes. When the mix shifts (many
1g jobs by day, 3g, 4g and 7g ones at night), instances of the wrong size
sit free while jobs wait for the right one. ``MigPlanner`` (the profile's
``Repartitioner``) reads, after each cycle's walk, what the walk left
waiting and re-cuts idle GPUs to serve it:

1. **Demand**: per MIG profile, the instances that the jobs left waiting
   ask for (``mig_count`` x nodes), counting jobs that wait for resources,
   for priority, or because no GPU is cut to hold them yet
   (``ReqNodeNotAvail``); and the whole GPUs that waiting GPU jobs ask for.
   Jobs held by a limit, a hold or a dependency do not count.
2. **Supply**: per profile, the free instances that the plan's starts
   leave on usable nodes, and those of changes still under way; whole GPUs
   free with MIG off likewise.
3. **Each idle GPU** of a MIG-capable model on a usable node, in node and
   GPU order, then (with ``drain``) each busy MIG GPU, least busy first
   (fewest compute slices in use, then the earliest last expected end),
   except one whose last change was taken on less than ``min_interval_s``
   ago: what it offers free leaves the supply, and the layout that serves
   most of the demand left unmet, counted in compute slices (MIG off serves
   one whole GPU, 7 slices), is chosen among every layout ``core.mig``
   accepts for the model. Ties go to serving more profiles, then to more
   slices in profiles that are asked for at all, then to more slices in
   all, then to the first layout in a fixed order. An idle GPU is re-cut
   when that layout serves more than what it offers now; a busy one is
   drained for it (its free instances take no new work, and the book
   re-cuts it once its runs end) only when the layout serves at least
   ``DRAIN_GAIN`` times what its own layout would, since draining idles
   what is free on it meanwhile. Either way what the GPU will offer joins
   the supply.

While nothing waits nothing changes, so a layout stays as long as it
serves. Demand is counted per profile name: a job's ``gpu_models`` are not
consulted, so a job that only one model may take can have another model's
GPU re-cut for it (``min_interval_s`` bounds the cost). The planner is
pure: the times and layouts of changes come in the snapshot.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from functools import cache

import numpy as np
from pydantic import Field

from gpufleet.core import mig as migmod
from gpufleet.core.model import InvalidSpec, Node
from gpufleet.core.plan import NODE_NOT_AVAIL, PRIORITY, RESOURCES, Layout, Plan, Relayout
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import BoolArray, ClusterState, IntArray
from gpufleet.policies.tables import StrictTable

GpuKey = tuple[int, int]
"""A GPU as (node index, GPU index)."""
WHOLE = ""
"""The demand key of a whole GPU (MIG off)."""
DRAIN_GAIN = 2
"""A busy GPU drains only for a layout serving this many times what its own layout would."""
WAITING = frozenset((RESOURCES, PRIORITY, NODE_NOT_AVAIL))
"""Pending reasons of jobs that a re-cut GPU could serve."""


class MigArgs(StrictTable):
    """The ``[mig]`` table: whether idle MIG GPUs are re-cut, and how often at most."""

    repartition: bool = Field(False, description="re-cut idle MIG-capable GPUs for what waits")
    min_interval_s: int = Field(
        3600, ge=0, description="one GPU's layout changes begin at least this far apart"
    )
    reconfigure_s: int = Field(
        60, ge=0, description="how long a change keeps the GPU from work (the simulator's)"
    )
    drain: bool = Field(
        False,
        description="also drain busy MIG GPUs for a change: their free instances "
        "take no new work, and the change begins once their runs end",
    )


class MigPlanner:
    """Re-cuts idle MIG-capable GPUs to match waiting demand (see the module docstring)."""

    NAME = "migplan"

    def __init__(self, args: MigArgs) -> None:
        self.args = args
        self.reconfigure_s = args.reconfigure_s
        # A GPU barred by min_interval_s may be re-cut later with nothing else changed.
        self.clocked = args.min_interval_s > 0

    def propose(self, snapshot: Snapshot, plan: Plan) -> list[Relayout]:
        st = snapshot.state
        demand = _demand(snapshot, plan)
        if not demand:
            return []
        taken = _taken(st, plan)
        offers = _offers(st, taken)
        supply = _supply(snapshot, offers)
        out: list[Relayout] = []
        for i, g in _candidates(snapshot, taken, self.args):
            if all(supply[k] >= n for k, n in demand.items()):
                break  # re-cutting a GPU could only take away what serves
            table = _layouts(st.nodes[i].gpus[g].model)
            offered = offers.get((i, g), Counter())
            supply.subtract(offered)
            unmet = np.array([max(0, demand[k] - supply[k]) for k in table.keys], np.int64)
            if unmet.any():
                best = table.best(unmet, np.array([demand[k] > 0 for k in table.keys]))
                serves = table.value(table.counts[best], unmet)
                if taken[0][i, g]:  # drain only for at least twice what its layout serves
                    own = table.counts_of(_instances(st.nodes[i].gpus[g].mig))
                    worth = serves >= max(1, DRAIN_GAIN * table.value(own, unmet))
                else:
                    worth = serves > table.value(table.counts_of(offered), unmet)
                if worth:
                    out.append(Relayout(i, g, table.layouts[best]))
                    offered = table.counter(best)
            supply.update(offered)
        return out


def _demand(snapshot: Snapshot, plan: Plan) -> Counter[str]:
    """Instances per MIG profile, and whole GPUs, that the jobs left waiting ask for."""
    demand: Counter[str] = Counter()
    for job in snapshot.pending:
        if job.id in plan.starts or plan.reasons.get(job.id, RESOURCES) not in WAITING:
            continue
        r = job.request
        if r.mig_profile:
            demand[r.mig_profile] += r.mig_count * r.nodes
        elif r.gpu_count:
            demand[WHOLE] += r.gpu_count * r.nodes
    return demand


def _taken(st: ClusterState, plan: Plan) -> tuple[BoolArray, IntArray]:
    """GPUs (nodes x GPUs) with anything allocated, the plan's starts included; and the
    MIG instances those starts take."""
    busy = st.gpu_milli_free < st.gpu_milli_total
    held = ~st.mig_free & (st.mig_profile >= 0)
    busy[st.mig_node[held], st.mig_gpu[held]] = True
    mig: list[int] = []
    for assignments in plan.starts.values():
        for a in assignments:
            busy[a.node, list(a.gpus)] = True
            busy[a.node, st.mig_gpu[list(a.mig)]] = True
            mig += a.mig
    return busy, np.array(mig, dtype=np.int64)


def _offers(st: ClusterState, taken: tuple[BoolArray, IntArray]) -> dict[GpuKey, Counter[str]]:
    """What each GPU on a usable node offers free once the plan's starts have theirs: its
    free instances per profile, or one whole GPU for an idle one with MIG off."""
    busy, started = taken
    usable = st.healthy & ~st.removed
    free = st.mig_free & (st.mig_profile >= 0) & usable[st.mig_node]
    free[started] = False
    out: defaultdict[GpuKey, Counter[str]] = defaultdict(Counter)
    nodes, gpus, profiles = (a[free].tolist() for a in (st.mig_node, st.mig_gpu, st.mig_profile))
    for i, g, p in zip(nodes, gpus, profiles, strict=True):
        out[i, g][st.mig_profiles[p]] += 1
    whole = (st.gpu_milli_total > 0) & ~busy & usable[:, None] & st.gpu_exists
    for i, g in zip(*np.nonzero(whole), strict=True):
        out[int(i), int(g)][WHOLE] = 1
    return out


def _supply(snapshot: Snapshot, offers: dict[GpuKey, Counter[str]]) -> Counter[str]:
    """Everything offered free, and what the changes under way will bring."""
    supply: Counter[str] = Counter()
    for offer in offers.values():
        supply.update(offer)
    for layout in snapshot.reconfiguring.values():
        supply.update(_instances(layout))
    return supply


def _candidates(
    snapshot: Snapshot, taken: tuple[BoolArray, IntArray], args: MigArgs
) -> list[tuple[int, int]]:
    """GPUs of MIG-capable models on usable nodes that may change now: the idle ones in
    node and GPU order, then (with ``drain``) the busy MIG ones, least busy first."""
    st = snapshot.state
    busy, _ = taken
    idle, draining = [], []
    for i in np.flatnonzero(st.healthy & ~st.removed).tolist():
        for gpu in st.nodes[i].gpus:
            g = gpu.index
            if gpu.model not in migmod.PROFILES or (i, g) in snapshot.reconfiguring:
                continue
            changed = snapshot.mig_changed.get((i, g))
            if changed is not None and snapshot.now - changed < args.min_interval_s:
                continue
            if not busy[i, g]:
                idle.append((i, g))
            elif args.drain and gpu.mig is not None:
                draining.append((i, g))
    if not draining:
        return idle
    slices = np.zeros(busy.shape, np.int64)  # compute slices in use per GPU
    held = ~st.mig_free & (st.mig_profile >= 0)
    per_profile = np.array([_slices(p) for p in st.mig_profiles] or [0], np.int64)
    np.add.at(slices, (st.mig_node[held], st.mig_gpu[held]), per_profile[st.mig_profile[held]])
    ends: dict[tuple[int, int], int] = {}  # the last expected end of a run on each GPU
    for r in snapshot.running:
        for a in r.assignments:
            for g in {*a.gpus, *st.mig_gpu[list(a.mig)].tolist()}:
                ends[a.node, g] = max(ends.get((a.node, g), 0), r.expected_end)
    draining.sort(key=lambda ig: (slices[ig], ends.get(ig, 0), ig))
    return idle + draining


def _slices(profile: str) -> int:
    return int(profile.partition("g")[0])


def _instances(layout: Layout) -> Counter[str]:
    """What a layout offers: its instances per profile, or one whole GPU for MIG off."""
    if layout is None:
        return Counter({WHOLE: 1})
    return Counter(p for p, _ in layout)


class _Layouts:
    """Every layout a model supports (MIG off first), as counts per key (profiles, then
    ``WHOLE``), one layout per distinct count."""

    def __init__(self, model: str) -> None:
        table = migmod.PROFILES[model]
        self.keys = [*table, WHOLE]
        self.slices = np.array([p.compute_slices for p in table.values()] + [7], np.int64)
        layouts: list[Layout] = [None]
        seen: set[tuple[int, ...]] = set()
        counts: list[list[int]] = [[0] * len(table) + [1]]
        for layout in _valid(model):
            row = [sum(1 for p, _ in layout if p == name) for name in table] + [0]
            if tuple(row) not in seen:
                seen.add(tuple(row))
                layouts.append(layout)
                counts.append(row)
        self.layouts = layouts
        self.counts = np.array(counts, np.int64)

    def counts_of(self, c: Counter[str]) -> IntArray:
        return np.array([c[k] for k in self.keys], np.int64)

    def counter(self, row: int) -> Counter[str]:
        return _instances(self.layouts[row])

    def value(self, counts: IntArray, unmet: IntArray) -> int:
        """Compute slices of unmet demand that ``counts`` serves (rows or one vector)."""
        return int(np.minimum(counts, unmet) @ self.slices)

    def best(self, unmet: IntArray, asked: BoolArray) -> int:
        """The row serving most of ``unmet``; ties as the module docstring says."""
        met = np.minimum(self.counts, unmet)
        served = met @ self.slices
        kinds = (met > 0).sum(axis=1)
        useful = (self.counts * asked) @ self.slices
        total = self.counts @ self.slices
        # lexsort's last key is the primary one; the lowest row wins what is left.
        order = np.lexsort((np.arange(len(total)), -total, -useful, -kinds, -served))
        return int(order[0])


@cache
def _layouts(model: str) -> _Layouts:
    return _Layouts(model)


def _valid(model: str) -> list[tuple[tuple[str, int], ...]]:
    """Every non-empty layout ``core.mig`` accepts on ``model``, in a fixed order."""
    options = sorted(
        ((name, s) for name, p in migmod.PROFILES[model].items() for s in p.starts),
        key=lambda o: (o[1], o[0]),
    )
    found: list[tuple[tuple[str, int], ...]] = []

    def extend(layout: tuple[tuple[str, int], ...], at: int) -> None:
        for k in range(at, len(options)):
            grown = (*layout, options[k])
            if _fits(model, grown):
                found.append(grown)
                extend(grown, k + 1)

    extend((), 0)
    return found


def _fits(model: str, layout: tuple[tuple[str, int], ...]) -> bool:
    try:
        migmod.validate_layout(model, tuple(migmod.MigInstance(p, s) for p, s in layout))
    except InvalidSpec:
        return False
    return True


def recut_for(nodes: Sequence[Node], profile: str) -> list[Node]:
    """``nodes`` with every GPU whose model offers ``profile`` cut into as many instances
    of it as it holds: the cluster a re-partitioning driver could make for such jobs
    (to tell a job that no GPU could ever hold from one that waits for a re-cut)."""
    out = []
    for node in nodes:
        gpus = list(node.gpus)
        for j, gpu in enumerate(gpus):
            if profile in migmod.PROFILES.get(gpu.model, {}):
                table = _layouts(gpu.model)
                want = np.array([k == profile for k in table.keys], np.int64) * 7
                best = table.best(want, want > 0)
                gpus[j] = replace(gpu, mig=table.layouts[best])
        out.append(replace(node, gpus=tuple(gpus)))
    return out


def supported_layouts(model: str) -> list[tuple[tuple[str, int], ...]]:
    """Every MIG layout ``model`` supports, one per distinct count of instances per
    profile (the planner's candidates, MIG off left out), in the planner's order."""
    return [layout for layout in _layouts(model).layouts if layout is not None]
