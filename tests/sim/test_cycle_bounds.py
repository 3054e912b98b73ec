"""Bounds on a cycle's work and skipped periodic cycles leave replays as they were.

* The golden replays with a queue depth that does not bind give their pinned
  results: the bounded walk is the unbounded one until the bound is reached.
* A cycle the driver skips (the last cycle decided nothing, nothing happened
  since but the clock and arrivals past the queue depth's cut, and the plan
  says the clock alone changes nothing) would have decided nothing: forcing
  every cycle to run gives the same replay.
* So would one before the plan's wake time: multifactor priorities that move
  only every ``calc_period_s`` (with fairshare usage seen anew every
  ``priority_calc_s``), and planned starts the backfill window cut off.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_golden import CASES, GOLDEN, digest

from gpufleet.core.cycle import Plan, SchedulingProfile, _Cycle
from gpufleet.sim.driver import Simulation
from gpufleet.sim.profile import profile_from_dict, replay


@pytest.mark.parametrize(
    "case", ["synthetic-fifo-strict", "synthetic-fairshare-backfill", "openb-preemption"]
)
def test_a_queue_depth_that_does_not_bind_keeps_the_golden_results(case: str) -> None:
    make_nodes, make_jobs, policy = CASES[case]
    jobs = make_jobs()
    ordering = {**policy["ordering"], "queue_depth": len(jobs)}
    result = replay(make_nodes(), jobs, profile_from_dict({**policy, "ordering": ordering}, case))
    want = json.loads((GOLDEN / f"{case}.json").read_text())
    got = digest(result)
    assert got["summary"] == want["summary"]
    assert got["jobs"] == want["jobs"]


def replay_synthetic(backfill: str, depth: int, sim: dict[str, Any]) -> Any:
    make_nodes, make_jobs, policy = CASES["synthetic-fifo-strict"]
    # A window past every time limit, so no planned start is ever cut off by it (a plan
    # that was would mark itself clocked, and the next periodic cycle would run).
    policy = {
        **policy,
        "ordering": {"plugin": "fifo", "queue_depth": depth},
        "backfill": {"mode": backfill, "window_s": 10**7},
        "sim": sim,
    }
    return replay(make_nodes(), make_jobs(), profile_from_dict(policy, backfill))


@pytest.mark.parametrize(
    ("backfill", "depth"),
    # A depth of 5 cuts the queue, so arrivals past it skip their cycle too.
    [("none", 0), ("easy", 0), ("none", 5), ("easy", 5)],
)
@pytest.mark.parametrize("sim", [{"interval_s": 60}, {"interval_s": 60, "min_gap_s": 30}])
def test_skipped_cycles_change_nothing(
    backfill: str, depth: int, sim: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    skipping = replay_synthetic(backfill, depth, sim)
    monkeypatch.setattr(SchedulingProfile, "clocked", lambda self: True)
    every = replay_synthetic(backfill, depth, sim)
    assert skipping.cycles_skipped > 0
    assert every.cycles_skipped == 0
    assert digest(skipping) == digest(every)
    assert skipping.cycles == every.cycles  # a skipped cycle counts as one


@pytest.mark.parametrize(
    "backfill",
    # A one-hour window cuts planned starts off; easy plans one start, conservative many.
    [{"mode": "easy", "window_s": 3600}, {"mode": "conservative", "window_s": 3600}],
)
def test_cycles_skipped_before_the_plan_wakes_change_nothing(
    backfill: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    make_nodes, make_jobs, policy = CASES["synthetic-fairshare-backfill"]
    ordering = {"plugin": "multifactor", "queue_depth": 5, "multifactor": {"calc_period_s": 300}}
    policy = {**policy, "ordering": ordering, "backfill": backfill, "sim": {"interval_s": 60}}
    skipping = replay(make_nodes(), make_jobs(), profile_from_dict(policy, "wakes"))
    monkeypatch.setattr(Simulation, "_holds", lambda self, t: False)
    every = replay(make_nodes(), make_jobs(), profile_from_dict(policy, "wakes"))
    assert skipping.cycles_skipped > 0
    assert every.cycles_skipped == 0
    assert digest(skipping) == digest(every)
    assert skipping.cycles == every.cycles


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_walks_skipped_after_a_settled_plan_change_nothing(
    backfill: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle that only the period's end woke, with the same jobs first in the same order,
    skips its walk (``run_cycle``'s ``settled``): the replay decides as one that walks."""
    make_nodes, make_jobs, policy = CASES["synthetic-fairshare-backfill"]
    ordering = {"plugin": "multifactor", "queue_depth": 5, "multifactor": {"calc_period_s": 300}}
    mode = {"mode": backfill}
    policy = {**policy, "ordering": ordering, "backfill": mode, "sim": {"interval_s": 60}}
    taken: list[bool] = []
    unchanged = _Cycle._unchanged

    def counted(self: _Cycle, settled: Plan) -> bool:
        taken.append(unchanged(self, settled))
        return taken[-1]

    monkeypatch.setattr(_Cycle, "_unchanged", counted)
    skipping = replay(make_nodes(), make_jobs(), profile_from_dict(policy, "settled"))
    skipped = sum(taken)
    monkeypatch.setattr(SchedulingProfile, "clock_moves_only_the_order", lambda self: False)
    walking = replay(make_nodes(), make_jobs(), profile_from_dict(policy, "settled"))
    assert skipped > 0 and sum(taken) == skipped  # the second replay walks every cycle
    assert digest(skipping) == digest(walking)
    # A skipped walk plans no start the backfill window cut off, so it does not wake
    # when one would come within the window: the periodic cycle then is skipped too.
    assert skipping.cycles == walking.cycles
    assert 0 <= skipping.cycles_skipped - walking.cycles_skipped <= 2
