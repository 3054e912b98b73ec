"""The columnar cluster state: its layout, allocate/release and change counters."""

from __future__ import annotations

import numpy as np
import pytest

from builders import cluster, node
from gpufleet.core.model import InvalidSpec, Node
from gpufleet.core.state import Assignment, ClusterState, OverAllocation


def test_columns_pad_short_nodes() -> None:
    state = cluster(node("a").gpus(3), node("b").gpus(1), node("c"))
    # 3 nodes x 3 GPU columns; b has 1 real GPU, c none.
    assert state.gpu_exists.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert state.gpu_milli_total.tolist() == [[1000] * 3, [1000, 0, 0], [0] * 3]
    assert state.gpu_milli_capacity == 4000  # 4 real GPUs
    assert state.index == {"a": 0, "b": 1, "c": 2}
    assert state.healthy.all()


def test_models_are_numbered_in_sorted_order() -> None:
    state = cluster(node("v").model("V100M32").gpus(1), node("a").model("A100-80GB").gpus(1))
    assert state.models == ["A100-80GB", "V100M32"]
    assert state.gpu_model[:, 0].tolist() == [1, 0]
    assert state.gpu_mem_total[:, 0].tolist() == [32 * 1024, 80 * 1024]


def test_an_empty_cluster_is_valid() -> None:
    state = ClusterState([])
    assert state.num_nodes == 0
    assert state.gpu_milli_capacity == 0


def test_duplicate_node_names_are_rejected() -> None:
    with pytest.raises(InvalidSpec) as err:
        ClusterState([Node("a", 1000, 1024), Node("b", 1000, 1024), Node("a", 1000, 1024)])
    assert err.value.field == "node.name"
    assert "'a' appears twice" in str(err.value)


def test_allocate_and_release_touch_only_what_is_named() -> None:
    state = cluster(node("a").gpus(2), node("b").gpus(2))
    a = Assignment(node=1, gpus=(1,), gpu_milli=250, gpu_memory_mib=4096, cpu_milli=1500)
    state.allocate(a)
    # b's GPU 1: 1000 - 250 = 750 milli, 81920 - 4096 = 77824 MiB; CPU 64000 - 1500.
    assert state.gpu_milli_free.tolist() == [[1000, 1000], [1000, 750]]
    assert state.gpu_mem_free[1].tolist() == [81920, 77824]
    assert state.cpu_free.tolist() == [64_000, 62_500]
    assert state.gpu_milli_allocated == 250
    assert state.version.tolist() == [0, 1]
    state.release(a)
    assert state.gpu_milli_free.tolist() == [[1000, 1000], [1000, 1000]]
    assert state.gpu_mem_free[1].tolist() == [81920, 81920]
    assert state.gpu_milli_allocated == 0
    assert state.version.tolist() == [0, 2]  # release is a change too


def test_whole_gpus_take_all_milli_and_leave_memory_books_alone() -> None:
    state = cluster(node("a").gpus(2))
    state.allocate(Assignment(node=0, gpus=(0, 1), gpu_milli=1000))
    assert state.gpu_milli_free.tolist() == [[0, 0]]
    assert state.gpu_mem_free.tolist() == [[81920, 81920]]


@pytest.mark.parametrize(
    "bad",
    [
        Assignment(node=0, gpus=(0,), gpu_milli=401),  # 400 left on GPU 0
        Assignment(node=0, gpus=(0,), gpu_milli=1, gpu_memory_mib=80 * 1024 - 1023),  # 1 GiB left
        Assignment(node=0, gpus=(1, 1), gpu_milli=500),  # the same GPU twice
        Assignment(node=0, gpus=(2,), gpu_milli=1),  # padding: node a has GPUs 0 and 1 only
        Assignment(node=0, cpu_milli=64_001),
        Assignment(node=0, cpu_milli=1, memory_mib=512 * 1024 + 1),
        Assignment(node=1, mig=(0,)),  # instance 0 is taken
        Assignment(node=0, mig=(1,)),  # instance 1 lives on node b
    ],
)
def test_over_allocation_changes_nothing(bad: Assignment) -> None:
    state = cluster(
        node("a").gpus(2).share(0, 600, 1024),
        node("b").gpus(1).mig("3g.40gb@0,3g.40gb@4").mig_used("3g.40gb"),
        node("c").gpus(3),  # widens the grid to 3 columns
    )
    before = {k: v.copy() for k, v in vars(state).items() if isinstance(v, np.ndarray)}
    with pytest.raises(OverAllocation, match="does not fit on"):
        state.allocate(bad)
    for k, v in before.items():
        assert np.array_equal(v, getattr(state, k)), k
