"""Fragmentation Gradient Descent, checked against fragmentation worked out by hand.

Notation: a node's free milli-GPU per GPU in brackets, e.g. [500, 1000]. For a
task type wanting g GPUs of m milli each, a node's fragment is its whole free
milli-GPU if the type cannot run there (fewer than g GPUs with m free, or too
little CPU), and otherwise the free milli-GPU on GPUs with less than m free.
A node's fragmentation is the frequency-weighted sum over the types.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import NodeBuilder, cluster, job, node, placer
from gpufleet.core import fragmentation
from gpufleet.core.fragmentation import (
    CPU,
    GPU,
    FragmentationMeter,
    LastPlaces,
    Workload,
    competing,
    node_pressure,
    runs_out_first,
    stranded,
)
from gpufleet.core.model import Request
from gpufleet.core.placement import Mode, Placer
from gpufleet.core.state import Assignment, ClusterState
from gpufleet.core.workload import TYPICAL
from gpufleet.policies.placement.fgd import FragmentationArgs, FragmentationGradient
from gpufleet.policies.placement.fit import BestFit
from gpufleet.policies.registry import placement_profile

# Two task types, equally frequent: A = 1 whole GPU, B = half a GPU.
ONE_AND_HALF = [job().gpus(1).build(), job().fraction(500).build()]
# A = 2 whole GPUs, B = half a GPU.
TWO_AND_HALF = [job().gpus(2).build(), job().fraction(500).build()]
EXACT = FragmentationArgs(resolution="exact")


def meter(state: ClusterState, workload: Sequence[Request]) -> FragmentationMeter:
    return FragmentationMeter(state, Workload.from_requests(workload, state.models))


def test_half_gpu_joins_the_half_used_gpu() -> None:
    # a: [500, 1000]  A: 1 GPU has 1000 -> runs; GPU 0 (500 < 1000) is a fragment: 500
    #                 B: both GPUs have >= 500 -> fragment 0
    #                 frag(a) = 0.5 * 500 + 0.5 * 0 = 250
    # b: [1000, 1000] frag(b) = 0
    state = cluster(node("a").gpus(2).share(0, 500), node("b").gpus(2))
    assert meter(state, ONE_AND_HALF).per_node().tolist() == [250.0, 0.0]
    # Placing 500 milli (options (a,0), (a,1), (b,0); b's GPU 1 equals GPU 0):
    # (a,0) -> [0, 1000]:   A 0, B 0            -> 0;   gain 250 - 0   = +250
    # (a,1) -> [500, 500]:  A can't run: 1000;  B 0 -> 500; gain 250 - 500 = -250
    # (b,0) -> [500, 1000]: as a was            -> 250; gain 0 - 250   = -250
    fgd = FragmentationGradient(ONE_AND_HALF, EXACT)
    ctx = placer().context(state, job().fraction(500).build(), Mode.NOW)
    assert ctx.options.gpu.tolist() == [0, 1, 0]
    assert fgd.score(ctx).tolist() == [250.0, -250.0, -250.0]
    placed = placer(fgd).place(state, job().fraction(500).build())
    assert placed == [Assignment(node=0, gpus=(0,), gpu_milli=500)]


def test_paper_resolution_squashes_the_gain_into_integer_scores() -> None:
    # floor(100 * sigmoid(gain / 1000)): +250 -> floor(56.2) = 56, -250 -> floor(43.8) = 43
    state = cluster(node("a").gpus(2).share(0, 500), node("b").gpus(2))
    ctx = placer().context(state, job().fraction(500).build(), Mode.NOW)
    assert FragmentationGradient(ONE_AND_HALF).score(ctx).tolist() == [56.0, 43.0, 43.0]


def test_whole_gpu_keeps_pairs_intact_where_best_fit_breaks_them() -> None:
    # a: [1000, 1000]        frag 0 (A = 2 GPUs fits, B fits)
    # b: [1000, 1000, 1000]  frag 0
    # 1 GPU on a -> [0, 1000]:        A can't run: 1000 * 0.5 = 500; B: 0  -> gain -500
    # 1 GPU on b -> [0, 1000, 1000]:  A runs, B runs: 0                    -> gain 0
    # fgd picks b; best-fit picks a (1000 left on a < 2000 left on b).
    nodes = [node("a").gpus(2), node("b").gpus(3)]
    state = cluster(*nodes)
    assert meter(state, TWO_AND_HALF).per_node().tolist() == [0.0, 0.0]
    ctx = placer().context(state, job().gpus(1).build(), Mode.NOW)
    assert FragmentationGradient(TWO_AND_HALF, EXACT).score(ctx).tolist() == [-500.0, 0.0]
    # paper: floor(100 * sigmoid(-0.5)) = floor(37.8) = 37; sigmoid(0) -> 50
    assert FragmentationGradient(TWO_AND_HALF).score(ctx).tolist() == [37.0, 50.0]
    fgd_choice = placer(FragmentationGradient(TWO_AND_HALF)).place(state, job().gpus(1).build())
    assert fgd_choice is not None and fgd_choice[0].node == 1
    best_fit_choice = placer(BestFit()).place(cluster(*nodes), job().gpus(1).build())
    assert best_fit_choice is not None and best_fit_choice[0].node == 0


def test_gpus_stranded_by_cpu_are_fragments() -> None:
    # A = 2 GPUs with 8 CPUs, B = half a GPU with no CPU.
    workload = [job().gpus(2).cpu(8000).build(), job().fraction(500).build()]
    # a: [1000, 1000], 4 of 64 CPUs free: A can't run -> 2000 * 0.5 = 1000; B: 0 -> 1000
    # b: [1000, 1000, 1000], CPUs free   -> 0
    state = cluster(node("a").gpus(2).cpu_used(60_000), node("b").gpus(3))
    assert meter(state, workload).per_node().tolist() == [1000.0, 0.0]
    # 1 GPU on a -> [0, 1000]: A still can't run: 500; B: 0 -> gain 1000 - 500 = +500
    # 1 GPU on b -> [0, 1000, 1000]: 0 -> gain 0. Use the GPUs that were stranded.
    ctx = placer().context(state, job().gpus(1).build(), Mode.NOW)
    assert FragmentationGradient(workload, EXACT).score(ctx).tolist() == [500.0, 0.0]


def test_allowed_models_decide_whether_a_type_can_run() -> None:
    # A = 1 GPU, V100M32 only. On an A100 node A can never run: every free GPU is a fragment.
    workload = [job().gpus(1).models("V100M32").build()]
    state = cluster(node("a100").gpus(2), node("v100").model("V100M32").gpus(2))
    assert meter(state, workload).per_node().tolist() == [2000.0, 0.0]


def test_meter_recomputes_only_changed_nodes_and_follows_the_state() -> None:
    state = cluster(node("a").gpus(2), node("b").gpus(2))
    m = meter(state, ONE_AND_HALF)
    assert m.per_node().tolist() == [0.0, 0.0]
    # b -> [700, 1000]: A: fragment 700 -> 0.5 * 700 = 350; B: 0 -> 350
    state.allocate(Assignment(node=1, gpus=(0,), gpu_milli=300))
    assert m.per_node().tolist() == [0.0, 350.0]
    assert m.total() == 350.0
    state.release(Assignment(node=1, gpus=(0,), gpu_milli=300))
    assert m.per_node().tolist() == [0.0, 0.0]


def test_workload_type_frequencies() -> None:
    # 3 x A, 1 x B, and a MIG request that fragmentation does not model.
    requests = [ONE_AND_HALF[0]] * 3 + [ONE_AND_HALF[1], job().mig("1g.10gb").build()]
    w = Workload.from_requests(requests, ["A100-80GB"])
    # Types are ordered by per-GPU milli: B (500) first, then A (1000).
    assert w.milli.tolist() == [500, 1000]
    assert w.gpus.tolist() == [1, 1]
    assert w.freq.tolist() == [0.25, 0.75]
    assert np.isclose(w.freq.sum(), 1.0)


def test_workload_needs_a_non_mig_request() -> None:
    with pytest.raises(ValueError, match="at least one non-MIG request"):
        Workload.from_requests([job().mig("1g.10gb").build()], ["A100-80GB"])


def test_fgd_without_a_workload_measures_against_typical_requests() -> None:
    # Nothing submitted yet, or MIG requests only (which fragmentation leaves out).
    assert FragmentationGradient([]).workload == TYPICAL
    assert FragmentationGradient([job().mig("1g.10gb").build()]).workload == TYPICAL
    mixed = (job().mig("1g.10gb").build(), ONE_AND_HALF[0])
    assert FragmentationGradient(mixed).workload == mixed


def test_fgd_args_are_validated() -> None:
    with pytest.raises(ValueError, match="resolution"):
        FragmentationArgs(resolution="coarse")
    with pytest.raises(ValueError, match="unknown"):
        FragmentationArgs(unknown=True)  # type: ignore[call-arg]


def test_fgd_measures_each_state_with_its_own_meter() -> None:
    fgd = FragmentationGradient(ONE_AND_HALF)
    first, second = cluster(node("a").gpus(1)), cluster(node("b").gpus(2).share(0, 500))
    assert fgd.meter(first) is fgd.meter(first)
    assert fgd.meter(second).state is second
    assert fgd.meter(second).per_node().tolist() == [250.0]


@pytest.mark.parametrize(
    ("cpu_used", "fit_weight", "capacity_weight", "expected"),
    [
        # 8 free GPUs, 20 of 32 cores free; the only type: half a GPU + 12 cores.
        # paper: one task fits (a GPU has 500, 12 <= 20 cores), no GPU below 500 -> 0
        (12_000, 1.0, 0.0, 0.0),
        # capacity: k = min(16 slots, 20 // 12 = 1) = 1 task -> usable 500 of 8000 -> 7500
        (12_000, 0.0, 1.0, 7500.0),
        # blend: 1 x 0 + 2 x 7500
        (12_000, 1.0, 2.0, 15000.0),
        # 32 cores free: k = min(16, 32 // 12 = 2) = 2 -> 8000 - 1000 = 7000
        (0, 0.0, 1.0, 7000.0),
    ],
)
def test_capacity_measure_counts_gpus_stranded_by_cpu(
    cpu_used: int, fit_weight: float, capacity_weight: float, expected: float
) -> None:
    state = cluster(node("a").gpus(8).cpu(32_000).cpu_used(cpu_used))
    workload = Workload.from_requests(
        [job().fraction(500).cpu(12_000).build()],
        state.models,
        fit_weight=fit_weight,
        capacity_weight=capacity_weight,
    )
    assert FragmentationMeter(state, workload).per_node().tolist() == [expected]


def test_capacity_measure_leaves_whole_gpu_types_to_the_stranding_measure() -> None:
    # The same node and CPUs for a whole GPU + 12 cores: one task could use 1000 of 8000,
    # but the capacity measure counts shares only, so it adds nothing (the paper's is 0).
    state = cluster(node("a").gpus(8).cpu(32_000).cpu_used(12_000))
    workload = Workload.from_requests(
        [job().gpus(1).cpu(12_000).build()], state.models, fit_weight=0.0, capacity_weight=1.0
    )
    assert FragmentationMeter(state, workload).per_node().tolist() == [0.0]


def _pressure(state: ClusterState, workload: Workload) -> list[list[float]]:
    model = FragmentationMeter(state, workload).model
    return [[round(x, 6) for x in row] for row in node_pressure(workload, state, model).tolist()]


def test_node_pressure_weighs_demand_against_the_models_a_type_may_use() -> None:
    # Supply: A100 2 GPUs (2000 milli), H100 2 GPUs (2000); cluster 4000.
    # Types (equally frequent): any model, 1 GPU -> demand 0.5 x 1000 = 500 over 4000;
    #                           H100 only, 1 GPU -> 500 over 2000.
    # pressure A100 = 500/4000 = 0.125; H100 = 0.125 + 0.25 = 0.375
    # cluster mean = (500 + 500) / 4000 = 0.25 -> relative A100 0.5, H100 1.5.
    # Nobody asks for CPU or memory: those columns stay at 1.
    state = cluster(node("a").gpus(2).model("A100-80GB"), node("h").gpus(2).model("H100-80GB"))
    workload = Workload.from_requests(
        [job().gpus(1).build(), job().gpus(1).models("H100-80GB").build()], state.models
    )
    assert _pressure(state, workload) == [[0.5, 1.0, 1.0], [1.5, 1.0, 1.0]]
    # Without constraints every node is at the cluster's pressure.
    plain = Workload.from_requests([job().gpus(1).build()], state.models)
    assert _pressure(state, plain) == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]


BIG_AND_SMALL = (node("big").gpus(2).cpu(64_000), node("small").gpus(2).cpu(16_000))
# Equally frequent: 1 GPU + 8 CPUs fits both nodes; 2 GPUs + 48 CPUs fits only "big".
NARROW = [job().gpus(1).cpu(8000).build(), job().gpus(2).cpu(48_000).build()]


def test_node_pressure_counts_the_nodes_only_large_types_fit() -> None:
    # GPU: 1-GPU type 0.5 x 1000 = 500 over 4000 (0.125 each); 2-GPU type 0.5 x 2000
    #   = 1000 over big's 2000 (0.5). Mean 1500 / 4000 = 0.375 -> big 0.625 / 0.375 = 5/3,
    #   small 0.125 / 0.375 = 1/3.
    # CPU: 0.5 x 8000 = 4000 over 80000 (0.05 each); 0.5 x 48000 = 24000 over big's 64000
    #   (0.375). Mean 28000 / 80000 = 0.35 -> big 0.425 / 0.35 = 17/14, small 1/7.
    state = cluster(*BIG_AND_SMALL)
    workload = Workload.from_requests(NARROW, state.models)
    assert _pressure(state, workload) == [
        [round(5 / 3, 6), round(17 / 14, 6), 1.0],
        [round(1 / 3, 6), round(1 / 7, 6), 1.0],
    ]


def test_scarcity_charges_what_a_gpu_task_takes_where_pressure_exceeds_the_mean() -> None:
    # Pressure as above. One GPU + 8 CPUs on "big" takes 1000 milli-GPU at excess 2/3
    # and 8000 milli-CPU at excess 3/14, CPU counted at the cluster's 4000 milli-GPU per
    # 80000 milli-CPU (x 0.05): 3 x (2/3 x 1000 + 3/14 x 400) = 2000 + 257.14.
    # "small" is below the mean: no charge, and no bonus either.
    state = cluster(*BIG_AND_SMALL)
    scarce = FragmentationArgs(resolution="exact", scarcity_weight=3.0)

    def charge(request: Request) -> list[float]:
        ctx = placer().context(state, request, Mode.NOW)
        plain = FragmentationGradient(NARROW, EXACT).score(ctx)
        return (plain - FragmentationGradient(NARROW, scarce).score(ctx)).tolist()

    assert charge(job().gpus(1).cpu(8000).build()) == [pytest.approx(2000 + 1800 / 7), 0.0]
    # A CPU-only task is not charged (docs/placement.md says why).
    assert charge(job().cpu(8000).build()) == [0.0, 0.0]


# NARROW and a CPU-only type of 40 CPUs, each a third of the tasks: the average task
# asks 1000 milli-GPU and 32000 milli-CPU, so the cluster's 80000 milli-CPU last 2.5
# tasks and its 4000 milli-GPU 4. NARROW alone asks 1500 and 28000: 2.86 against 2.67.
HUNGRY = [*NARROW, job().cpu(40_000).build()]


def test_cpu_runs_out_first_when_the_mix_asks_more_cpu_than_the_gpus_carry() -> None:
    state = cluster(*BIG_AND_SMALL)
    assert runs_out_first(Workload.from_requests(HUNGRY, state.models), state) == CPU
    assert runs_out_first(Workload.from_requests(NARROW, state.models), state) == GPU


def test_where_cpu_runs_out_first_node_pressure_fades_as_the_cpu_fills() -> None:
    # Idle, pressure counts in full; with half the cluster's CPU taken (40 of 80 CPUs),
    # (1/2)^4 of it. Under NARROW, whose GPUs run out first, it never fades.
    scarce = FragmentationArgs(resolution="exact", scarcity_weight=3.0)
    request = job().gpus(1).cpu(8000).build()
    half = (node("big").gpus(2).cpu(64_000).cpu_used(40_000), BIG_AND_SMALL[1])

    def charge(workload: list[Request], nodes: Sequence[NodeBuilder]) -> list[float]:
        ctx = placer().context(cluster(*nodes), request, Mode.NOW)
        plain = FragmentationGradient(workload, EXACT).score(ctx)
        return (plain - FragmentationGradient(workload, scarce).score(ctx)).tolist()

    idle = charge(HUNGRY, BIG_AND_SMALL)
    assert idle[0] > 0
    assert charge(HUNGRY, half) == [pytest.approx(idle[0] / 16), 0.0]
    assert charge(NARROW, half) == charge(NARROW, BIG_AND_SMALL)


def test_competing_ratios_count_the_cpu_of_cpu_only_tasks() -> None:
    workload = Workload.from_requests(
        [job().gpus(1).cpu(12_000).memory(98_304).build(), job().cpu(4000).build()],
        ["A100-80GB"],
        memory=True,
    )
    # Half the tasks each: 8000 milli-CPU and 49152 MiB a task over 500 milli-GPU.
    both = competing(workload)
    assert (both.cpu_per_milli, both.memory_per_milli) == (16.0, 98.304)


def test_where_cpu_runs_out_first_stranding_counts_every_tasks_cpu() -> None:
    # HUNGRY's tasks ask 32 milli-CPU per milli-GPU (18.67 for its GPU tasks alone).
    # 16 CPUs on "big" (64 CPUs, 2 GPUs): 48 CPUs carry 1500 -> 500 stranded, x 3.
    # On "small" (16 CPUs): 500 of 2000 carried before, none after -> 500 more, x 3.
    # At the GPU tasks' ratio "big" would strand nothing (48 CPUs carry 2571).
    state = cluster(*BIG_AND_SMALL)
    ctx = placer().context(state, job().cpu(16_000).build(), Mode.NOW)
    args = FragmentationArgs(resolution="exact", stranding_weight=3.0)
    plain = FragmentationGradient(HUNGRY, EXACT).score(ctx)
    charged = FragmentationGradient(HUNGRY, args).score(ctx) - plain
    assert charged.tolist() == [pytest.approx(-1500.0), pytest.approx(-1500.0)]


def test_popularity_keeps_the_most_common_types_and_renormalises() -> None:
    # 6 tasks: 3 x one GPU, 2 x half a GPU, 1 x eight GPUs.
    # popularity 0.8 needs 4.8 tasks: one GPU (3) then half (5) covers it;
    # the 8-GPU type is dropped and the kept ones renormalise to 3/5 and 2/5.
    requests = [job().gpus(1).build()] * 3 + [job().fraction(500).build()] * 2
    requests += [job().gpus(8).build()]
    kept = Workload.from_requests(requests, ["A100-80GB"], popularity=0.8)
    types = zip(kept.gpus.tolist(), kept.milli.tolist(), kept.freq.tolist(), strict=True)
    assert sorted(types) == [
        (1, 500, 0.4),
        (1, 1000, 0.6),
    ]
    everything = Workload.from_requests(requests, ["A100-80GB"])
    assert len(everything.freq) == 3
    with pytest.raises(ValueError, match="popularity"):
        Workload.from_requests(requests, ["A100-80GB"], popularity=0.0)


@pytest.mark.parametrize(
    ("gpu_free", "cpu_free", "memory_free", "expected"),
    [
        # Workload: 1 GPU with 12 CPUs and 96 GiB -> 12 milli-CPU and 98.304 MiB per milli-GPU.
        (8000, 96_000, 786_432, 0.0),  # CPU and memory both carry 8000
        (8000, 32_000, 786_432, 8000 - 32_000 / 12),  # CPU carries 2666.7
        (8000, 96_000, 98_304, 7000.0),  # memory carries 1000
        (1000, 0, 0, 1000.0),  # nothing carried
        (0, 0, 0, 0.0),  # no GPU, nothing stranded
    ],
)
def test_stranded_gpu_is_what_cpu_and_memory_cannot_carry(
    gpu_free: int, cpu_free: int, memory_free: int, expected: float
) -> None:
    workload = Workload.from_requests(
        [job().gpus(1).cpu(12_000).memory(98_304).build(), job().cpu(4000).build()],
        ["A100-80GB"],
        memory=True,
    )
    # The CPU-only type brings no GPU, so it does not enter the ratios.
    assert (workload.cpu_per_milli, workload.memory_per_milli) == (12.0, 98.304)
    got = stranded(np.array([gpu_free]), np.array([cpu_free]), np.array([memory_free]), workload)
    assert got.tolist() == [pytest.approx(expected)]


def test_stranding_ratios_are_the_gpu_demands_medians_not_its_means() -> None:
    # Six 1-GPU tasks with 8 CPUs and 32 GiB, one 4-GPU task with 80 CPUs and 640 GiB:
    # 6 of the 10 GPUs asked come with 8 milli-CPU and 32.768 MiB per milli-GPU, so
    # those are the medians (the means, 12.8 and 85.2, follow the one heavy task).
    requests = [job().gpus(1).cpu(8000).memory(32_768).build()] * 6
    requests += [job().gpus(4).cpu(80_000).memory(655_360).build()]
    workload = Workload.from_requests(requests, ["V100"], memory=True)
    assert (workload.cpu_per_milli, workload.memory_per_milli) == (8.0, 32.768)
    # A 4-GPU node with 32 CPUs and 128 GiB free, the build most of the tasks fill,
    # strands nothing.
    idle = stranded(np.array([4000]), np.array([32_000]), np.array([131_072]), workload)
    assert idle.tolist() == [0.0]


def test_stranding_ignores_memory_unless_the_measure_counts_it() -> None:
    workload = Workload.from_requests(
        [job().gpus(1).cpu(12_000).memory(98_304).build()], ["A100-80GB"]
    )
    assert workload.memory_per_milli == 0.0
    assert stranded(np.array([1000]), np.array([12_000]), np.array([0]), workload).tolist() == [0]


def test_stranding_charges_cpu_taken_from_gpu_nodes() -> None:
    # Workload: 1 GPU with 12 CPUs -> 12 milli-CPU per milli-GPU. A CPU-only task of 20 CPUs:
    # a: 2 GPUs, 24 CPUs: before carries 2000 (0 stranded); after 4 CPUs carry 333.3
    #    -> 1666.7 stranded, charged 3 x 1666.7 = 5000
    # b: 2 GPUs, 100 CPUs: after 80 CPUs carry 6666.7 -> 0 stranded, no charge.
    state = cluster(node("a").gpus(2).cpu(24_000), node("b").gpus(2).cpu(100_000))
    workload = [job().gpus(1).cpu(12_000).build()]
    ctx = placer().context(state, job().cpu(20_000).build(), Mode.NOW)
    plain = FragmentationGradient(workload, EXACT).score(ctx)
    args = FragmentationArgs(resolution="exact", stranding_weight=3.0)
    charged = FragmentationGradient(workload, args).score(ctx)
    assert (charged - plain).tolist() == [pytest.approx(-5000.0), 0.0]


def test_remembered_states_give_what_a_fresh_meter_computes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Four memo slots force evictions and slot sharing; every answer must still be
    # what a meter that has seen nothing before computes.
    monkeypatch.setattr(fragmentation, "MEMO_SLOTS", 4)
    workload = [*ONE_AND_HALF, job().fraction(300).cpu(2000).build()]
    state = cluster(*(node(f"n{i}").gpus(4).cpu(16_000) for i in range(5)))
    kept = meter(state, workload)
    rng = np.random.default_rng(7)
    shapes = [job().fraction(300).cpu(2000), job().fraction(500), job().gpus(1).cpu(1000)]
    for _ in range(30):
        r = shapes[int(rng.integers(len(shapes)))].build()
        ctx = placer().context(state, r, Mode.NOW)
        if not len(ctx.options):
            break
        o = ctx.options
        assert (
            kept.after(o.node, o.gpu, r).tolist()
            == meter(state, workload).after(o.node, o.gpu, r).tolist()
        )
        k = int(rng.integers(len(o)))
        state.allocate(placer().assignment(ctx, k))


@pytest.mark.parametrize(("gpus_used", "cpu_used"), [(0, 0), (2, 24_000), (4, 48_000)])
def test_default_keeps_a_share_off_the_only_node_a_large_type_fits(
    gpus_used: int, cpu_used: int
) -> None:
    # Only "big" (128 CPUs, 768 GiB) holds the 8-GPU task with 120 CPUs and 700 GiB.
    # A CPU-heavy share strands less GPU there, which drew it to "big" before node
    # pressure; now taking "big"'s resources costs, and the share goes to "small".
    gib = 1024
    share = job().fraction(500).cpu(12_000).memory(48 * gib).build()
    workload = [share] * 20 + [job().gpus(1).cpu(8000).memory(32 * gib).build()] * 20
    workload += [job().gpus(8).cpu(120_000).memory(700 * gib).build()]
    state = cluster(
        node("big").gpus(8).cpu(128_000).memory(768 * gib),
        node("small").gpus(8).cpu(96_000).memory(384 * gib).used(gpus_used).cpu_used(cpu_used),
    )
    (placed,) = Placer(placement_profile("default", workload=workload)).place(state, share) or ()
    assert state.nodes[placed.node].name == "small"


# Big holds the 2-GPU, 48-CPU type; small (32 CPUs) does not.
ONE_BIG = (node("big").gpus(2).cpu(64_000), node("small").gpus(2).cpu(32_000))
LAST_PLACES = FragmentationArgs(resolution="exact", last_place_weight=1.0)


def _last_place_charge(workload: Sequence[Request], request: Request) -> list[float]:
    state = cluster(*ONE_BIG)
    ctx = placer().context(state, request, Mode.NOW)
    plain = FragmentationGradient(workload, EXACT).score(ctx)
    return (plain - FragmentationGradient(workload, LAST_PLACES).score(ctx)).tolist()


def test_taking_a_types_last_place_costs_its_need_times_what_it_asks() -> None:
    # NARROW: A = 1 GPU + 8 CPUs, B = 2 GPUs + 48 CPUs, equally frequent.
    # Free 4000 milli-GPU, 96000 milli-CPU; the average task asks 1500 and 28000, so
    # GPUs run out first, after 4000 / 1500 = 8/3 tasks: 4/3 of each type.
    # A: places 2 + 2 = 4, as many as anywhere (4000 / 1000): no need.
    # B: places 1 (big), anywhere min(4000 / 2000, 96000 / 48000) = 2:
    #    need 4/3 / 1 - 4/3 / 2 = 2/3; a B task asks 2000 milli-GPU or 48000 milli-CPU
    #    (x 4000 / 96000 = 2000): a place is worth 2/3 x 2000 = 1333.3.
    # 20 CPUs on big leave 44 (< 48): B's place goes. Small had none to lose.
    cpu_only = job().cpu(20_000).build()
    assert _last_place_charge(NARROW, cpu_only) == [pytest.approx(4000 / 3), 0.0]
    # 8 CPUs leave 56 on big: B still fits, nothing lost.
    assert _last_place_charge(NARROW, job().cpu(8000).build()) == [0.0, 0.0]


def test_where_cpu_runs_out_first_only_cpu_only_tasks_pay_for_gpu_types_places() -> None:
    # A CPU-only type of 32 CPUs joins NARROW, a third of the tasks each: the average
    # task asks 1000 milli-GPU and 29333 milli-CPU, so CPU runs out first, after
    # 96000 / 29333 = 36/11 tasks (the GPUs would last 4): 12/11 of each type to come.
    # B (2 GPUs, 48 CPUs): 1 place (big), 2 anywhere: need 12/11 - 6/11 = 6/11, times
    # what a B task asks (2000 milli-GPU, or 48000 milli-CPU x 4000 / 96000): 12000/11.
    # 20 CPUs taken on big leave 44 (< 48): B's place goes.
    workload = [*NARROW, job().cpu(32_000).build()]
    cpu_only = job().cpu(20_000).build()
    assert _last_place_charge(workload, cpu_only) == [pytest.approx(12000 / 11), 0.0]
    # A GPU task taking that place runs GPU work on it, and pays nothing here...
    gpu_task = job().gpus(1).cpu(20_000).build()
    assert _last_place_charge(workload, gpu_task) == [0.0, 0.0]
    # ...but does where GPUs run out first (4/3 B tasks to come: need 2/3 x 2000).
    assert _last_place_charge(NARROW, gpu_task) == [pytest.approx(4000 / 3), 0.0]


def test_where_cpu_runs_out_first_cpu_only_types_places_are_not_kept() -> None:
    # D, CPU-only with 60 CPUs, joins NARROW: the average task asks 1000 milli-GPU and
    # 116000/3 milli-CPU, so CPU runs out first after 72/29 tasks, 24/29 of each type.
    # B: 1 place, 2 anywhere: need 12/29, x 2000 = 24000/29. D: 1 place (big), 1.6
    # anywhere: need 9/29, which would be kept too were CPU not what every type needs.
    # 20 CPUs on big take both places; only B's is charged.
    workload = [*NARROW, job().cpu(60_000).build()]
    assert _last_place_charge(workload, job().cpu(20_000).build()) == [
        pytest.approx(24000 / 29),
        0.0,
    ]


def test_mig_types_have_places_that_other_work_can_take() -> None:
    # "mig" has GPU 0 cut into two 3g.40gb instances and GPU 1 whole; "plain" two whole GPUs.
    # Workload: 1 GPU + 4 CPUs, and a 3g.40gb task with 8 CPUs, as often.
    # Free 3000 milli-GPU (MIG GPUs give none) and 48 CPUs: GPUs run out first, after
    # 3000 / 1000 = 3 tasks of the rest, so 3 MIG tasks are to come.
    # MIG places: 2 instances, 24 CPUs hold 3 -> 2, all on "mig"; anywhere, a 3g task
    # counting 428 milli-GPU: min(3000 / 428, 48000 / 8000) = 6. Need 3/2 - 3/6 = 1.
    # A place is worth what the task asks: 8000 milli-CPU x 3000 / 48000 = 500 (> 428).
    # 12 CPUs taken on "mig" leave 12, which hold one task: one place lost.
    state = cluster(
        node("mig").model("A100-80GB").gpus(2).mig("3g.40gb@0,3g.40gb@4", gpu=0).cpu(24_000),
        node("plain").model("A100-80GB").gpus(2).cpu(24_000),
    )
    workload = [job().gpus(1).cpu(4000).build(), job().mig("3g.40gb").cpu(8000).build()]
    ctx = placer().context(state, job().cpu(12_000).build(), Mode.NOW)
    plain = FragmentationGradient(workload, EXACT).score(ctx)
    charge = plain - FragmentationGradient(workload, LAST_PLACES).score(ctx)
    assert charge.tolist() == [pytest.approx(500.0), 0.0]
    # 4 CPUs leave 20, which still hold both: nothing lost.
    ctx = placer().context(state, job().cpu(4000).build(), Mode.NOW)
    plain = FragmentationGradient(workload, EXACT).score(ctx)
    assert (plain - FragmentationGradient(workload, LAST_PLACES).score(ctx)).tolist() == [0, 0]


def test_mig_places_skip_retired_instances_and_removed_nodes() -> None:
    state = cluster(
        node("mig").model("A100-80GB").gpus(2).mig("3g.40gb@0,3g.40gb@4", gpu=0).cpu(24_000),
        node("gone").model("A100-80GB").gpus(1).mig("3g.40gb@0,3g.40gb@4").cpu(24_000),
        node("plain").model("A100-80GB").gpus(2).cpu(24_000),
    )
    state.set_mig_layout("mig", 0, tuple(("1g.10gb", k) for k in range(7)))
    state.remove_node("gone")
    workload = [
        job().gpus(1).cpu(4000).build(),
        job().mig("1g.10gb").cpu(2000).build(),
        job().mig("3g.40gb").cpu(8000).build(),
    ]
    kind = Workload.from_requests(workload, state.models)
    places = LastPlaces(state, kind, FragmentationMeter(state, kind).model, workload)
    places.price()
    assert places.mig is not None
    assert places.mig.nodes.tolist() == [state.index["mig"]]
    # 1g.10gb: 7 instances, 24 CPUs hold 12; 3g.40gb: its instances are retired or gone.
    assert places.mig.copies.tolist() == [[7], [0]]


def test_default_keeps_the_cpu_that_free_mig_instances_need() -> None:
    # A task of 1 GPU and 8 CPUs fits both nodes; on "mig" it would leave 12 CPUs for two
    # free 3g.40gb instances whose tasks ask 8 CPUs each. With MIG work in the workload,
    # default puts it on "plain".
    state = cluster(
        node("mig").model("A100-80GB").gpus(4).mig("3g.40gb@0,3g.40gb@4", gpu=0).cpu(20_000),
        node("plain").model("A100-80GB").gpus(4).cpu(40_000).used(1),
    )
    task = job().gpus(1).cpu(8000).build()
    workload = [task] * 4 + [job().mig("3g.40gb").cpu(8000).build()] * 4
    (placed,) = Placer(placement_profile("default", workload=workload)).place(state, task) or ()
    assert state.nodes[placed.node].name == "plain"


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=25))
def test_places_follow_the_state_as_a_recount_would(picks: list[int]) -> None:
    # Counted incrementally, node by node as the state changes, places must equal a
    # count from scratch and, type by type, how many tasks fit one after another.
    gib = 1024
    workload = [
        job().gpus(1).cpu(8000).memory(32 * gib).build(),
        job().gpus(4).cpu(48_000).memory(256 * gib).build(),
        job().fraction(300).cpu(2000).build(),
        job().cpu(24_000).memory(64 * gib).build(),
    ]
    state = cluster(
        *(node(f"n{i}").gpus(4 + 4 * (i % 2)).cpu(64_000).memory(512 * gib) for i in range(4))
    )
    kind = Workload.from_requests(workload, state.models, memory=True)
    model = FragmentationMeter(state, kind).model
    kept = LastPlaces(state, kind, model)
    for pick in picks:
        r = workload[pick % len(workload)]
        ctx = placer().context(state, r, Mode.NOW)
        if not len(ctx.options):
            continue
        state.allocate(placer().assignment(ctx, pick % len(ctx.options)))
        fresh = LastPlaces(state, kind, model).places()
        assert kept.places().tolist() == fresh.tolist()
        for t, request in enumerate(sorted(workload, key=_type_order)):
            assert fresh[t].tolist() == [_fits_repeatedly(state, i, request) for i in range(4)]


def _type_order(r: Request) -> tuple[int, int, int]:
    # Workload types are sorted by per-GPU milli, then GPUs, then CPU (Workload.from_requests).
    return (r.milli_per_gpu, r.gpu_count, r.cpu_milli)


def _fits_repeatedly(state: ClusterState, i: int, r: Request) -> int:
    free = state.gpu_milli_free[i].tolist()
    cpu, mem, n = int(state.cpu_free[i]), int(state.mem_free[i]), 0
    while cpu >= r.cpu_milli and mem >= r.memory_mib:
        if r.gpu_count:
            slots = [g for g, f in enumerate(free) if f >= r.milli_per_gpu][: r.gpu_count]
            if len(slots) < r.gpu_count:
                break
            for g in slots:
                free[g] -= r.milli_per_gpu
        cpu, mem, n = cpu - r.cpu_milli, mem - r.memory_mib, n + 1
    return n
