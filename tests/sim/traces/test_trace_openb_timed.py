"""openb timed replay: lifetimes become durations, qos becomes priority."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.openb_timed import load_openb_timed

Corrupt = Callable[[str, int, str, str], Path]


def test_times_and_qos(fixture: Callable[[str], Path]) -> None:
    jobs = load_openb_timed(fixture("openb_pods.csv"))
    # pod-e is deleted (35) before it was created (40): skipped.
    rows = [(j.id, j.submit_time, j.duration_s, j.priority_class, j.preemptible) for j in jobs]
    assert rows == [
        ("pod-a", 0, 100, "high", False),  # LS: 100 - 0
        ("pod-f", 5, 50, "high", False),  # LS: 55 - 5
        ("pod-b", 10, 60, "low", True),  # BE: 70 - 10
        ("pod-c", 20, 500, "normal", False),  # Burstable: 520 - 20
        ("pod-d", 30, 0, "high", False),  # Guaranteed: deleted when created
    ]


def test_requests_come_from_the_pod_list(fixture: Callable[[str], Path]) -> None:
    jobs = {j.id: j for j in load_openb_timed(fixture("openb_pods.csv"))}
    shared = jobs["pod-b"].request
    assert (shared.gpu_milli, shared.gpu_models) == (460, frozenset({"V100M16", "G2"}))
    assert (jobs["pod-c"].request.gpus, jobs["pod-c"].qos) == (8, "Burstable")
    assert jobs["pod-f"].request.gpu_count == 0  # a CPU-only pod


@pytest.mark.parametrize(
    ("line", "old", "new", "field", "reason"),
    [
        (3, ",BE,", ",Spot,", "qos", "unknown qos 'Spot' (known: LS, Guaranteed, Burstable, BE)"),
        (4, ",20,520,", ",20,x,", "deletion_time", "'x' is not a number"),
        (2, "12000,", "-1,", "cpu_milli", "must not be negative, got -1"),
        (1, "deletion_time", "deleted", "deletion_time", "column missing from the header"),
    ],
)
def test_malformed_row_names_row_and_field(
    corrupt: Corrupt, line: int, old: str, new: str, field: str, reason: str
) -> None:
    path = corrupt("openb_pods.csv", line, old, new)
    with pytest.raises(TraceError) as err:
        load_openb_timed(path)
    assert str(err.value) == f"{path}, row {line}: {field}: {reason}"
