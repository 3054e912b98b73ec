"""The TraceJob record and the whole-node gang rule every GPU-count loader shares."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.core.model import InvalidSpec, Request
from gpufleet.sim.traces.record import TraceJob, by_submit, whole_gpus

ONE_GPU = Request(gpus=1)


def job(**overrides: Any) -> TraceJob:
    spec: dict[str, Any] = {"id": "j", "submit_time": 0, "duration_s": 10, "request": ONE_GPU}
    return TraceJob(**(spec | overrides))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"id": ""}, "id"),
        ({"submit_time": -1}, "submit_time"),
        ({"duration_s": -5}, "duration_s"),
        ({"time_limit_s": 0}, "time_limit_s"),
        ({"checkpoint_interval_s": -60}, "checkpoint_interval_s"),
        ({"priority_class": "urgent"}, "priority_class"),
    ],
)
def test_trace_job_rejects(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        job(**overrides)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("labels", "failed"),
    [
        ({"status": "Failed"}, True),  # the generator's failed runs, PAI's status
        ({"state": "Failed"}, True),  # Philly's and Helios' state column
        ({"status": "FAILED"}, True),  # sacct's State
        ({"status": "OUT_OF_MEMORY"}, True),
        ({"status": "NODE_FAIL"}, True),
        ({"status": "COMPLETED"}, False),
        ({"status": "CANCELLED"}, False),  # stopped by someone, not a failure of the run
        ({"status": "TIMEOUT"}, False),
        ({"state": "Pass"}, False),
        ({"state": "Killed"}, False),
        ({}, False),
    ],
)
def test_a_failed_run_by_its_status(labels: dict[str, str], failed: bool) -> None:
    assert job(labels=labels).failed is failed


def test_trace_job_defaults_and_gpu_seconds() -> None:
    gang = job(request=Request(gpus=8, nodes=2), duration_s=100)
    # 8 GPUs x 2 nodes x 100 s
    assert gang.gpu_seconds == 1600
    # 250 milli-GPU x 40 s = 10 GPU-seconds
    assert job(request=Request(gpu_milli=250), duration_s=40).gpu_seconds == 10
    assert (gang.time_limit_s, gang.preemptible, gang.priority_class) == (None, False, "normal")


@pytest.mark.parametrize(
    ("gpus", "per_node", "expected"),
    [
        (1, 8, (1, 1)),  # fits one node
        (8, 8, (8, 1)),  # exactly one node
        (9, 8, (8, 2)),  # ceil(9 / 8) = 2 whole nodes
        (16, 8, (8, 2)),  # 16 / 8 = 2
        (20, 4, (4, 5)),  # 20 / 4 = 5
    ],
)
def test_whole_gpus(gpus: int, per_node: int, expected: tuple[int, int]) -> None:
    request = whole_gpus(gpus, per_node, cpu_milli=1000, memory_mib=64)
    assert (request.gpus, request.nodes) == expected
    assert (request.cpu_milli, request.memory_mib) == (1000, 64)


def test_whole_gpus_needs_a_node_size() -> None:
    with pytest.raises(InvalidSpec, match="gpus_per_node"):
        whole_gpus(4, 0)


def test_by_submit_is_stable() -> None:
    jobs = [job(id="late", submit_time=9), job(id="a", submit_time=1), job(id="b", submit_time=1)]
    assert [j.id for j in by_submit(jobs)] == ["a", "b", "late"]
