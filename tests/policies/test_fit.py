"""Resource-fit scorers on tiny clusters, with the arithmetic of each case in its comment."""

from __future__ import annotations

import numpy as np
import pytest

from builders import JobBuilder, NodeBuilder, cluster, job, node, placer
from gpufleet.core.placement import Mode, Scorer
from gpufleet.policies.placement.fit import (
    Allocation,
    AllocationArgs,
    BestFit,
    DotProduct,
    FirstFit,
    Random,
    RandomArgs,
)

MOST = Allocation(AllocationArgs(strategy="most"))
LEAST = Allocation(AllocationArgs(strategy="least"))


def chosen(scorer: Scorer, nodes: list[NodeBuilder], request: JobBuilder) -> tuple[str, int]:
    """(node name, first GPU or -1) that the scorer places the request on."""
    state = cluster(*nodes)
    placed = placer(scorer).place(state, request.build())
    assert placed is not None
    a = placed[0]
    return state.nodes[a.node].name, a.gpus[0] if a.gpus else -1


@pytest.mark.parametrize(
    ("nodes", "request_", "expected"),
    [
        # Both fit -> the lowest node index.
        ([node("a").gpus(8), node("b").gpus(8)], job().gpus(1), ("a", 0)),
        # a has 1 GPU free, 2 asked -> the next node.
        ([node("a").gpus(8).used(7), node("b").gpus(8)], job().gpus(2), ("b", 0)),
        # On one node a fraction goes to the lowest GPU that fits: GPU 0 has 100 left.
        ([node("a").gpus(3).share(0, 900)], job().fraction(200), ("a", 1)),
        # Past 64 GPUs a node's GPUs still come before the next node's.
        ([node("a").gpus(100).used(65), node("b").gpus(100)], job().fraction(600), ("a", 65)),
    ],
)
def test_first_fit(
    nodes: list[NodeBuilder], request_: JobBuilder, expected: tuple[str, int]
) -> None:
    assert chosen(FirstFit(), nodes, request_) == expected


@pytest.mark.parametrize(
    ("nodes", "request_", "expected"),
    [
        # a: 6 of 8 GPUs used -> after 1 more, 1000 milli left; b: 4 free -> 3000 left.
        ([node("b").gpus(4), node("a").gpus(8).used(6)], job().gpus(1), ("a", 6)),
        # Same node total (a: 400 + 1000 - 300 = 1100 either way): the fuller GPU,
        # GPU 0 (400 -> 100 left) beats GPU 1 (1000 -> 700 left).
        ([node("a").gpus(2).share(0, 600)], job().fraction(300), ("a", 0)),
        # Node totals first: a leaves 100 + 1000 = 1100, b leaves 700 -> b, though a's GPU 0
        # would be the tighter single GPU.
        ([node("a").gpus(2).share(0, 600), node("b").gpus(1)], job().fraction(300), ("b", 0)),
        # Equal GPUs (1000 left each): the least free CPU share wins;
        # a: (64000 - 1000) / 64000 = 0.98, b: (16000 - 1000) / 64000 = 0.23 -> b.
        (
            [node("a").gpus(2), node("b").gpus(2).cpu_used(48_000)],
            job().gpus(1).cpu(1000),
            ("b", 0),
        ),
        # A CPU-only task: a leaves 8000 milli-GPU free, c (no GPUs) 0 -> c keeps GPUs whole.
        ([node("a").gpus(8), node("c")], job().cpu(1000), ("c", -1)),
    ],
)
def test_best_fit(
    nodes: list[NodeBuilder], request_: JobBuilder, expected: tuple[str, int]
) -> None:
    assert chosen(BestFit(), nodes, request_) == expected


def test_best_fit_scores() -> None:
    # Options: (a, GPU 0), (a, GPU 1), (b, GPU 0) for 300 milli, CPU 0 so the share is 0.
    # a: node left 1100, GPU left 100 or 700; b: node left 700, GPU left 700.
    # score = -(node_left * 1001 + gpu_left + cpu_share)
    state = cluster(node("a").gpus(2).share(0, 600), node("b").gpus(1))
    ctx = placer().context(state, job().fraction(300).build(), Mode.NOW)
    assert BestFit().score(ctx).tolist() == [
        -(1100 * 1001 + 100 + 1.0),
        -(1100 * 1001 + 700 + 1.0),
        -(700 * 1001 + 700 + 1.0),
    ]


