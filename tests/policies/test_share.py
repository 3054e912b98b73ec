"""Share packing as a tier: fractional tasks go where an optimal packing would put them.

The workload is the mix solved by hand in ``tests/core/test_packing.py``:
470 x 2, 650 x 1, 320 x 4, priced p470 = 1/2, p320 = 1/3, p650 = 2/3.
"""

from __future__ import annotations

import pytest

from builders import JobBuilder, cluster, job, node, placer
from gpufleet.core.placement import Mode, PlacementProfile, Placer
from gpufleet.core.state import Assignment, ClusterState
from gpufleet.policies.placement.fit import FirstFit
from gpufleet.policies.placement.share import SharePacking

WORKLOAD = (
    [job().fraction(470).build()] * 2
    + [job().fraction(650).build()]
    + [job().fraction(320).build()] * 4
    + [job().gpus(1).build(), job().cpu(4000).build()]  # no shares: not priced
)


def state_with_two_open_gpus() -> ClusterState:
    # a: GPU 0 holds a 470 (530 free), GPU 1 a 650 (350 free); b: idle.
    return cluster(node("a").gpus(2).share(0, 470).share(1, 650), node("b").gpus(2))


def test_costs_are_the_packing_loss_of_each_gpu() -> None:
    state = state_with_two_open_gpus()
    ctx = placer().context(state, job().fraction(320).build(), Mode.NOW)
    assert list(zip(ctx.options.node.tolist(), ctx.options.gpu.tolist(), strict=True)) == [
        (0, 0),
        (0, 1),
        (1, 0),
    ]
    # 530 free: 1/2 - 1/3 - K(210) = 1/6; 350 free: 0; a fresh GPU: 0
    assert SharePacking(WORKLOAD).cost(ctx).tolist() == pytest.approx([1 / 6, 0.0, 0.0], abs=1e-12)


def test_a_320_finishes_the_650_not_the_470() -> None:
    # First-fit alone takes the first option, the 470's GPU, and leaves 210 that
    # nothing in the workload can use. With the tier it takes the 650's GPU.
    plain = Placer(PlacementProfile("ff", [(FirstFit(), 1.0)]))
    assert plain.place(state_with_two_open_gpus(), job().fraction(320).build()) == [
        Assignment(node=0, gpus=(0,), gpu_milli=320)
    ]
    tiered = Placer(PlacementProfile("ff", [(FirstFit(), 1.0)], tiers=[SharePacking(WORKLOAD)]))
    assert tiered.place(state_with_two_open_gpus(), job().fraction(320).build()) == [
        Assignment(node=0, gpus=(1,), gpu_milli=320)
    ]


def test_a_470_pairs_with_the_470() -> None:
    # 530 free: 1/2 - 1/2 - K(60) = 0; 350 free: too small; fresh: 1 - 1/2 - K(530) = 0.
    # Both cost nothing, so first-fit's order decides: the open GPU.
    tiered = Placer(PlacementProfile("ff", [(FirstFit(), 1.0)], tiers=[SharePacking(WORKLOAD)]))
    assert tiered.place(state_with_two_open_gpus(), job().fraction(470).build()) == [
        Assignment(node=0, gpus=(0,), gpu_milli=470)
    ]


@pytest.mark.parametrize("request_", [job().gpus(1), job().cpu(2000)])
def test_whole_gpu_and_cpu_requests_cost_nothing(request_: JobBuilder) -> None:
    ctx = placer().context(state_with_two_open_gpus(), request_.build(), Mode.NOW)
    assert SharePacking(WORKLOAD).cost(ctx).tolist() == [0.0] * len(ctx.options)


def test_without_a_workload_typical_shares_are_priced() -> None:
    # core.workload.TYPICAL's shares, 250 and 500, once each: four 250s or two
    # 500s or two 250s and a 500 fill a GPU, so p250 = 1/4 and p500 = 1/2.
    prices = SharePacking([]).prices
    assert prices.sizes.tolist() == [250, 500]
    assert prices.prices.tolist() == pytest.approx([0.25, 0.5], abs=1e-9)
    # A workload of whole GPUs only is a real one: it has no shares to price.
    assert len(SharePacking([job().gpus(1).build()]).prices.sizes) == 0
