"""The placer: filtering, options, scoring, ties, gangs and the undo log."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import JobBuilder, NodeBuilder, cluster, job, node, placer
from gpufleet.core.cycle import NodeMask
from gpufleet.core.placement import (
    FloatArray,
    Mode,
    PlacementContext,
    PlacementProfile,
    Placer,
    Statement,
    normalise,
)
from gpufleet.core.state import Assignment, BoolArray, ClusterState
from gpufleet.policies.placement.fit import BestFit, FirstFit


class Constant:
    """Scores every option the same, so only the tie rule decides."""

    def score(self, ctx: PlacementContext) -> FloatArray:
        return np.full(len(ctx.options), 7.0)


class Prefer:
    """Scores 1 on one node and 0 elsewhere."""

    def __init__(self, node: int) -> None:
        self.node = node

    def score(self, ctx: PlacementContext) -> FloatArray:
        out: FloatArray = (ctx.options.node == self.node).astype(np.float64)
        return out


class Label:
    """A tiny filter: nodes whose label ``key`` equals ``value``."""

    def __init__(self, key: str, value: str) -> None:
        self.key, self.value = key, value

    def filter(self, ctx: PlacementContext) -> BoolArray:
        return np.array([n.labels.get(self.key) == self.value for n in ctx.state.nodes])


class Pool:
    """A tiny filter: nodes of one pool."""

    def __init__(self, pool: str) -> None:
        self.pool = pool

    def filter(self, ctx: PlacementContext) -> BoolArray:
        return np.array([n.pool == self.pool for n in ctx.state.nodes])


def four_identical() -> ClusterState:
    return cluster(*(node(f"n{i}").gpus(4) for i in range(4)))


def arrays(state: ClusterState) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in vars(state).items() if isinstance(v, np.ndarray)}


def assert_unchanged(before: dict[str, np.ndarray], state: ClusterState) -> None:
    for k, v in before.items():
        if k != "version":
            assert np.array_equal(v, getattr(state, k)), k


# -- ties and weights ----------------------------------------------------------


@pytest.mark.parametrize(
    "scorers",
    [
        [],  # no scorer: the first feasible option
        [(Constant(), 1.0)],  # one scorer, all equal
        [(Constant(), 1.0), (Constant(), 3.0)],  # normalised constants are all 0
    ],
)
def test_ties_go_to_the_lowest_node_index(scorers: list[tuple[Constant, float]]) -> None:
    state = four_identical()
    p = Placer(PlacementProfile("tie", scorers))
    placed = [p.place(state, job().gpus(2).build()) for _ in range(3)]
    # Each node takes two 2-GPU tasks: n0, n0, n1.
    assert [a[0].node for a in placed if a] == [0, 0, 1]


def test_ties_between_gpus_go_to_the_lowest_gpu() -> None:
    state = cluster(node("a").gpus(4))
    placed = Placer(PlacementProfile("tie", [(Constant(), 1.0)])).place(
        state, job().fraction(100).build()
    )
    assert placed is not None and placed[0].gpus == (0,)


def test_weights_sum_normalised_scores() -> None:
    state = four_identical()
    # Prefer(1) gives node 1 100 after normalisation, Prefer(2) gives node 2 100.
    # Weighted 1 vs 2: node 1 totals 100, node 2 totals 200 -> node 2.
    p = Placer(PlacementProfile("w", [(Prefer(1), 1.0), (Prefer(2), 2.0)]))
    placed = p.place(state, job().gpus(1).build())
    assert placed is not None and placed[0].node == 2


class NodeCost:
    """A tier: each option costs what ``costs`` says for its node."""

    def __init__(self, *costs: float) -> None:
        self.costs = np.array(costs)
        self.seen: list[list[int]] = []

    def cost(self, ctx: PlacementContext) -> FloatArray:
        self.seen.append(ctx.options.node.tolist())
        out: FloatArray = self.costs[ctx.options.node]
        return out


def test_a_tier_outranks_every_scorer() -> None:
    # Prefer(1) would take node 1, but the tier keeps only the cheapest nodes, 2 and 3;
    # no scorer then prefers either, so the lower index wins.
    tier = NodeCost(1.0, 0.5, 0.0, 0.0)
    p = Placer(PlacementProfile("t", [(Prefer(1), 1.0)], tiers=[tier]))
    placed = p.place(four_identical(), job().gpus(1).build())
    assert placed is not None and placed[0].node == 2


def test_tiers_narrow_in_order_and_scorers_see_what_is_left() -> None:
    first, second = NodeCost(0.0, 0.0, 0.0, 1.0), NodeCost(1.0, 1.0, 0.0, 0.0)
    p = Placer(PlacementProfile("t", [(Prefer(1), 1.0)], tiers=[first, second]))
    placed = p.place(four_identical(), job().gpus(1).build())
    # first keeps 0, 1, 2; second sees those and keeps 2.
    assert first.seen == [[0, 1, 2, 3]] and second.seen == [[0, 1, 2]]
    assert placed is not None and placed[0].node == 2


def test_costs_within_the_slack_tie() -> None:
    # Floating-point noise must not decide: 1e-12 apart is equal, Prefer(1) decides.
    p = Placer(PlacementProfile("t", [(Prefer(1), 1.0)], tiers=[NodeCost(1e-12, 0.0, 1.0, 1.0)]))
    placed = p.place(four_identical(), job().gpus(1).build())
    assert placed is not None and placed[0].node == 1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([1.0, 2.0, 3.0], [0.0, 50.0, 100.0]),  # (x - 1) * 100 / 2
        ([-4.0, 0.0, 4.0, 2.0], [0.0, 50.0, 100.0, 75.0]),  # (x + 4) * 100 / 8
        ([5.0, 5.0], [0.0, 0.0]),  # a constant carries no preference
        ([1e9, 1e9 + 1e-6], [0.0, 0.0]),  # below the relative resolution
    ],
)
def test_normalise(raw: list[float], expected: list[float]) -> None:
    assert normalise(np.array(raw)).tolist() == pytest.approx(expected)


# -- options ---------------------------------------------------------------------


def test_fractional_options_dedupe_identical_gpus() -> None:
    state = cluster(
        # a: GPUs 0, 1, 3 wholly free (one option: 0); GPU 2 has 700 free (option 2).
        node("a").gpus(4).share(2, 300),
        # b: GPU 0 has 500 free; GPU 1 also 500 but 1 GiB less memory, so it differs.
        node("b").gpus(2).share(0, 500).share(1, 500, 1024),
        # c: every GPU taken: no option.
        node("c").gpus(2).used(2),
    )
    ctx = placer().context(state, job().fraction(200).build(), Mode.NOW)
    pairs = list(zip(ctx.options.node.tolist(), ctx.options.gpu.tolist(), strict=True))
    assert pairs == [(0, 0), (0, 2), (1, 0), (1, 1)]


def test_fractional_options_skip_gpus_short_of_memory_or_milli() -> None:
    state = cluster(node("a").gpus(3).share(0, 900).share(1, 100, 70 * 1024))
    # Ask 200 milli and 20 GiB: GPU 0 has 100 milli, GPU 1 has 10 GiB -> only GPU 2.
    ctx = placer().context(state, job().fraction(200, 20 * 1024).build(), Mode.NOW)
    assert ctx.options.gpu.tolist() == [2]


def test_whole_and_cpu_requests_have_one_option_per_node() -> None:
    state = cluster(node("a").gpus(4), node("b").gpus(4).used(3), node("c"))
    assert placer().context(state, job().gpus(2).build(), Mode.NOW).options.node.tolist() == [0]
    cpu_only = placer().context(state, job().cpu(1000).build(), Mode.NOW)
    assert cpu_only.options.node.tolist() == [0, 1, 2]
    assert cpu_only.options.gpu.tolist() == [-1, -1, -1]


# -- the built-in fit ------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "request_", "fits"),
    [
        (node("a").gpus(8).used(6), job().gpus(2), True),  # 2 of 8 free, 2 asked
        (node("a").gpus(8).used(7), job().gpus(2), False),  # 1 free
        (node("a").gpus(1).share(0, 600), job().fraction(400), True),  # 400 left exactly
        (node("a").gpus(1).share(0, 601), job().fraction(400), False),  # 399 left
        (node("a").gpus(1).share(0, 1, 80 * 1024 - 100), job().fraction(1, 100), True),
        (node("a").gpus(1).share(0, 1, 80 * 1024 - 99), job().fraction(1, 100), False),
        (node("a").cpu(8000).cpu_used(4000), job().cpu(4000), True),
        (node("a").cpu(8000).cpu_used(4001), job().cpu(4000), False),
        (node("a").memory(1024).memory_used(24), job().cpu(1).memory(1000), True),
        (node("a").memory(1024).memory_used(25), job().cpu(1).memory(1000), False),
        (node("a").gpus(1).unhealthy(), job().gpus(1), False),
        (node("a").model("V100M32").gpus(1), job().gpus(1).models("A100-80GB"), False),
        (node("a").model("V100M32").gpus(1), job().gpus(1).models("V100M32", "T4"), True),
        (node("a").model("V100M32").gpus(1), job().gpus(1).min_gpu_memory(32 * 1024), True),
        (node("a").model("V100M32").gpus(1), job().gpus(1).min_gpu_memory(40 * 1024), False),
        (node("a"), job().fraction(1), False),  # a CPU-only node hosts no GPU task
    ],
)
def test_fit(builder: NodeBuilder, request_: JobBuilder, fits: bool) -> None:
    state = cluster(builder)
    assert (placer().place(state, request_.build()) is not None) is fits


def test_whole_gpus_are_the_lowest_free_ones() -> None:
    state = cluster(node("a").gpus(4).share(0, 100))
    placed = placer().place(state, job().gpus(2).build())
    assert placed == [Assignment(node=0, gpus=(1, 2), gpu_milli=1000)]


def test_fits_empty_ignores_current_load_but_not_size_or_health() -> None:
    state = cluster(node("a").gpus(8).used(8), node("b").gpus(4).used(4), node("c").unhealthy())
    p = placer()
    assert p.place(state, job().gpus(4).build()) is None
    assert p.fits_empty(state, job().gpus(4).build())  # b or a once idle
    assert p.fits_empty(state, job().gpus(4).gang(2).build())  # a and b
    assert not p.fits_empty(state, job().gpus(4).gang(3).build())  # c is unhealthy
    assert not p.fits_empty(state, job().gpus(9).build())  # no node has 9
    assert not p.fits_empty(state, job().gpus(1).models("H100-80GB").build())


# -- filters -------------------------------------------------------------------


def test_filters_combine_with_and() -> None:
    state = cluster(
        node("a").gpus(1).label("zone", "x"),
        node("b").gpus(1).label("zone", "x").pool("batch"),
        node("c").gpus(1).pool("batch"),
        node("d").gpus(1).label("zone", "x").pool("batch").used(1),
    )
    r = job().gpus(1).build()
    both = placer(FirstFit(), filters=(Label("zone", "x"), Pool("batch")))
    # zone=x: a, b, d; pool=batch: b, c, d; fit: a, b, c -> only b.
    assert both.context(state, r, Mode.NOW).options.node.tolist() == [1]
    assert placer(FirstFit(), filters=(Label("zone", "x"),)).context(
        state, r, Mode.NOW
    ).options.node.tolist() == [0, 1]
    assert placer(filters=(Label("zone", "y"), Pool("batch"))).place(state, r) is None


def test_filters_see_the_fit_mask() -> None:
    seen: list[list[bool]] = []

    class Spy:
        def filter(self, ctx: PlacementContext) -> BoolArray:
            seen.append(ctx.feasible.tolist())
            return np.ones(ctx.state.num_nodes, dtype=np.bool_)

    state = cluster(node("a").gpus(1).used(1), node("b").gpus(1))
    placer(filters=(Spy(),)).place(state, job().gpus(1).build())
    assert seen == [[False, True]]


# -- gangs and the undo log ------------------------------------------------------


def test_gang_members_land_on_distinct_nodes() -> None:
    state = four_identical()
    placed = placer(FirstFit()).place(state, job().gpus(2).gang(3).build())
    assert placed is not None
    assert [a.node for a in placed] == [0, 1, 2]  # first-fit would stack them, the gang may not


def test_gang_is_all_or_nothing() -> None:
    # Two of three nodes have room for 4 GPUs: a gang of 3 fails and leaves no trace.
    state = cluster(node("a").gpus(4), node("b").gpus(4), node("c").gpus(4).used(1))
    before = arrays(state)
    assert placer(BestFit()).place(state, job().gpus(4).gang(3).build()) is None
    assert_unchanged(before, state)
    assert placer(BestFit()).place(state, job().gpus(4).gang(2).build()) is not None


def test_gang_respects_filters_on_every_member() -> None:
    state = cluster(node("a").gpus(1).pool("x"), node("b").gpus(1), node("c").gpus(1).pool("x"))
    placed = placer(FirstFit(), filters=(Pool("x"),)).place(state, job().gpus(1).gang(2).build())
    assert placed is not None and [a.node for a in placed] == [0, 2]


def test_statement_discard_restores_the_state() -> None:
    state = cluster(node("a").gpus(2).mig("3g.40gb@0,3g.40gb@4", gpu=1), node("b").gpus(2))
    before = arrays(state)
    stmt = Statement(state)
    stmt.allocate(Assignment(node=0, gpus=(0,), gpu_milli=300, gpu_memory_mib=1024, cpu_milli=5))
    stmt.allocate(Assignment(node=0, mig=(1,), memory_mib=7))
    stmt.allocate(Assignment(node=1, gpus=(0, 1), gpu_milli=1000))
    assert state.gpu_milli_free.tolist() == [[700, 0], [0, 0]]
    stmt.discard()
    assert_unchanged(before, state)
    assert stmt.done == []
    # Every touched node's version moved on, so caches recompute.
    assert (state.version > before["version"]).all()


def test_statement_commit_keeps_and_returns_the_allocations() -> None:
    state = cluster(node("a").gpus(2))
    stmt = Statement(state)
    a = Assignment(node=0, gpus=(1,), gpu_milli=1000)
    stmt.allocate(a)
    assert stmt.commit() == [a]
    stmt.discard()  # nothing left to undo
    assert state.gpu_milli_free.tolist() == [[1000, 0]]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.booleans(), st.booleans(), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["gpus1", "gpus4", "gang2", "gang3", "half", "cpu"]),
)
def test_without_filters_a_placement_fails_exactly_when_too_few_nodes_fit(
    nodes: list[tuple[int, bool, bool, bool]], shape: str
) -> None:
    # Per node: GPUs used of 4, the last shared at 600 milli, CPU used up, in the mask; the
    # cycle skips placements on this (core.cycle._Cycle._start): a gang's members take
    # distinct nodes, so enough nodes with room in the mask always place it.
    builders = []
    for i, (used, shared, busy_cpu, _) in enumerate(nodes):
        b = node(f"n{i}").gpus(4).cpu(8000).used(used)
        if shared:
            b.share(3, 600)
        if busy_cpu:
            b.cpu_used(7000)
        builders.append(b)
    state = cluster(*builders)
    mask = np.array([inside for *_, inside in nodes], dtype=np.bool_)
    r = {
        "gpus1": job().gpus(1),
        "gpus4": job().gpus(4),
        "gang2": job().gpus(2).gang(2),
        "gang3": job().gpus(1).gang(3),
        "half": job().fraction(500),
        "cpu": job().cpu(2000),
    }[shape].build()
    room = placer(FirstFit()).fit(state, r, Mode.NOW)[0]
    placed = placer(FirstFit(), filters=(NodeMask(mask),)).place(state, r)
    assert (placed is not None) == (int((room & mask).sum()) >= r.nodes)