# a: 8 GPUs, 4 used, 32 of 64 CPUs used; b: idle. Request: 1 GPU, 8 CPUs.
# a: CPU used 1 - (32000 - 8000) / 64000 = 0.625; GPU 1 - 3000 / 8000 = 0.625 -> 0.625
# b: CPU used 1 - 56000 / 64000 = 0.125;          GPU 1 - 7000 / 8000 = 0.125 -> 0.125
LOADED = [node("a").gpus(8).used(4).cpu_used(32_000), node("b").gpus(8)]
# A CPU-only node counts its (absent) GPUs as fully used. Request: 8 CPUs.
# g: CPU 8000 / 64000 = 0.125, GPU 0 of 8000 -> 0.0625; c: CPU 0.125, GPU 1 -> 0.5625
WITH_CPU_NODE = [node("g").gpus(8), node("c")]


@pytest.mark.parametrize(
    ("scorer", "nodes", "request_", "scores", "expected"),
    [
        (MOST, LOADED, job().gpus(1).cpu(8000), [0.625, 0.125], "a"),
        (LEAST, LOADED, job().gpus(1).cpu(8000), [-0.625, -0.125], "b"),
        (MOST, WITH_CPU_NODE, job().cpu(8000), [0.0625, 0.5625], "c"),
        (LEAST, WITH_CPU_NODE, job().cpu(8000), [-0.0625, -0.5625], "g"),
    ],
)
def test_allocation(
    scorer: Allocation,
    nodes: list[NodeBuilder],
    request_: JobBuilder,
    scores: list[float],
    expected: str,
) -> None:
    state = cluster(*nodes)
    ctx = placer().context(state, request_.build(), Mode.NOW)
    assert scorer.score(ctx).tolist() == pytest.approx(scores)
    assert chosen(scorer, nodes, request_)[0] == expected


def test_allocation_strategy_is_validated() -> None:
    with pytest.raises(ValueError, match="strategy"):
        AllocationArgs(strategy="middle")
    assert AllocationArgs().strategy == "most"


def test_dot_product() -> None:
    # Request: 16 CPUs of 64 (demand 0.25) and 1 GPU of 8 (demand 0.125).
    # a: 6 GPUs used.   left CPU 48000/64000 = 0.75,  left GPU 1000/8000 = 0.125
    #    dot = 0.25 * 0.75 + 0.125 * 0.125 = 0.203125
    # b: 40 CPUs used.  left CPU  8000/64000 = 0.125, left GPU 7000/8000 = 0.875
    #    dot = 0.25 * 0.125 + 0.125 * 0.875 = 0.140625 -> b, the smaller product
    nodes = [node("a").gpus(8).used(6), node("b").gpus(8).cpu_used(40_000)]
    request_ = job().cpu(16_000).gpus(1)
    ctx = placer().context(cluster(*nodes), request_.build(), Mode.NOW)
    assert DotProduct().score(ctx).tolist() == pytest.approx([-0.203125, -0.140625])
    assert chosen(DotProduct(), nodes, request_) == ("b", 0)


def random_run(seed: int) -> list[int]:
    state = cluster(*(node(f"n{i}").gpus(8) for i in range(8)))
    p = placer(Random(RandomArgs(seed=seed)))
    out = []
    for _ in range(16):
        placed = p.place(state, job().gpus(1).build())
        assert placed is not None
        out.append(placed[0].node)
    return out


def test_random_is_reproducible_from_its_seed() -> None:
    assert random_run(7) == random_run(7)
    assert random_run(7) != random_run(8)
    # 16 picks over 8 equal nodes: a seeded draw spreads, it does not always take n0.
    assert len(set(random_run(7))) > 1


def test_random_only_picks_feasible_options() -> None:
    # Only n3 has a free GPU: whatever the seed, that is where the task goes.
    nodes = [node(f"n{i}").gpus(2).used(2) for i in range(3)] + [node("n3").gpus(2)]
    for seed in range(5):
        assert chosen(Random(RandomArgs(seed=seed)), nodes, job().gpus(1)) == ("n3", 0)


def test_scores_are_one_per_option() -> None:
    state = cluster(node("a").gpus(4).share(1, 500), node("b").gpus(2), node("c").gpus(1).used(1))
    ctx = placer().context(state, job().fraction(250).build(), Mode.NOW)
    # a: GPU 0 (1000 free), GPU 1 (500 free); b: GPU 0; c: none -> 3 options
    assert len(ctx.options) == 3
    for scorer in (FirstFit(), BestFit(), MOST, LEAST, DotProduct(), Random()):
        out = scorer.score(ctx)
        assert out.shape == (3,)
        assert np.isfinite(out).all()
