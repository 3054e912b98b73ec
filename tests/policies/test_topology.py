"""Topology placement: NVLink/NUMA-aware GPU picking and switch-aware gangs."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.model import GPU, MILLI, Node, Request
from gpufleet.core.placement import Mode, PlacementProfile, Placer
from gpufleet.core.state import Assignment, ClusterState
from gpufleet.policies.placement.fit import BestFit
from gpufleet.policies.placement.topology import Topology, TopologyPicker, cover, dense_rank
from gpufleet.policies.registry import placement_profile

PAIRS4 = (0, 0, 1, 1)  # 4 GPUs bridged in two NVLink pairs
PAIRS8 = (0, 0, 1, 1, 2, 2, 3, 3)
BOARD8 = (0,) * 8  # one NVSwitch board
PCIE8 = tuple(range(8))  # no NVLink: every GPU is its own domain
QUADS = (0, 0, 0, 0, 1, 1, 1, 1)  # two NUMA nodes of four GPUs


def host(
    name: str, nvlink: Sequence[int], numa: Sequence[int] | None = None, switch: str = ""
) -> Node:
    """A node with one GPU per NVLink domain id given (NUMA 0 unless given)."""
    numa = numa or (0,) * len(nvlink)
    gpus = tuple(
        GPU(index=i, model="A100-80GB", memory_mib=81920, nvlink_domain=d, numa=m)
        for i, (d, m) in enumerate(zip(nvlink, numa, strict=True))
    )
    return Node(name, cpu_milli=64_000, memory_mib=512 * 1024, gpus=gpus, switch=switch)


def cluster(*nodes: Node, used: dict[str, tuple[int, ...]] | None = None) -> ClusterState:
    """A state over ``nodes`` where the GPUs listed per node name are wholly taken."""
    state = ClusterState(nodes)
    for name, gpus in (used or {}).items():
        state.allocate(Assignment(node=state.index[name], gpus=gpus, gpu_milli=MILLI))
    return state


def gpus(count: int, nodes: int = 1) -> Request:
    return Request(cpu_milli=1000, gpus=count, nodes=nodes)


def topology_placer() -> Placer:
    return Placer(placement_profile("topology"))


# -- cover: the fewest groups ----------------------------------------------------


@pytest.mark.parametrize(
    ("groups", "count", "expected"),
    [
        # group 0 holds 1, group 1 holds 2: the smallest group that fits 2 is group 1
        ((0, 1, 1), 2, (1, 2)),
        # one item: the smallest group (group 0, size 1) rather than breaking group 1
        ((0, 1, 1), 1, (0,)),
        # sizes 2/3/1, 4 items: group 1 (3) whole, then the smallest group that holds 1: group 2
        ((0, 0, 1, 1, 1, 2), 4, (2, 3, 4, 5)),
        # sizes 2/2, 3 items: group 5 (first at 0) whole, then 1 from group 3 -> positions 0, 3, 1
        ((5, 3, 3, 5), 3, (0, 1, 3)),
        # equal single groups: the first ones
        ((7, 8, 9), 2, (0, 1)),
    ],
)
def test_cover_takes_the_fewest_and_smallest_groups(
    groups: tuple[int, ...], count: int, expected: tuple[int, ...]
) -> None:
    assert tuple(cover(np.array(groups), count)) == expected


def test_cover_rejects_more_than_there_is() -> None:
    with pytest.raises(ValueError, match="count: asked for 3 GPUs but only 2 are free"):
        cover(np.array([0, 1]), 3)


def test_dense_rank_renumbers_each_row() -> None:
    # row 0: distinct values 3 < 7 < 9 -> ranks 0, 1, 2
    ranks = dense_rank(np.array([[7, 7, 3, 9], [4, 4, 4, 4]]))
    assert ranks.tolist() == [[1, 1, 0, 2], [0, 0, 0, 0]]


# -- TopologyPicker ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("nvlink", "numa", "used", "count", "expected"),
    [
        # pairs {0,1} {2,3}, GPU 0 taken: pair 0 has 1 free, pair 1 has 2 -> the free pair
        (PAIRS4, None, (0,), 2, (2, 3)),
        # one GPU: the pair with the fewest free (pair 0, 1 free) keeps pair 1 whole
        (PAIRS4, None, (0,), 1, (1,)),
        # all free, one GPU: both pairs have 2 free -> lowest index
        (PAIRS4, None, (), 1, (0,)),
        # boards {0..3} {4..7}, GPU 0 taken: 3 GPUs fit the smaller board 0 (3 free)
        (QUADS, QUADS, (0,), 3, (1, 2, 3)),
        # 4 GPUs: board 0 has only 3 free -> board 1
        (QUADS, QUADS, (0,), 4, (4, 5, 6, 7)),
        # PCIe only, 0 1 4 taken: NUMA 0 has {2,3}, NUMA 1 has {5,6,7}; 3 GPUs -> NUMA 1
        (PCIE8, QUADS, (0, 1, 4), 3, (5, 6, 7)),
        # 2 GPUs: both NUMA nodes fit, the smaller (NUMA 0, 2 free) wins
        (PCIE8, QUADS, (0, 1, 4), 2, (2, 3)),
        # 4 GPUs: no NUMA node holds 4 -> 4 single domains, the first ones
        (PCIE8, QUADS, (0, 1, 4), 4, (2, 3, 5, 6)),
        # pairs, 0 2 taken: no pair holds 3; NUMA 1 has pairs {4,5} {6,7} free ->
        # pair {4,5} whole plus one GPU of {6,7}
        (PAIRS8, QUADS, (0, 2), 3, (4, 5, 6)),
        # pairs, 1 3 4 taken: free {0} {2} {5} {6,7}; no pair or NUMA node holds 4 ->
        # fewest domains = 3: pair {6,7}, then {0}, then {2}
        (PAIRS8, QUADS, (1, 3, 4), 4, (0, 2, 6, 7)),
    ],
)
def test_picker_prefers_one_domain_then_one_numa_node_then_fewest_domains(
    nvlink: tuple[int, ...],
    numa: tuple[int, ...] | None,
    used: tuple[int, ...],
    count: int,
    expected: tuple[int, ...],
) -> None:
    state = cluster(host("a", nvlink, numa), used={"a": used} if used else None)
    free = np.flatnonzero(state.gpu_milli_free[0] == MILLI)
    assert tuple(TopologyPicker().pick(state, 0, free, count)) == expected


@st.composite
def layouts(draw: st.DrawFn) -> tuple[ClusterState, np.ndarray, int]:
    n = draw(st.integers(1, 8))
    nvlink = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    numa = draw(st.lists(st.integers(0, 1), min_size=n, max_size=n))
    taken = draw(st.sets(st.integers(0, n - 1), max_size=n - 1))
    state = cluster(host("a", nvlink, numa), used={"a": tuple(sorted(taken))} if taken else None)
    free = np.flatnonzero(state.gpu_milli_free[0] == MILLI)
    return state, free, draw(st.integers(1, len(free)))


@given(layouts())
def test_picker_returns_the_most_local_set_of_free_gpus(
    case: tuple[ClusterState, np.ndarray, int],
) -> None:
    state, free, count = case
    picked = TopologyPicker().pick(state, 0, free, count)
    assert len(set(picked.tolist())) == count
    assert set(picked.tolist()) <= set(free.tolist())
    assert picked.tolist() == sorted(picked.tolist())
    assert picked.tolist() == TopologyPicker().pick(state, 0, free, count).tolist()
    domain_sizes = np.unique(state.gpu_nvlink[0, free], return_counts=True)[1]
    numa_sizes = np.unique(state.gpu_numa[0, free], return_counts=True)[1]
    domains = set(state.gpu_nvlink[0, picked].tolist())
    if domain_sizes.max() >= count:
        # one domain, and the smallest one that fits
        assert len(domains) == 1
        size = int((state.gpu_nvlink[0, free] == domains.pop()).sum())
        assert size == domain_sizes[domain_sizes >= count].min()
    elif numa_sizes.max() >= count:
        assert len(set(state.gpu_numa[0, picked].tolist())) == 1
    else:
        fewest = int(np.searchsorted(np.cumsum(np.sort(domain_sizes)[::-1]), count)) + 1
        assert len(domains) == fewest


# -- Topology scorer ---------------------------------------------------------------


def scores(state: ClusterState, request: Request, gang: Sequence[int] = ()) -> dict[str, float]:
    """Topology's raw score per option node name."""
    ctx = Placer(PlacementProfile("t", [])).context(state, request, Mode.NOW, gang)
    raw = Topology().score(ctx)
    return {state.nodes[int(i)].name: float(s) for i, s in zip(ctx.options.node, raw, strict=True)}


