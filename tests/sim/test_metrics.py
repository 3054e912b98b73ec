"""Replay metrics: Jain's index, shares against entitlements, per-group numbers, CSV tables."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from builders import node
from gpufleet.core.model import Request
from gpufleet.sim.driver import SimResult
from gpufleet.sim.metrics import (
    GROUP_COLUMNS,
    JOB_COLUMNS,
    account_shares,
    by_group,
    jain,
    summarize,
    write_tables,
)
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces.record import TraceJob


@pytest.mark.parametrize(
    ("shares", "entitlements", "expected"),
    [
        ([0.5, 0.5], [0.5, 0.5], 1.0),  # everyone got exactly their entitlement
        ([1.0, 0.0], [0.5, 0.5], 0.5),  # x = (2, 0): 2^2 / (2 x 4) = 1/2 = 1/n
        ([0.6, 0.4], [0.5, 0.5], 100 / 104),  # x = (1.2, 0.8): 4 / (2 x 2.08)
        ([2 / 3, 1 / 3], [2 / 3, 1 / 3], 1.0),  # unequal shares, each met
        ([0.7], [1.0], 1.0),  # a single account is trivially fair
    ],
)
def test_jain_index(shares: list[float], entitlements: list[float], expected: float) -> None:
    assert jain(shares, entitlements) == pytest.approx(expected)


def tj(job_id: str, account: str, submit: int, duration: int) -> TraceJob:
    return TraceJob(
        id=job_id,
        submit_time=submit,
        duration_s=duration,
        request=Request(gpus=1, cpu_milli=1000),
        user=f"u-{account}",
        account=account,
    )


@pytest.fixture(scope="module")
def result() -> SimResult:
    # One GPU; fifo. big: a 0..30, b 30..40 (waits 30), c (account small) 40..50 (waits 38).
    jobs = [tj("a", "big", 0, 30), tj("b", "big", 0, 10), tj("c", "small", 2, 10)]
    policy = {
        "ordering": {"plugin": "fifo"},
        "placement": {"plugin": "first-fit"},
        "accounts": [{"name": "big", "shares": 3}, {"name": "small", "shares": 1}],
    }
    return replay([node("n0").gpus(1).build()], jobs, profile_from_dict(policy, "t"))


def test_shares_and_entitlements(result: SimResult) -> None:
    shares = account_shares(result)
    # big used 40 of 50 GPU-seconds against 3 of 4 shares; small 10 of 50 against 1 of 4.
    assert shares["big"] == pytest.approx((0.8, 0.75))
    assert shares["small"] == pytest.approx((0.2, 0.25))


def test_jain_while_jobs_wait(result: SimResult) -> None:
    # Samples with a queue: t=0 (b waits; only big is active: 1), t=2 and t=30 (c
    # waits; big holds the GPU: x = (1 / 0.75, 0) -> 1/2). At 40 nobody waits.
    assert summarize(result)["jain_fairness"] == pytest.approx((1 + 0.5 + 0.5) / 3)


def test_per_account_metrics(result: SimResult) -> None:
    groups = by_group(result, "account")
    # big: JCTs 30 and 40, waits 0 and 30; small: JCT 50 - 2 = 48, wait 38.
    assert groups["big"]["jct_mean_s"] == 35
    assert groups["big"]["queue_mean_s"] == 15
    assert groups["small"]["jct_p50_s"] == 48
    assert groups["small"]["queue_mean_s"] == 38
    assert groups["small"]["gpu_hours"] == pytest.approx(10 / 3600)
    assert set(by_group(result, "user")) == {"u-big", "u-small"}


def test_unknown_group_is_refused(result: SimResult) -> None:
    with pytest.raises(ValueError, match="group: must be one of"):
        by_group(result, "colour")


def test_deadlines(result: SimResult) -> None:
    # Deadline submit + 2 x runtime: a 30 <= 60 yes; b 40 <= 20 no; c 50 <= 22 no.
    assert summarize(result)["deadlines_met_pct"] == pytest.approx(100 / 3)
    # With a factor of 5: b 40 <= 50 yes, c 50 <= 52 yes.
    assert summarize(result, deadline_factor=5)["deadlines_met_pct"] == 100


def test_tables_hold_every_job_and_group(result: SimResult, tmp_path: Path) -> None:
    paths = write_tables(tmp_path, result)
    assert [p.name for p in paths] == ["jobs.csv", "series.csv", "groups.csv"]
    with (tmp_path / "jobs.csv").open() as handle:
        jobs = list(csv.DictReader(handle))
    assert tuple(jobs[0]) == JOB_COLUMNS
    assert {row["id"]: row["jct"] for row in jobs} == {"a": "30", "b": "40", "c": "48"}
    with (tmp_path / "groups.csv").open() as handle:
        groups = list(csv.DictReader(handle))
    assert tuple(groups[0])[2:] == GROUP_COLUMNS
    # 2 users + 2 accounts + 1 QoS + 1 partition
    assert len(groups) == 6
    with (tmp_path / "series.csv").open() as handle:
        series = list(csv.DictReader(handle))
    assert float(series[-1]["alloc_pct"]) == 0.0  # the last sample is after every end


def test_allocation_over_the_busy_period() -> None:
    # One GPU: a runs 0..10, then nothing until b arrives at 90 and runs 90..100.
    # The makespan (100 s) is 80% idle gap; the busy period is 20 s, all of it allocated.
    jobs = [tj("a", "big", 0, 10), tj("b", "big", 90, 10)]
    policy = {"ordering": {"plugin": "fifo"}, "placement": {"plugin": "first-fit"}}
    s = summarize(replay([node("n0").gpus(1).build()], jobs, profile_from_dict(policy, "t")))
    assert s["gpu_alloc_mean_pct"] == pytest.approx(20.0)
    assert s["busy_s"] == 20
    assert s["gpu_alloc_busy_pct"] == pytest.approx(100.0)


def test_overlapping_waits_count_once_in_the_busy_period(result: SimResult) -> None:
    # a, b, c overlap from 0 to 50 on one GPU, always allocated: busy 50 s, 100%.
    s = summarize(result)
    assert s["busy_s"] == 50
    assert s["gpu_alloc_busy_pct"] == pytest.approx(100.0)


def test_no_busy_period_without_a_schedulable_job() -> None:
    jobs = [TraceJob(id="x", submit_time=0, duration_s=10, request=Request(gpus=4))]
    policy = {"ordering": {"plugin": "fifo"}, "placement": {"plugin": "first-fit"}}
    s = summarize(replay([node("n0").gpus(1).build()], jobs, profile_from_dict(policy, "t")))
    assert s["busy_s"] == 0
    assert s["gpu_alloc_busy_pct"] is None
