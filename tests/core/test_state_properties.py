"""Property tests: random place/release sequences never break the cluster's books.

A state machine builds a small random cluster (whole, MIG-partitioned and
CPU-only nodes, some unhealthy), picks a registered placement profile, then
places and releases random requests (whole GPUs, fractions, CPU-only, MIG,
gangs). After every step the state must equal its initial capacity minus the
assignments still live, and nothing may be over-allocated. A request is refused
only if, by a plain-loop check, fewer than ``nodes`` nodes could host it, and
``fits_empty`` agrees with that check on an idle copy of the cluster. The
fragmentation meter's prediction for each option equals what placing it gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from builders import NodeBuilder, cluster, job, node
from gpufleet.core import mig
from gpufleet.core.fragmentation import FragmentationMeter, Workload
from gpufleet.core.model import MILLI, Request
from gpufleet.core.placement import Mode, Placer, Statement
from gpufleet.core.state import Assignment, ClusterState, NotIdle
from gpufleet.policies.registry import PLACEMENT, placement_profile

MODELS = ("A100-80GB", "V100M32")
# Valid A100-80GB layouts, from one 7g to seven 1g instances.
LAYOUTS = (
    "7g.80gb@0",
    "3g.40gb@0,3g.40gb@4",
    "4g.40gb@0,2g.20gb@4,1g.10gb@6",
    ",".join(["1g.10gb"] * 7),
    "1g.20gb@0,1g.20gb@2,2g.20gb@4",
)
MIG_PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "7g.80gb")
# Typical requests that the fgd-based profiles measure fragmentation against.
WORKLOAD = (
    job().cpu(4000).gpus(1).build(),
    job().cpu(2000).fraction(500).build(),
    job().cpu(1000).build(),
    job().cpu(8000).gpus(2).build(),
)


@st.composite
def nodes(draw: st.DrawFn, name: str) -> NodeBuilder:
    model = draw(st.sampled_from(MODELS))
    count = draw(st.integers(0, 4))
    b = node(name).model(model).gpus(count)
    b.cpu(draw(st.integers(1, 16)) * 1000).memory(draw(st.integers(1, 64)) * 1024)
    if model == "A100-80GB":
        for gpu in range(count):
            layout = draw(st.none() | st.sampled_from(LAYOUTS))
            if layout is not None:
                b.mig(layout, gpu=gpu)
    if draw(st.integers(0, 9)) == 0:
        b.unhealthy()
    return b


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeBuilder]:
    count = draw(st.integers(1, 4))
    return [draw(nodes(f"n{i}")) for i in range(count)]


@st.composite
def requests(draw: st.DrawFn) -> Request:
    b = job().cpu(draw(st.integers(0, 8)) * 500).memory(draw(st.integers(0, 8)) * 1024)
    b.gang(draw(st.integers(1, 3)))
    kind = draw(st.sampled_from(("cpu", "whole", "fraction", "mig")))
    if kind == "cpu":
        b.cpu(draw(st.integers(1, 8000)))
    elif kind == "whole":
        b.gpus(draw(st.integers(1, 4)))
    elif kind == "fraction":
        # Round shares hit the 1000-milli boundary exactly; odd ones do not.
        milli = draw(st.sampled_from((1, 250, 500, 999)) | st.integers(1, 999))
        b.fraction(milli, draw(st.sampled_from((0, 1024, 16 * 1024, 32 * 1024, 40 * 1024))))
    else:
        b.mig(draw(st.sampled_from(MIG_PROFILES)), draw(st.integers(1, 3)))
    if kind != "cpu" and draw(st.booleans()):
        b.models(draw(st.sampled_from(MODELS)))
    if kind in ("whole", "fraction") and draw(st.integers(0, 3)) == 0:
        b.min_gpu_memory(40 * 1024)
    return b.build()


def snapshot(state: ClusterState) -> dict[str, Any]:
    """Every array of the state except the change counter, copied."""
    return {
        k: v.copy() for k, v in vars(state).items() if isinstance(v, np.ndarray) and k != "version"
    }


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def allowed(state: ClusterState, r: Request, model_id: int) -> bool:
    return not r.gpu_models or state.models[model_id] in r.gpu_models


def can_host(state: ClusterState, r: Request, i: int) -> bool:
    """Could node ``i`` take one member of ``r`` right now? Written as plain loops."""
    if not state.healthy[i] or state.cpu_free[i] < r.cpu_milli or state.mem_free[i] < r.memory_mib:
        return False
    if r.mig_profile:
        free = [
            k
            for k in range(len(state.mig_free))
            if state.mig_node[k] == i
            and state.mig_free[k]
            and state.mig_profiles[state.mig_profile[k]] == r.mig_profile
            and allowed(state, r, state.gpu_model[i, state.mig_gpu[k]])
        ]
        return len(free) >= r.mig_count
    usable = [
        j
        for j in range(state.gpu_exists.shape[1])
        if state.gpu_exists[i, j]
        and state.gpu_milli_total[i, j] > 0
        and allowed(state, r, state.gpu_model[i, j])
        and state.gpu_mem_total[i, j] >= r.min_gpu_memory_mib
        and state.gpu_milli_free[i, j] >= r.milli_per_gpu
        and state.gpu_mem_free[i, j] >= r.gpu_memory_mib
    ]
    return len(usable) >= r.gpu_count


class PlaceAndRelease(RuleBasedStateMachine):
    @initialize(specs=clusters(), policy=st.sampled_from(sorted(PLACEMENT)), seed=st.integers(0, 3))
    def build(self, specs: list[NodeBuilder], policy: str, seed: int) -> None:
        self.state = cluster(*specs)
        self.idle = cluster(*specs)  # never placed on: what ``fits_empty`` must see
        self.initial = snapshot(self.state)
        self.placer = Placer(placement_profile(policy, workload=WORKLOAD, seed=seed))
        self.meter = FragmentationMeter(
            self.state, Workload.from_requests(WORKLOAD, self.state.models)
        )
        self.live: list[list[Assignment]] = []

    @rule(r=requests())
    def place(self, r: Request) -> None:
        st_ = self.state
        hosts = {i for i in range(st_.num_nodes) if can_host(st_, r, i)}
        on_idle = sum(can_host(self.idle, r, i) for i in range(st_.num_nodes))
        assert self.placer.fits_empty(st_, r) == (on_idle >= r.nodes)
        before = snapshot(st_)
        placed = self.placer.place(st_, r)
        if placed is None:
            # A gang is all or nothing: a failed one leaves no trace.
            assert_same(before, snapshot(st_))
            if not self.placer.profile.filters:
                assert len(hosts) < r.nodes, "a request that fits was refused"
            return
        assert len(placed) == r.nodes
        assert len({a.node for a in placed}) == r.nodes, "gang members share a node"
        for a in placed:
            assert a.node in hosts
            self.check_shape(a, r)
        self.live.append(placed)

    def check_shape(self, a: Assignment, r: Request) -> None:
        st_ = self.state
        assert (a.cpu_milli, a.memory_mib) == (r.cpu_milli, r.memory_mib)
        assert len(a.gpus) == r.gpu_count
        assert a.gpu_milli == (r.milli_per_gpu if r.gpu_count else 0)
        assert a.gpu_memory_mib == r.gpu_memory_mib
        for j in a.gpus:
            assert st_.gpu_milli_total[a.node, j] > 0, "a MIG or missing GPU was handed out"
            assert allowed(st_, r, st_.gpu_model[a.node, j])
            assert st_.gpu_mem_total[a.node, j] >= r.min_gpu_memory_mib
        assert len(a.mig) == r.mig_count
        for k in a.mig:
            assert st_.mig_node[k] == a.node
            assert st_.mig_profiles[st_.mig_profile[k]] == r.mig_profile

    @rule(r=requests(), memory=st.booleans(), capacity=st.booleans())
    def fragmentation_after_matches_placing(self, r: Request, memory: bool, capacity: bool) -> None:
        # The meter predicts each option's fragmentation without placing; placing
        # the option for real and measuring afresh must give the same number.
        st_ = self.state
        workload = Workload.from_requests(
            WORKLOAD, st_.models, memory=memory, capacity_weight=1.0 if capacity else 0.0
        )
        meter = FragmentationMeter(st_, workload)
        ctx = self.placer.context(st_, r, Mode.NOW)
        predicted = meter.after(ctx.options.node, ctx.options.gpu, r)
        for k in range(len(ctx.options)):
            stmt = Statement(st_)
            stmt.allocate(self.placer.assignment(ctx, k))
            actual = FragmentationMeter(st_, workload).per_node()[ctx.options.node[k]]
            stmt.discard()
            assert np.isclose(predicted[k], actual), (k, predicted[k], actual)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        placed = self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        for a in placed:
            self.state.release(a)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def release_everything(self, data: st.DataObject) -> None:
        # In any order, releasing everything gives back the initial state bit for bit.
        for placed in data.draw(st.permutations(self.live)):
            for a in placed:
                self.state.release(a)
        self.live = []
        assert_same(self.initial, snapshot(self.state))

    @invariant()
    def never_over_allocated(self) -> None:
        st_ = self.state
        assert ((st_.gpu_milli_free >= 0) & (st_.gpu_milli_free <= st_.gpu_milli_total)).all()
        assert (st_.gpu_milli_total[st_.gpu_exists & (st_.gpu_milli_total > 0)] == MILLI).all()
        assert ((st_.gpu_mem_free >= 0) & (st_.gpu_mem_free <= st_.gpu_mem_total)).all()
        assert ((st_.cpu_free >= 0) & (st_.cpu_free <= st_.cpu_total)).all()
        assert ((st_.mem_free >= 0) & (st_.mem_free <= st_.mem_total)).all()

    @invariant()
    def free_is_initial_minus_live(self) -> None:
        st_ = self.state
        cpu = self.initial["cpu_free"].copy()
        mem = self.initial["mem_free"].copy()
        milli = self.initial["gpu_milli_free"].copy()
        gmem = self.initial["gpu_mem_free"].copy()
        instances: list[int] = []
        for a in (a for placed in self.live for a in placed):
            cpu[a.node] -= a.cpu_milli
            mem[a.node] -= a.memory_mib
            for j in a.gpus:
                milli[a.node, j] -= a.gpu_milli
                gmem[a.node, j] -= a.gpu_memory_mib
            instances += a.mig
        assert len(instances) == len(set(instances)), "a MIG instance was given twice"
        mig_free = np.ones_like(st_.mig_free)
        mig_free[instances] = False
        assert np.array_equal(st_.cpu_free, cpu)
        assert np.array_equal(st_.mem_free, mem)
        assert np.array_equal(st_.gpu_milli_free, milli)
        assert np.array_equal(st_.gpu_mem_free, gmem)
        assert np.array_equal(st_.mig_free, mig_free)

    @invariant()
    def cached_fragmentation_matches_a_fresh_meter(self) -> None:
        fresh = FragmentationMeter(self.state, self.meter.workload)
        assert np.allclose(self.meter.per_node(), fresh.per_node())

    def teardown(self) -> None:
        # Whatever is still running is released; the initial state must come back.
        for placed in self.live:
            for a in placed:
                self.state.release(a)
        assert_same(self.initial, snapshot(self.state))


TestPlaceAndRelease = PlaceAndRelease.TestCase
TestPlaceAndRelease.settings = settings(max_examples=100, stateful_step_count=15)


def rebuild(
    state: ClusterState, live: list[list[Assignment]]
) -> tuple[ClusterState, Callable[[Assignment], Assignment]]:
    """A state built afresh from ``state``'s live nodes, health and live assignments,
    and the map from ``state``'s assignments to the fresh state's indices."""
    alive = np.flatnonzero(~state.removed)
    fresh = ClusterState(state.live_nodes())
    fresh.healthy[:] = state.healthy[alive]
    row = {int(i): k for k, i in enumerate(alive)}
    # A live MIG instance is its node, GPU and start slot, whatever its index.
    slot = {
        (int(fresh.mig_node[m]), int(fresh.mig_gpu[m]), int(fresh.mig_start[m])): m
        for m in range(len(fresh.mig_node))
    }

    def translate(a: Assignment) -> Assignment:
        mig = (slot[row[a.node], int(state.mig_gpu[m]), int(state.mig_start[m])] for m in a.mig)
        return replace(a, node=row[a.node], mig=tuple(mig))

    for a in (a for placed in live for a in placed):
        fresh.allocate(translate(a))
    return fresh, translate


def assert_equivalent(state: ClusterState, fresh: ClusterState) -> None:
    """``state``'s live rows equal ``fresh``: tombstones, retired MIG instances and
    GPU columns beyond the fresh grid aside, and GPU models compared by name."""
    alive = ~state.removed
    for k in ("cpu_total", "mem_total", "cpu_free", "mem_free", "healthy"):
        assert np.array_equal(getattr(state, k)[alive], getattr(fresh, k)), k
    for k in ("gpu_free_sum", "gpu_milli_total_sum"):
        assert np.array_equal(getattr(state, k)[alive], getattr(fresh, k)), k
    width = fresh.gpu_exists.shape[1]
    for k in (
        "gpu_exists",
        "gpu_mem_total",
        "gpu_numa",
        "gpu_nvlink",
        "gpu_milli_total",
        "gpu_milli_free",
        "gpu_mem_free",
    ):
        grid = getattr(state, k)[alive]
        assert np.array_equal(grid[:, :width], getattr(fresh, k)), k
        assert not grid[:, width:].any(), k  # padding only
    names = np.array([*state.models, ""])[state.gpu_model[alive]]
    assert np.array_equal(names[:, :width], np.array([*fresh.models, ""])[fresh.gpu_model])
    # Removed capacity is gone, not hidden.
    assert state.gpu_milli_capacity == fresh.gpu_milli_capacity
    assert not state.cpu_total[~alive].any() and not state.healthy[~alive].any()

    def instances(s: ClusterState, rows: dict[int, int]) -> list[tuple[Any, ...]]:
        return sorted(
            (
                rows[int(s.mig_node[m])],
                int(s.mig_gpu[m]),
                s.mig_profiles[s.mig_profile[m]],
                int(s.mig_start[m]),
                int(s.mig_memory[m]),
                bool(s.mig_free[m]),
            )
            for m in np.flatnonzero(s.mig_profile >= 0)
        )

    row = {int(i): k for k, i in enumerate(np.flatnonzero(alive))}
    assert instances(state, row) == instances(fresh, {k: k for k in range(fresh.num_nodes)})
    assert state.mig_free[state.mig_profile < 0].all(), "a retired instance is held"


class ShapeChanges(RuleBasedStateMachine):
    """Nodes join and leave, MIG layouts change and tasks come and go; the state
    stays equal to one built afresh with the same nodes and assignments, and
    every placement policy answers the same on both."""

    @initialize(specs=clusters())
    def build(self, specs: list[NodeBuilder]) -> None:
        self.state = cluster(*specs)
        self.live: list[list[Assignment]] = []
        self.joined = 0

    def busy(self, i: int, gpu: int | None = None) -> bool:
        return any(
            a.node == i
            and (gpu is None or gpu in a.gpus or any(self.state.mig_gpu[m] == gpu for m in a.mig))
            for placed in self.live
            for a in placed
        )

    @rule(data=st.data())
    def add(self, data: st.DataObject) -> None:
        # A removed node's name may come back; it must get a new row.
        gone = {n.name for n in self.state.nodes} - set(self.state.index)
        name = data.draw(st.sampled_from([*sorted(gone), f"j{self.joined}"]))
        self.joined += 1
        spec = data.draw(nodes(name))
        i = self.state.add_node(spec.build())
        assert i == self.state.num_nodes - 1 and self.state.index[name] == i
        self.state.healthy[i] = spec.healthy

    @precondition(lambda self: not self.state.removed.all())
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        st_ = self.state
        i = data.draw(st.sampled_from(np.flatnonzero(~st_.removed).tolist()))
        key: int | str = data.draw(st.sampled_from((i, st_.nodes[i].name)))
        if self.busy(i):
            before = snapshot(st_)
            with pytest.raises(NotIdle):
                st_.remove_node(key)
            assert_same(before, snapshot(st_))
        else:
            st_.remove_node(key)
            assert st_.removed[i]

    @rule(data=st.data())
    def relayout(self, data: st.DataObject) -> None:
        st_ = self.state
        gpus = [
            (i, j)
            for i, j in zip(*np.nonzero(st_.gpu_exists), strict=True)
            if st_.models[st_.gpu_model[i, j]] == "A100-80GB"
        ]
        if not gpus:
            return
        i, j = (int(x) for x in data.draw(st.sampled_from(gpus)))
        text = data.draw(st.none() | st.sampled_from(LAYOUTS))
        layout = None if text is None else tuple(mig.parse_layout("A100-80GB", text))
        if self.busy(i, j):
            before = snapshot(st_)
            with pytest.raises(NotIdle):
                st_.set_mig_layout(i, j, layout)
            assert_same(before, snapshot(st_))
        else:
            st_.set_mig_layout(st_.nodes[i].name, j, layout)
            assert st_.nodes[i].gpus[j].mig == layout

    @precondition(lambda self: bool(self.state.mig_free.any()))
    @rule(data=st.data(), count=st.integers(1, 2))
    def place_mig(self, data: st.DataObject, count: int) -> None:
        # Re-laid-out GPUs list their instances out of index order, and the
        # placer must not care; ``requests()`` rarely asks for a profile on offer.
        st_ = self.state
        offered = sorted({st_.mig_profiles[p] for p in st_.mig_profile[st_.mig_free]})
        self.place(job().mig(data.draw(st.sampled_from(offered)), count).build(), "first-fit", 0)

    @rule(r=requests(), policy=st.sampled_from(sorted(PLACEMENT)), seed=st.integers(0, 3))
    def place(self, r: Request, policy: str, seed: int) -> None:
        fresh, translate = rebuild(self.state, self.live)
        ours = Placer(placement_profile(policy, workload=WORKLOAD, seed=seed))
        theirs = Placer(placement_profile(policy, workload=WORKLOAD, seed=seed))
        placed = ours.place(self.state, r)
        expected = theirs.place(fresh, r)
        assert (placed and [translate(a) for a in placed]) == expected
        if placed:
            self.live.append(placed)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        for a in self.live.pop(data.draw(st.integers(0, len(self.live) - 1))):
            self.state.release(a)

    @invariant()
    def equals_a_fresh_build(self) -> None:
        assert_equivalent(self.state, rebuild(self.state, self.live)[0])


TestShapeChanges = ShapeChanges.TestCase
TestShapeChanges.settings = settings(max_examples=80, stateful_step_count=20)