@given(layouts())
def test_scorer_tier_matches_the_gpus_the_picker_takes(
    case: tuple[ClusterState, np.ndarray, int],
) -> None:
    state, free, count = case
    picked = TopologyPicker().pick(state, 0, free, count)
    per_node = state.gpu_exists.shape[1]
    domains = set(state.gpu_nvlink[0, picked].tolist())
    numas = set(state.gpu_numa[0, picked].tolist())
    if len(domains) == 1:
        # 100 - 40 * (free GPUs of the picked domain - request) / GPUs per node
        group = int((state.gpu_nvlink[0, free] == domains.pop()).sum())
        expected = 100 - 40 * (group - count) / per_node
    elif len(numas) == 1:
        group = int((state.gpu_numa[0, free] == numas.pop()).sum())
        expected = 50 - 40 * (group - count) / per_node
    else:
        expected = -40 * (len(domains) - 1) / per_node
    assert scores(state, gpus(count)) == pytest.approx({"a": expected})


LOCALITY = cluster(
    host("pairs", PAIRS8, QUADS),
    host("board", BOARD8, QUADS),
    host("board-2free", BOARD8, QUADS),
    host("pcie-numa", PCIE8, QUADS),
    host("pcie-spread", PCIE8, QUADS),
    used={
        "board-2free": (0, 1, 2, 3, 4, 5),
        "pcie-numa": (0, 1, 4),
        "pcie-spread": (0, 1, 2, 4, 5, 6),
    },
)


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (
            2,
            {
                "pairs": 100.0,  # a free pair holds it exactly: 100 - 40 * 0 / 8
                "board": 70.0,  # breaks the 8-GPU board: 100 - 40 * (8 - 2) / 8
                "board-2free": 100.0,  # the board's last 2 GPUs: 100 - 0
                "pcie-numa": 50.0,  # NUMA 0 has exactly 2 free: 50 - 0
                "pcie-spread": -5.0,  # 1 free per NUMA node, 2 domains: 0 - 40 * 1 / 8
            },
        ),
        (
            1,
            {
                "pairs": 95.0,  # smallest domain with a free GPU is a pair: 100 - 40 * 1 / 8
                "board": 65.0,  # 100 - 40 * 7 / 8
                "board-2free": 95.0,  # 100 - 40 * 1 / 8
                "pcie-numa": 100.0,  # a single-GPU domain: 100 - 0
                "pcie-spread": 100.0,
            },
        ),
        (
            4,
            {
                "pairs": 50.0,  # no pair holds 4, a free NUMA quad does: 50 - 0
                "board": 80.0,  # 100 - 40 * (8 - 4) / 8
                "pcie-numa": -15.0,  # 2 + 3 free over NUMA: 4 domains, 0 - 40 * 3 / 8
            },
        ),
    ],
)
def test_scorer_rates_gpu_locality_per_node(count: int, expected: dict[str, float]) -> None:
    assert scores(LOCALITY, gpus(count)) == pytest.approx(expected)


