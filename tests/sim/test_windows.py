"""Policy windows in the simulator: the policy switches at the boundaries, and reports mark them."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.sim.metrics import summarize
from gpufleet.sim.profile import ProfileError, profile_from_dict
from sim.test_driver import FIFO, by_id, nodes, run, tj

H = 3600
MONDAY = "2026-03-02T00:00:00Z"  # the trace's time 0: Monday midnight
DAY = {"name": "day", "days": ["weekdays"], "start": "08:00", "end": "20:00"}


def day_policy(policy: dict[str, Any]) -> dict[str, Any]:
    return {**FIFO, "windows": [{**DAY, "policy": policy}]}


@pytest.mark.parametrize(
    ("policy", "jobs", "starts"),
    [
        # by day the partition admits only the interactive account: batch waits for 20:00
        (
            {"partitions": [{"name": "default", "allowed_accounts": ["interactive"]}]},
            [
                tj("batch", 9 * H, 600, account="train"),
                tj("inter", 9 * H, 600, account="interactive"),
            ],
            {"batch": 20 * H, "inter": 9 * H},
        ),
        # by day a user runs one job at a time: the second waits for 20:00, not for the first
        (
            {"qos": [{"name": "normal", "max_jobs_per_user": 1}]},
            [tj("first", 9 * H, 14 * H, user="u"), tj("second", 9 * H, 600, user="u")],
            {"first": 9 * H, "second": 20 * H},
        ),
        # by day the partition is down: nothing starts until 20:00
        (
            {"partitions": [{"name": "default", "state": "down"}]},
            [tj("a", 9 * H, 600), tj("b", 21 * H, 600)],
            {"a": 20 * H, "b": 21 * H},
        ),
        # a window that changes nothing the jobs need: both start on arrival
        (
            {"qos": [{"name": "normal", "max_jobs_per_user": 5}]},
            [tj("first", 9 * H, 14 * H, user="u"), tj("second", 9 * H, 600, user="u")],
            {"first": 9 * H, "second": 9 * H},
        ),
        # at night the window is closed: the limit does not apply
        (
            {"qos": [{"name": "normal", "max_jobs_per_user": 1}]},
            [tj("first", 21 * H, 600, user="u"), tj("second", 21 * H, 600, user="u")],
            {"first": 21 * H, "second": 21 * H},
        ),
    ],
)
def test_a_window_overrides_the_policy_while_open(
    policy: dict[str, Any], jobs: list[Any], starts: dict[str, int]
) -> None:
    result = run(nodes(2), jobs, day_policy(policy), time_origin=MONDAY)
    assert {k: r.first_start for k, r in by_id(result).items()} == starts


def test_the_result_marks_each_switch() -> None:
    jobs = [tj("a", 9 * H, 12 * H), tj("b", 30 * H, 600)]  # Monday 09:00; Tuesday 06:00
    result = run(nodes(1), jobs, day_policy({"backfill": {"mode": "easy"}}), time_origin=MONDAY)
    # from the first event (Mon 09:00, open) to the last end (Tue 06:10)
    assert result.windows == [(9 * H, ("day",)), (20 * H, ())]
    assert summarize(result)["windows"] == [
        {"at": 9 * H, "open": ["day"]},
        {"at": 20 * H, "open": []},
    ]


def test_epoch_traces_run_on_their_own_clock() -> None:
    monday = 1_772_409_600  # 2026-03-02T00:00:00Z
    jobs = [tj("a", monday + 9 * H, 600, user="u"), tj("b", monday + 9 * H, 600, user="u")]
    policy = day_policy({"qos": [{"name": "normal", "max_jobs_per_user": 1}]})
    result = run(nodes(2), jobs, policy, time_origin="epoch")
    # a ends at 09:10, so b starts then: one job at a time by day
    assert by_id(result)["b"].first_start == monday + 9 * H + 600
    assert result.windows == [(monday + 9 * H, ("day",))]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (day_policy({}), "sim.time_origin: windows need the trace's time origin"),
        ({**day_policy({}), "sim": {"time_origin": "monday"}}, "sim.time_origin: must be"),
        (
            {
                **day_policy({"qos": [{"name": "normal", "max_jobs_per_user": -1}]}),
                "sim": {"time_origin": "epoch"},
            },
            "windows.day.policy.qos.normal.max_jobs_per_user",
        ),
        (
            {**FIFO, "windows": [{**DAY, "tz": "Mars/Olympus"}], "sim": {"time_origin": "epoch"}},
            "windows.day.tz: unknown time zone",
        ),
    ],
)
def test_bad_windows_are_refused_at_load(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        profile_from_dict(data, "p")
