"""Changing the cluster's shape in place: nodes joining and leaving, MIG re-layouts."""

from __future__ import annotations

import numpy as np
import pytest

from builders import cluster, job, node
from gpufleet.core.constraints import idle_nodes
from gpufleet.core.fragmentation import FragmentationMeter, Workload
from gpufleet.core.model import MILLI, InvalidSpec
from gpufleet.core.placement import Placer
from gpufleet.core.state import Assignment, ClusterState, NotIdle, OverAllocation
from gpufleet.policies.registry import placement_profile

ONE_GPU = job().cpu(1000).gpus(1).build()


def test_add_node_appends_a_row_and_widens_the_gpu_grid() -> None:
    state = cluster(node("a").gpus(2))
    assert state.add_node(node("b").gpus(4).build()) == 1
    # a's two GPUs now sit in a grid four wide; the padding holds no capacity.
    assert state.gpu_exists.tolist() == [[True, True, False, False], [True] * 4]
    assert state.gpu_milli_total.tolist() == [[1000, 1000, 0, 0], [1000] * 4]
    assert state.gpu_free_sum.tolist() == [2000, 4000]
    assert state.gpu_model.tolist() == [[0, 0, -1, -1], [0] * 4]
    assert state.index == {"a": 0, "b": 1}
    assert state.healthy.tolist() == [True, True]
    assert (state.version.tolist(), state.epoch) == ([0, 0], 1)


def test_a_new_model_is_numbered_in_sorted_order() -> None:
    state = cluster(node("v").model("V100M32").gpus(1))
    state.add_node(node("a").model("A100-80GB").gpus(1).build())
    # A100 sorts before V100: v's GPU is renumbered from 0 to 1.
    assert state.models == ["A100-80GB", "V100M32"]
    assert state.gpu_model[:, 0].tolist() == [1, 0]
    placed = Placer(placement_profile("first-fit")).place(
        state, job().gpus(1).models("V100M32").build()
    )
    assert placed == [Assignment(node=0, gpus=(0,), gpu_milli=MILLI)]


def test_add_node_refuses_a_live_name_and_a_bad_layout() -> None:
    state = cluster(node("a").gpus(1))
    with pytest.raises(InvalidSpec, match="'a' is already in the cluster"):
        state.add_node(node("a").build())
    bad = node("b").gpus(1).build()
    bad_gpu = bad.gpus[0].__class__(index=0, model="A100-80GB", memory_mib=1, mig=(("7g.80gb", 1),))
    with pytest.raises(InvalidSpec, match="cannot start at slot 1"):
        state.add_node(bad.__class__("b", 1000, 1024, gpus=(bad_gpu,)))
    assert (state.num_nodes, state.epoch) == (1, 0)


def test_remove_node_leaves_a_tombstone_that_nothing_reuses() -> None:
    state = cluster(node("a").gpus(2), node("b").gpus(2).mig("7g.80gb@0"), node("c").gpus(2))
    state.remove_node("b")
    assert state.removed.tolist() == [False, True, False]
    assert state.healthy.tolist() == [True, False, True]
    assert state.cpu_total[1] == state.gpu_free_sum[1] == 0
    assert not state.gpu_exists[1].any()
    assert state.mig_profile.tolist() == [-1, -1]  # b's instances are retired
    with pytest.raises(OverAllocation):  # an assignment made before cannot land
        state.allocate(Assignment(node=1, mig=(0,)))
    assert state.index == {"a": 0, "c": 2}
    assert (state.version.tolist(), state.epoch) == ([0, 1, 0], 1)
    assert state.live_nodes() == [state.nodes[0], state.nodes[2]]
    # b comes back as a new row; its old index stays a tombstone.
    assert state.add_node(node("b").gpus(1).build()) == 3
    assert state.removed.tolist() == [False, True, False, False]
    with pytest.raises(KeyError):
        state.remove_node(1)


def test_only_an_idle_node_is_removed() -> None:
    state = cluster(node("a").gpus(2).cpu_used(1000), node("b").gpus(1).share(0, 300))
    state.add_node(node("m").gpus(1).mig("7g.80gb@0").mig_used("7g.80gb").build())
    for name in ("a", "b"):
        with pytest.raises(NotIdle, match=f"{name} still runs tasks"):
            state.remove_node(name)
    m = node("m").gpus(1).mig("7g.80gb@0").mig_used("7g.80gb")
    for a in m.load(state, 2):
        state.allocate(a)
    with pytest.raises(NotIdle):
        state.remove_node(2)
    assert not state.removed.any() and state.epoch == 1