def test_scorer_has_no_gpu_preference_for_fractions() -> None:
    # a 300 milli share breaks no whole domain: every option scores 0
    fraction = Request(cpu_milli=1000, gpu_milli=300)
    assert set(scores(LOCALITY, fraction).values()) == {0.0}


GANG = cluster(
    host("n0", PAIRS4, switch="s1"),
    host("n1", PAIRS4, switch="s2"),
    host("n2", PAIRS4, switch="s1"),
    host("n3", PAIRS4, switch="s2"),
    host("n4", PAIRS4, switch="s3"),
    host("n5", PAIRS4, switch="s3"),
    host("n6", PAIRS4, switch="s3"),
)


@pytest.mark.parametrize(
    ("nodes", "gang", "expected"),
    [
        # first of 2: s1 and s2 have 2 feasible nodes (rank 0), s3 has 3 (rank 1): -150
        (2, (), {"n0": 100, "n1": 100, "n2": 100, "n3": 100, "n4": -50, "n5": -50, "n6": -50}),
        # first of 3: only s3 has 3 (rank 0); s1 and s2 fall short by one (rank 1)
        (3, (), {"n0": -50, "n1": -50, "n2": -50, "n3": -50, "n4": 100, "n5": 100, "n6": 100}),
        # first of 4: no switch has 4; s3 comes closest (3 nodes, rank 0), then s1, s2 (2)
        (4, (), {"n0": -50, "n1": -50, "n2": -50, "n3": -50, "n4": 100, "n5": 100, "n6": 100}),
        # second member, first on n1 (s2): n3 shares its switch, the rest rank 1
        (2, (1,), {"n0": -50, "n2": -50, "n3": 100, "n4": -50, "n5": -50, "n6": -50}),
        # third member, earlier ones on n0 (s1) and n4, n5 (s3): s3 (2 members) first,
        # then s1 (1 member), then s2 (none): 100, -50, -200
        (3, (0, 4, 5), {"n1": -200, "n2": -50, "n3": -200, "n6": 100}),
    ],
)
def test_scorer_keeps_a_gang_under_one_switch(
    nodes: int, gang: tuple[int, ...], expected: dict[str, float]
) -> None:
    # every node holds 2 GPUs in one free pair: GPU locality 100, minus 150 per switch rank
    assert scores(GANG, gpus(2, nodes), gang) == pytest.approx(expected)


