"""The placement registry: what ``--policy NAME`` builds."""

from __future__ import annotations

import pytest

from builders import cluster, job, node
from gpufleet.core.placement import Placer
from gpufleet.core.state import Assignment
from gpufleet.policies.registry import PLACEMENT, UnknownPolicy, placement_profile

WORKLOAD = [job().gpus(1).build(), job().fraction(500).build()]


def test_the_documented_policies_are_registered() -> None:
    documented = {"first-fit", "best-fit", "packing", "spread", "dot-product", "random", "fgd"}
    assert documented | {"default"} <= set(PLACEMENT)


@pytest.mark.parametrize("name", sorted(PLACEMENT))
def test_each_profile_is_named_after_its_key(name: str) -> None:
    assert placement_profile(name, workload=WORKLOAD).name == name


@pytest.mark.parametrize("name", ["first-fit", "best-fit", "dot-product", "random", "fgd"])
def test_a_single_plugin_profile_uses_the_plugin_of_that_name(name: str) -> None:
    scorers = placement_profile(name, workload=WORKLOAD).scorers
    assert [type(s).NAME for s, _ in scorers] == [name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(PLACEMENT))
def test_every_profile_places_only_where_it_fits(name: str) -> None:
    # a is full, c is unhealthy: b is the only home for the task.
    state = cluster(node("a").gpus(2).used(2), node("b").gpus(2), node("c").gpus(2).unhealthy())
    p = Placer(placement_profile(name, workload=WORKLOAD, seed=3))
    placed = p.place(state, job().gpus(2).build())
    assert placed is not None and placed[0].node == 1
    assert p.place(state, job().gpus(1).build()) is None  # now nothing is free


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # a: 6 of 8 GPUs used, b idle; one more GPU.
        # packing: used share after, (CPU + GPU) / 2: a (0 + 7/8) / 2 = 0.4375, b (0 + 1/8) / 2
        # = 0.0625 -> a; spread takes the least used -> b
        ("packing", "a"),
        ("spread", "b"),
        # best-fit: a leaves 1000 milli, b 7000
        ("best-fit", "a"),
        ("first-fit", "a"),
    ],
)
def test_profiles_differ_as_documented(name: str, expected: str) -> None:
    state = cluster(node("a").gpus(8).used(6), node("b").gpus(8))
    placed = Placer(placement_profile(name)).place(state, job().gpus(1).build())
    assert placed is not None and state.nodes[placed[0].node].name == expected


def picks(seed: int) -> list[int]:
    state = cluster(*(node(f"n{i}").gpus(4) for i in range(6)))
    p = Placer(placement_profile("random", seed=seed))
    out = []
    for _ in range(12):
        placed = p.place(state, job().gpus(1).build())
        assert placed is not None
        out.append(placed[0].node)
    return out


def test_the_seed_reaches_the_random_policy() -> None:
    assert picks(1) == picks(1)
    assert picks(1) != picks(2)


@pytest.mark.parametrize("name", ["fgd", "default"])
def test_fgd_profiles_place_without_a_workload(name: str) -> None:
    # No workload: both measure against core.workload.TYPICAL, six types each 1/6:
    # whole 1, 2, 4, 8 GPUs (W1..W8) and shares of 250 and 500 (S250, S500).
    # a: [500, 1000] W1: 500 (below 1000), W2/W4/W8: 1500 each, S: 0 -> 5000 / 6
    # b: [1000, 1000] W4/W8: 2000 each, others 0                      -> 4000 / 6
    # 500 milli on (a,0) -> [0, 1000]:   W2/W4/W8 1000 each -> 3000 / 6, gain +333
    #              (a,1) -> [500, 500]:  W1..W8 1000 each   -> 4000 / 6, gain +167
    #              (b,0) -> [500, 1000]: as a was           -> 5000 / 6, gain -167
    # default's share tier costs nothing anywhere here (p250 = 1/4, p500 = 1/2:
    # 500 leaves 0 or 500 free, each the end of an optimal pattern).
    state = cluster(node("a").gpus(2).share(0, 500), node("b").gpus(2))
    p = Placer(placement_profile(name))
    assert p.place(state, job().fraction(500).build()) == [
        Assignment(node=0, gpus=(0,), gpu_milli=500)
    ]
    # One whole GPU on a: [0, 1000] -> [0, 0] clears 3000 / 6, gain +500;
    # on b: [1000, 1000] -> [0, 1000]: W4, W8 -1000 each, W2 +1000, gain +167.
    assert p.place(state, job().gpus(1).build()) == [Assignment(node=0, gpus=(1,), gpu_milli=1000)]


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(UnknownPolicy) as err:
        placement_profile("worst-fit")
    message = str(err.value)
    assert message.startswith("unknown placement policy 'worst-fit' (known: first-fit, ")
    assert all(name in message for name in PLACEMENT)
    assert "\n" not in message
    assert isinstance(err.value, ValueError)


def test_default_packs_shares_and_keeps_locality_before_fragmentation_scores() -> None:
    profile = placement_profile("default", workload=WORKLOAD)
    tiers = [type(t).NAME for t in profile.tiers]  # type: ignore[attr-defined]
    assert tiers == ["share-packing", "topology-tier"]
    assert [type(s).NAME for s, _ in profile.scorers] == ["fgd"]  # type: ignore[attr-defined]