def test_set_mig_layout_retires_old_instances_and_appends_new_ones() -> None:
    state = cluster(node("a").gpus(2).mig("3g.40gb@0,3g.40gb@4", gpu=0).mig("7g.80gb@0", gpu=1))
    state.set_mig_layout("a", 0, (("1g.10gb", 0), ("1g.10gb", 1)))
    # Instances 0, 1 (GPU 0's 3g) retired; 2 (GPU 1's 7g) stays; 3, 4 are new.
    profiles = [state.mig_profiles[p] if p >= 0 else "-" for p in state.mig_profile]
    assert profiles == ["-", "-", "7g.80gb", "1g.10gb", "1g.10gb"]
    assert state.mig_free.all()  # retired instances are held by nothing
    with pytest.raises(OverAllocation):
        state.allocate(Assignment(node=0, mig=(0,)))
    assert idle_nodes(state).tolist() == [True]  # an exclusive job may still take a
    assert state.mig_memory.tolist() == [0, 0, 80 * 1024, 10 * 1024, 10 * 1024]
    assert state.nodes[0].gpus[0].mig == (("1g.10gb", 0), ("1g.10gb", 1))
    # MIG off: the GPU gives its 1000 milli and its memory to other requests.
    state.set_mig_layout(0, 1, None)
    assert state.gpu_milli_total[0].tolist() == [0, 1000]
    assert state.gpu_milli_free[0].tolist() == [0, 1000]
    assert state.gpu_mem_free[0].tolist() == [0, 80 * 1024]
    assert state.gpu_free_sum[0] == state.gpu_milli_total_sum[0] == 1000
    assert (state.version[0], state.epoch) == (2, 2)


def test_a_relayout_needs_an_idle_gpu_and_a_valid_layout() -> None:
    # Both GPUs of a hold one 1g.10gb; GPU 0's is in use.
    state = cluster(node("a").gpus(2).mig("1g.10gb@0").mig_used("1g.10gb"), node("v").gpus(1))
    before = arrays(state)
    with pytest.raises(NotIdle, match="GPU 0 of a is in use"):
        state.set_mig_layout("a", 0, None)
    with pytest.raises(InvalidSpec, match="overlaps"):
        state.set_mig_layout("a", 1, (("2g.20gb", 0), ("1g.10gb", 1)))
    with pytest.raises(InvalidSpec, match="a has no GPU 2"):
        state.set_mig_layout("a", 2, None)
    with pytest.raises(KeyError):
        state.set_mig_layout("b", 0, None)
    v100 = cluster(node("v").model("V100M32").gpus(1))
    with pytest.raises(InvalidSpec, match="does not support MIG"):
        v100.set_mig_layout("v", 0, ())
    after = arrays(state)
    assert all(np.array_equal(before[k], after[k]) for k in before) and state.epoch == 0
    state.set_mig_layout("a", 1, None)  # GPU 1 is idle
    assert state.mig_profile.tolist() == [0, -1]


def arrays(state: ClusterState) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in vars(state).items() if isinstance(v, np.ndarray)}


def test_mig_instances_go_by_gpu_then_slot_whatever_their_indices() -> None:
    state = cluster(node("a").gpus(2).mig("1g.10gb@0", gpu=0).mig("1g.10gb@6", gpu=1))
    state.set_mig_layout("a", 0, (("1g.10gb", 3), ("1g.10gb", 2)))
    # Free 1g.10gb instances: 1 (GPU 1 @6), 2 (GPU 0 @3), 3 (GPU 0 @2).
    placed = Placer(placement_profile("first-fit")).place(state, job().mig("1g.10gb", 2).build())
    assert placed == [Assignment(node=0, mig=(3, 2))]  # GPU 0 @2, then GPU 0 @3


def test_cached_placement_facts_follow_the_shape() -> None:
    # fgd, default (share packing + fgd + topology) and topology keep per-state
    # caches; after a node joins they must see it.
    for policy in ("fgd", "default", "topology"):
        state = cluster(node("a").gpus(1).used(1))
        p = Placer(placement_profile(policy, workload=[ONE_GPU]))
        assert p.place(state, ONE_GPU) is None
        state.add_node(node("b").gpus(2).build())
        assert p.place(state, ONE_GPU) == [
            Assignment(node=1, gpus=(0,), gpu_milli=MILLI, cpu_milli=1000)
        ], policy


def test_a_meter_refuses_a_state_of_another_shape() -> None:
    state = cluster(node("a").gpus(1))
    meter = FragmentationMeter(state, Workload.from_requests([ONE_GPU], state.models))
    assert meter.per_node().tolist() == [0.0]
    state.add_node(node("b").gpus(1).build())
    with pytest.raises(RuntimeError, match="changed shape"):
        meter.per_node()


def test_an_empty_state_grows() -> None:
    state = ClusterState([])
    state.add_node(node("a").gpus(1).mig("7g.80gb@0").build())
    assert state.gpu_exists.shape == (1, 1)
    assert state.mig_profiles == ["7g.80gb"] and state.mig_node.tolist() == [0]
