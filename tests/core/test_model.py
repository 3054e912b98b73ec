"""Validation of GPUs, nodes and requests: every impossible spec names its field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.core.model import GPU, MILLI, InvalidSpec, Node, Request

A100 = GPU(index=0, model="A100-80GB", memory_mib=80 * 1024)


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({"index": -1}, "gpu.index", "zero or more, got -1"),
        ({"memory_mib": -1}, "gpu.memory_mib", "got -1"),
        ({"memory_mib": 0}, "gpu.memory_mib", "more than zero, got 0"),
        ({"model": ""}, "gpu.model", "must not be empty"),
        ({"numa": -1}, "gpu.numa", "zero or more, got -1"),
        ({"nvlink_domain": 2**40 + 1}, "gpu.nvlink_domain", "at most 1099511627776"),
    ],
)
def test_gpu_rejects(kwargs: dict[str, Any], field: str, fragment: str) -> None:
    spec: dict[str, Any] = {"index": 0, "model": "A100-80GB", "memory_mib": 1024} | kwargs
    with pytest.raises(InvalidSpec) as err:
        GPU(**spec)
    assert err.value.field == field
    assert fragment in err.value.reason
    assert str(err.value) == f"{field}: {err.value.reason}"


def test_gpu_index_zero_is_valid() -> None:
    assert GPU(index=0, model="T4", memory_mib=16 * 1024).index == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "node.name"),
        ({"cpu_milli": -1}, "node.cpu_milli"),
        ({"memory_mib": -1}, "node.memory_mib"),
        # Sums over nodes must fit the core's 64-bit integers.
        ({"cpu_milli": 2**40 + 1}, "node.cpu_milli"),
        ({"gpus": tuple(GPU(i, "T4", 1024) for i in range(1025))}, "node.gpus"),
        # GPU positions must match their indices: a node of [gpu0, gpu0].
        ({"gpus": (A100, A100)}, "node.gpus"),
        # A node whose only GPU claims index 1 leaves a hole at 0.
        ({"gpus": (GPU(index=1, model="T4", memory_mib=1024),)}, "node.gpus"),
    ],
)
def test_node_rejects(kwargs: dict[str, Any], field: str) -> None:
    spec: dict[str, Any] = {"name": "n1", "cpu_milli": 1000, "memory_mib": 1024} | kwargs
    with pytest.raises(InvalidSpec) as err:
        Node(**spec)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_node_gpu_model_is_the_first_gpus_and_empty_for_cpu_only() -> None:
    assert Node("gpu", 1000, 1024, gpus=(A100,)).gpu_model == "A100-80GB"
    assert Node("cpu", 1000, 1024).gpu_model == ""


@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({"cpu_milli": -1}, "request.cpu_milli", "got -1"),
        ({"memory_mib": -5}, "request.memory_mib", "got -5"),
        ({"gpus": -1}, "request.gpus", "got -1"),
        ({"gpu_memory_mib": -1, "gpu_milli": 500}, "request.gpu_memory_mib", "got -1"),
        ({"min_gpu_memory_mib": -1}, "request.min_gpu_memory_mib", "got -1"),
        ({"nodes": 0}, "request.nodes", "more than zero, got 0"),
        ({"nodes": -2}, "request.nodes", "more than zero, got -2"),
        ({"memory_mib": 2**40 + 1, "cpu_milli": 1}, "request.memory_mib", "at most"),
        # A fraction is strictly between none and one whole GPU.
        ({"gpu_milli": MILLI}, "request.gpu_milli", "1..999 milli, got 1000"),
        ({"gpu_milli": 1500}, "request.gpu_milli", "1..999 milli, got 1500"),
        ({"gpu_milli": -1}, "request.gpu_milli", "1..999 milli, got -1"),
        ({"gpus": 1, "gpu_milli": 500}, "request.gpu_milli", "not both"),
        ({"mig_profile": "1g.10gb"}, "request.mig_count", "more than zero, got 0"),
        ({"mig_profile": "1g.10gb", "mig_count": -1}, "request.mig_count", "got -1"),
        ({"mig_count": 2}, "request.mig_count", "without request.mig_profile"),
        ({"mig_profile": "1g.10gb", "mig_count": 1, "gpus": 1}, "request.mig_profile", "no other"),
        (
            {"mig_profile": "1g.10gb", "mig_count": 1, "gpu_milli": 100},
            "request.mig_profile",
            "no other",
        ),
        ({"gpus": 2, "gpu_memory_mib": 1024}, "request.gpu_memory_mib", "fractional"),
        ({"cpu_milli": 1000, "gpu_memory_mib": 1024}, "request.gpu_memory_mib", "fractional"),
        ({}, "request", "asks for nothing"),
        ({"memory_mib": 1024}, "request", "asks for nothing"),
    ],
)
def test_request_rejects(kwargs: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        Request(**kwargs)
    assert err.value.field == field
    assert fragment in err.value.reason
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "gpu_count", "milli_per_gpu", "total"),
    [
        ({"cpu_milli": 500}, 0, 0, 0),  # CPU-only touches no GPU
        ({"gpus": 4}, 4, MILLI, 4000),  # 4 whole GPUs x 1000
        ({"gpus": 4, "nodes": 2}, 4, MILLI, 8000),  # 4 x 1000 on each of 2 nodes
        ({"gpu_milli": 1}, 1, 1, 1),  # the smallest fraction
        ({"gpu_milli": 999, "gpu_memory_mib": 2048}, 1, 999, 999),  # the largest
        ({"gpu_milli": 250, "nodes": 3}, 1, 250, 750),  # 250 on one GPU of 3 nodes
        ({"mig_profile": "1g.10gb", "mig_count": 2}, 0, 0, 0),  # MIG slices are not milli-GPU
    ],
)
def test_request_shapes(
    kwargs: dict[str, Any], gpu_count: int, milli_per_gpu: int, total: int
) -> None:
    r = Request(**kwargs)
    assert (r.gpu_count, r.milli_per_gpu, r.total_gpu_milli) == (gpu_count, milli_per_gpu, total)


def test_values_are_immutable() -> None:
    r = Request(gpus=1)
    with pytest.raises(AttributeError):
        r.gpus = 2  # type: ignore[misc]


SIZES = st.integers(-2, 3) | st.sampled_from((0, 1, 500, 999, 1000, 1001))


@given(
    cpu=SIZES,
    memory=SIZES,
    gpus=SIZES,
    milli=SIZES,
    gpu_memory=SIZES,
    profile=st.sampled_from(("", "1g.10gb")),
    count=SIZES,
    nodes=SIZES,
)
def test_a_request_is_built_exactly_when_it_has_one_shape(
    cpu: int,
    memory: int,
    gpus: int,
    milli: int,
    gpu_memory: int,
    profile: str,
    count: int,
    nodes: int,
) -> None:
    # The documented contract, restated: non-negative sizes, at least one node,
    # at most one GPU shape (whole, a 1..999 fraction, or MIG with a count),
    # GPU memory only with a fraction, and something asked for.
    valid = (
        min(cpu, memory, gpus, gpu_memory) >= 0
        and nodes >= 1
        and 0 <= milli < MILLI
        and (gpus > 0) + (milli > 0) + bool(profile) <= 1
        and (count >= 1 if profile else count == 0)
        and (gpu_memory == 0 or milli > 0)
        and (cpu > 0 or gpus > 0 or milli > 0 or bool(profile))
    )
    fields = {
        "cpu_milli": cpu,
        "memory_mib": memory,
        "gpus": gpus,
        "gpu_milli": milli,
        "gpu_memory_mib": gpu_memory,
        "mig_profile": profile,
        "mig_count": count,
        "nodes": nodes,
    }
    try:
        Request(**fields)  # type: ignore[arg-type]
    except InvalidSpec as err:
        assert not valid, f"valid request rejected: {err}"
        assert err.field.startswith("request")
    else:
        assert valid, "invalid request accepted"
