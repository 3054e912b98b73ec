"""The workload window: the requests submitted lately, and how far their mix drifts."""

from __future__ import annotations

import pytest

from builders import job
from gpufleet.core.fragmentation import Workload
from gpufleet.core.workload import TYPICAL, WorkloadWindow, or_typical

A = job().gpus(1).build()
B = job().fraction(500).build()
C = job().gpus(8).build()
M = job().mig("1g.10gb").build()


def test_a_sized_window_keeps_the_last_requests() -> None:
    w = WorkloadWindow(size=3)
    for t, r in enumerate((A, B, C, A)):
        w.submit(r, at=t)
    assert w.requests() == (B, C, A)  # A at t=0 slid out
    assert len(w) == 3
    w.expire(10**9)  # no time span: time alone drops nothing
    assert len(w) == 3


def test_a_timed_window_keeps_what_is_younger_than_its_span() -> None:
    w = WorkloadWindow(seconds=60)
    w.submit(A, at=0)
    w.submit(B, at=30)
    w.submit(C, at=60)  # A is 60 s old now: out
    assert w.requests() == (B, C)
    w.expire(now=89)  # B is 59 s old: kept
    assert w.requests() == (B, C)
    w.expire(now=120)
    assert w.requests() == ()


def test_both_limits_apply_together() -> None:
    w = WorkloadWindow(size=2, seconds=100)
    for t, r in ((0, A), (10, B), (20, C)):
        w.submit(r, at=t)
    assert w.requests() == (B, C)  # size
    w.submit(A, at=115)
    assert w.requests() == (C, A)  # size again: B leaves first
    w.expire(now=125)
    assert w.requests() == (A,)  # C, at 20, is 105 s old


def test_a_clock_stepping_back_does_not_reorder_the_window() -> None:
    w = WorkloadWindow(seconds=10)
    w.submit(A, at=100)
    w.submit(B, at=50)  # counts as submitted at 100
    w.expire(now=109)
    assert w.requests() == (A, B)
    w.expire(now=110)
    assert w.requests() == ()


def test_drift_is_the_total_variation_distance_from_the_marked_mix() -> None:
    w = WorkloadWindow(size=4)
    assert w.drift() == 0.0  # both empty
    w.submit(A, at=0)
    assert w.drift() == 1.0  # something against nothing
    for t, r in enumerate((A, B, B), start=1):
        w.submit(r, at=t)
    assert w.mark() == (A, A, B, B)
    assert w.drift() == 0.0
    w.submit(C, at=4)  # A A B B -> A B B C: A 1/2 -> 1/4, C 0 -> 1/4
    assert w.drift() == pytest.approx(0.25)  # (1/4 + 0 + 1/4) / 2
    for t in range(5, 9):
        w.submit(C, at=t)
    assert w.drift() == 1.0  # C C C C: nothing in common with A A B B
    w.mark()
    assert w.drift() == 0.0


def test_an_empty_window_falls_back_to_typical_requests() -> None:
    w = WorkloadWindow(size=2)
    assert or_typical(w.requests()) == TYPICAL
    w.submit(M, at=0)  # fragmentation leaves MIG requests out
    assert or_typical(w.requests()) == TYPICAL
    w.submit(A, at=1)
    assert or_typical(w.requests()) == (M, A)
    # What a driver hands the placement profile measures as a Workload.
    workload = Workload.from_requests(or_typical(WorkloadWindow(size=1).requests()), ["H100"])
    assert workload.gpus.tolist() == [1, 1, 1, 2, 4, 8]  # two shares, then whole 1..8
    assert workload.milli.tolist() == [250, 500, 1000, 1000, 1000, 1000]


@pytest.mark.parametrize(
    ("limits", "message"),
    [({}, "needs a size, a time span or both"), ({"size": 0}, "size must be at least 1")],
)
def test_limits_are_validated(limits: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkloadWindow(**limits)
    with pytest.raises(ValueError, match="seconds must be at least 1, got -5"):
        WorkloadWindow(size=1, seconds=-5)