# -- the topology profile through the placer ------------------------------------------


def test_two_gpu_job_gets_the_free_pair() -> None:
    # GPU 0 taken: lowest-index picking would split pairs with (1, 2); the free pair is (2, 3)
    state = cluster(host("a", PAIRS4), used={"a": (0,)})
    placed = topology_placer().place(state, gpus(2))
    assert placed is not None
    assert placed[0].gpus == (2, 3)


def test_locality_outranks_a_tighter_fit() -> None:
    # "split" has GPUs 1 and 3 free, one per pair: best-fit's choice (0 left afterwards),
    # but only NUMA-local (50); "pair" keeps 1 GPU spare and holds the job on pair {2,3} (100)
    state = cluster(
        host("split", PAIRS4), host("pair", PAIRS4), used={"split": (0, 2), "pair": (0,)}
    )
    best_fit = Placer(PlacementProfile("best-fit", [(BestFit(), 1.0)])).place(state, gpus(2))
    assert best_fit is not None
    assert best_fit[0].node == 0
    placed = topology_placer().place(state, gpus(2))
    assert placed is not None
    assert (placed[0].node, placed[0].gpus) == (1, (2, 3))


def test_eight_gpus_on_two_numa_nodes() -> None:
    # PCIe-only boxes, 0 1 4 taken on "a", 0 taken on "b": a 3-GPU job fits NUMA 1 of "a"
    # ({5,6,7}, score 50) and NUMA 1 of "b" ({4..7}, 50 - 40 * 1 / 8 = 45) -> "a"
    state = cluster(
        host("a", PCIE8, QUADS), host("b", PCIE8, QUADS), used={"a": (0, 1, 4), "b": (0,)}
    )
    placed = topology_placer().place(state, gpus(3))
    assert placed is not None
    assert (placed[0].node, placed[0].gpus) == (0, (5, 6, 7))
    # the next 3-GPU job: "a" has {2,3} + none on NUMA 1 -> spread (-10); "b" NUMA 0 {1,2,3}: 50
    again = topology_placer().place(state, gpus(3))
    assert again is not None
    assert (again[0].node, again[0].gpus) == (1, (1, 2, 3))


def test_gang_of_two_stays_under_one_switch() -> None:
    # 4 nodes alternate between switches: lowest-index placement would take n0 (s1), n1 (s2)
    state = cluster(*(host(f"n{i}", PAIRS4, switch=f"s{i % 2 + 1}") for i in range(4)))
    placed = topology_placer().place(state, gpus(4, nodes=2))
    assert placed is not None
    assert [a.node for a in placed] == [0, 2]


def test_gang_avoids_a_switch_without_room_for_all_members() -> None:
    # n2 under s1 is full, so s1 has one feasible node and s2 two: the gang goes to s2
    state = cluster(
        *(host(f"n{i}", PAIRS4, switch=f"s{i % 2 + 1}") for i in range(4)),
        used={"n2": (0, 1, 2, 3)},
    )
    placed = topology_placer().place(state, gpus(2, nodes=2))
    assert placed is not None
    assert [a.node for a in placed] == [1, 3]


def test_gang_takes_the_smallest_switch_group_that_fits() -> None:
    # s-big has 3 nodes with the lowest indices, s-small 2: a gang of 2 keeps s-big whole
    state = cluster(
        *(host(f"big{i}", PAIRS4, switch="s-big") for i in range(3)),
        *(host(f"small{i}", PAIRS4, switch="s-small") for i in range(2)),
    )
    placed = topology_placer().place(state, gpus(1, nodes=2))
    assert placed is not None
    assert [a.node for a in placed] == [3, 4]


