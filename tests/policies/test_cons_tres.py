"""The ``cons-tres`` placement: where Slurm's select plugin would put a job now."""

from __future__ import annotations

import pytest

from builders import NodeBuilder, cluster, job, node
from gpufleet.core.model import Request
from gpufleet.core.placement import Placer
from gpufleet.policies.registry import placement_profile


def nodes_of(policy: str, state_nodes: list[NodeBuilder], request: Request) -> list[str]:
    state = cluster(*state_nodes)
    placed = Placer(placement_profile(policy)).place(state, request)
    assert placed is not None
    return [state.nodes[a.node].name for a in placed]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("cons-tres", ["n2", "n3"]), ("best-fit", ["n0", "n2"])],
)
def test_a_gang_takes_a_run_of_adjacent_nodes(policy: str, expected: list[str]) -> None:
    # n1 is busy: the free nodes are n0 alone and n2-n3 together.
    free = [node("n0").gpus(8), node("n1").gpus(8).used(8), node("n2").gpus(8), node("n3").gpus(8)]
    assert nodes_of(policy, free, job().gpus(8).gang(2).build()) == expected


@pytest.mark.parametrize(("policy", "expected"), [("cons-tres", ["b"]), ("best-fit", ["a"])])
def test_one_task_goes_to_the_node_with_the_fewest_free_cpus(
    policy: str, expected: list[str]
) -> None:
    # a has fewer free GPUs (2 against 8), b fewer free CPUs (24 against 64).
    pair = [node("a").gpus(8).used(6), node("b").gpus(8).cpu_used(40_000)]
    assert nodes_of(policy, pair, job().gpus(1).build()) == expected