def _run(state: ClusterState, placer: Placer) -> list[tuple[int, tuple[int, ...]]]:
    requests = [gpus(1), gpus(2), gpus(3, nodes=2), gpus(1), gpus(4), gpus(2, nodes=3), gpus(2)]
    out = []
    for r in requests:
        placed = placer.place(state, r)
        assert placed is not None
        out += [(a.node, a.gpus) for a in placed]
    return out


def _fleet() -> ClusterState:
    return cluster(
        *(host(f"p{i}", PAIRS8, QUADS, switch=f"s{i % 3}") for i in range(6)),
        *(host(f"b{i}", BOARD8, QUADS, switch="s3") for i in range(3)),
    )


def test_placement_is_deterministic_and_independent_of_cached_state() -> None:
    fresh = _run(_fleet(), topology_placer())
    # one placer reused over a second state must not carry the first state's topology
    reused = topology_placer()
    other = cluster(*(host(f"x{i}", PCIE8, QUADS, switch="s1") for i in range(9)))
    _run(other, reused)
    assert _run(_fleet(), reused) == fresh
    # identical nodes tie -> lowest node; the first 1-GPU task best-fits a pair on p0
    assert fresh[0] == (0, (0,))
    # after the 2-GPU job and the gang (entries 1-3), GPU 1 of p0 is a lone free GPU:
    # the smallest domain for the next single GPU
    assert fresh[4] == (0, (1,))


def _split_jobs(profile: str, sizes: Sequence[int]) -> int:
    """2-GPU jobs placed across two NVLink pairs, for jobs of 1 or 2 GPUs that all fit."""
    state = cluster(*(host(f"n{i}", PAIRS8, QUADS) for i in range(4)))
    placer = Placer(placement_profile(profile))
    split = 0
    for n in sizes:
        done = placer.place(state, gpus(n))
        assert done is not None
        split += len(set(state.gpu_nvlink[done[0].node, list(done[0].gpus)].tolist())) > 1
    return split


def _fitting(sizes: Sequence[int]) -> list[int]:
    """The longest prefix demanding at most 31 of the 32 GPUs, so every job fits."""
    return [int(n) for n in np.asarray(sizes)[np.cumsum(sizes) <= 31]]


@given(st.lists(st.sampled_from([1, 2]), min_size=1, max_size=40))
def test_topology_never_splits_a_pair_job_while_it_fits(sizes: list[int]) -> None:
    # singles best-fit onto half-used pairs, so at most one pair is ever half used and
    # an even number of free GPUs (>= 2) always includes a whole free pair
    assert _split_jobs("topology", _fitting(sizes)) == 0


def test_best_fit_splits_pair_jobs_on_the_same_arrivals() -> None:
    # lowest-index picking: a single on GPU 0 makes the next pair job take GPUs (1, 2)
    assert _split_jobs("best-fit", [1, 2]) == 1
    sizes = _fitting(np.random.default_rng(7).choice([1, 2], size=40).tolist())
    assert _split_jobs("best-fit", sizes) > _split_jobs("topology", sizes) == 0


# -- default: locality across nodes ------------------------------------------------


def _default_places(state: ClusterState, request: Request) -> list[Assignment]:
    placed = Placer(placement_profile("default", workload=[request])).place(state, request)
    assert placed is not None
    return placed


def test_default_keeps_a_gang_under_the_switch_that_holds_it_whole() -> None:
    # "a" alone under sw1, "b" and "c" idle under sw2: packing by index alone would
    # start the 2 x 8 gang on "a" and finish it on "b", across two switches.
    board = (0,) * 8
    nodes = [host("a", board, switch="sw1"), host("b", board, switch="sw2")]
    nodes.append(host("c", board, switch="sw2"))
    placed = _default_places(ClusterState(nodes), Request(gpus=8, nodes=2))
    assert sorted(a.node for a in placed) == [1, 2]


def test_default_puts_a_two_gpu_task_on_a_free_nvlink_pair_of_another_node() -> None:
    # "a" has 4 free GPUs, one of each pair (0, 2, 4, 6 taken): a fuller node, which
    # fragmentation prefers, but only one NUMA node for the task. "b" is idle: a free pair.
    pairs = (0, 0, 1, 1, 2, 2, 3, 3)
    state = cluster(host("a", pairs), host("b", pairs), used={"a": (0, 2, 4, 6)})
    (placed,) = _default_places(state, gpus(2))
    assert (state.nodes[placed.node].name, placed.gpus) == ("b", (0, 1))
