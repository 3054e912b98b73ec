"""Backfill scenarios: holds, early starts that delay nobody, EASY versus conservative."""

from __future__ import annotations

from typing import Literal

import pytest

from builders import node
from gpufleet.core.cycle import run_cycle
from gpufleet.policies.backfill import Backfill, BackfillArgs
from scenario.harness import Scenario, qjob


def two_nodes(backfill: Literal["none", "easy", "conservative"] = "easy") -> Scenario:
    # a: 8 of 8 GPUs busy until 1000; b: 2 of 8 busy until 500. Now is 100.
    sc = Scenario([node("a").gpus(8), node("b").gpus(8)], now=100, backfill=backfill)
    sc.run(qjob("r1").gpus(8).limit(1000), start=0, on="a")
    sc.run(qjob("r2").gpus(2).limit(500), start=0, on="b")
    return sc


def test_backfill_starts_short_jobs_and_never_delays_the_held_gang() -> None:
    sc = two_nodes().submit(
        qjob("gang").gpus(8).gang(2).submit(1),  # needs a and b whole: a frees at 1000
        qjob("short").gpus(4).limit(300).submit(2),  # 100 + 300 = 400 <= 1000: may use b now
        qjob("long").gpus(2).limit(5000).submit(3),  # would hold b past 1000: must wait
    )
    out = sc.cycle()
    assert out.expected_start == {"gang": 1000}
    assert out.starts == {"short": ["b"]}
    assert out.reasons == {"gang": "Resources", "long": "Priority"}


def test_a_long_job_may_backfill_on_nodes_the_hold_does_not_need() -> None:
    sc = Scenario([node("a").gpus(8), node("b").gpus(8), node("c").gpus(8)], now=100)
    sc.run(qjob("r1").gpus(8).limit(1000), start=0, on="a")
    sc.run(qjob("r2").gpus(2).limit(500), start=0, on="b")
    sc.run(qjob("r3").gpus(8).limit(900), start=0, on="c")
    sc.submit(
        qjob("head").gpus(8).submit(1),  # earliest: b frees at 500 -> held on b
        qjob("long").gpus(8).limit(10_000).submit(2),  # fits nowhere now
        qjob("side").gpus(6).limit(10_000).submit(3),  # only b has 6 free, and b is held
    )
    out = sc.cycle()
    assert out.expected_start == {"head": 500}
    assert out.plan.expected_nodes["head"] == (1,)
    assert out.starts == {}
    assert out.reasons == {"head": "Resources", "long": "Priority", "side": "Priority"}


def test_without_backfill_the_queue_is_strict() -> None:
    sc = two_nodes("none").submit(
        qjob("gang").gpus(8).gang(2).submit(1),
        qjob("short").gpus(4).limit(300).submit(2),  # would fit, but the head waits
    )
    out = sc.cycle()
    assert out.starts == {}
    assert out.expected_start == {}
    assert out.reasons == {"gang": "Resources", "short": "Priority"}


@pytest.mark.parametrize(
    ("mode", "holds"),
    [
        # EASY: only the head is held: b has 6 free + 2 at 500 -> whole at 500.
        ("easy", {"first": 500}),
        # Conservative: "second" is held too, on a, whole at 1000.
        ("conservative", {"first": 500, "second": 1000}),
    ],
)
def test_easy_holds_the_head_only_and_conservative_holds_every_waiting_job(
    mode: Literal["easy", "conservative"], holds: dict[str, int]
) -> None:
    sc = two_nodes(mode).submit(
        qjob("first").gpus(8).limit(3600).submit(1),
        qjob("second").gpus(8).limit(3600).submit(2),
    )
    out = sc.cycle()
    assert out.expected_start == holds
    assert out.reasons == {"first": "Resources", "second": "Priority"}


def test_a_hold_beyond_the_backfill_window_is_not_made() -> None:
    sc = two_nodes().submit(qjob("gang").gpus(8).gang(2).submit(1))
    profile = sc.profile()
    profile.backfill = Backfill(BackfillArgs(window_s=500))  # 100 + 500 < 1000: too far
    plan = run_cycle(sc.snapshot(), profile)
    assert plan.expected_start == {}
    assert plan.reasons == {"gang": "Resources"}


@pytest.mark.parametrize(
    ("mode", "starts", "holds"),
    [
        # EASY holds only "first" (b, whole at 500): "third" may take a's 2 free GPUs,
        # although that pushes "second" past 1000.
        ("easy", {"third": ["a"]}, {"first": 500}),
        # Conservative also holds "second" on a from 1000, so "third" (100 + 5000 > 1000)
        # waits, held itself on b after "first": 500 + 3600 = 4100.
        ("conservative", {}, {"first": 500, "second": 1000, "third": 4100}),
    ],
)
def test_conservative_backfill_protects_every_held_job(
    mode: Literal["easy", "conservative"], starts: dict[str, list[str]], holds: dict[str, int]
) -> None:
    sc = Scenario([node("a").gpus(8), node("b").gpus(8)], now=100, backfill=mode)
    sc.run(qjob("r1").gpus(6).limit(1000), start=0, on="a")
    sc.run(qjob("r2").gpus(8).limit(500), start=0, on="b")
    out = sc.submit(
        qjob("first").gpus(8).submit(1),
        qjob("second").gpus(8).submit(2),
        qjob("third").gpus(2).limit(5000).submit(3),
    ).cycle()
    assert out.starts == starts
    assert out.expected_start == holds


@pytest.mark.parametrize(
    ("resolution", "starts"),
    [
        # Held from 130: the 25 s job ends at 125, before the hold -> it starts.
        (1, {"short": ["a"]}),
        # bf_resolution=60: the hold begins at 130 rounded down = 120, and 125 > 120.
        (60, {}),
    ],
)
def test_a_hold_begins_at_its_start_rounded_down_to_the_resolution(
    resolution: int, starts: dict[str, list[str]]
) -> None:
    # a: 6 of 8 GPUs busy until 130; now is 100.
    sc = Scenario([node("a").gpus(8)], now=100, resolution_s=resolution)
    sc.run(qjob("r").gpus(6).limit(130), start=0, on="a")
    sc.submit(
        qjob("head").gpus(8).limit(600).submit(1),  # a whole at 130
        qjob("short").gpus(2).limit(25).submit(2),  # fits now, ends at 125
    )
    out = sc.cycle()
    assert out.expected_start == {"head": 130}  # the start itself is exact
    assert out.starts == starts


def test_with_a_backfill_interval_cycles_between_passes_are_slurms_main_pass() -> None:
    # bf_interval = 30. a: 8 of 8 busy until 1000; b: 2 of 8 until 500.
    sc = two_nodes("conservative")
    sc.backfill_interval_s = 30
    sc.submit(
        qjob("gang").gpus(8).gang(2).submit(1),  # needs a and b whole: 1000
        qjob("short").gpus(4).limit(300).submit(2),  # 100 + 300 <= 1000: backfills
    )
    first = sc.step(100)  # no pass yet: this cycle backfills
    assert (first.plan.backfilled, first.starts, first.expected_start) == (
        True,
        {"short": ["b"]},
        {"gang": 1000},
    )
    sc.submit(qjob("tiny").gpus(2).limit(100).submit(110))
    main = sc.step(110)  # 10 s after the pass: the main pass stops at the gang
    assert (main.plan.backfilled, main.starts, main.expected_start) == (False, {}, {})
    assert main.reasons == {"gang": "Resources", "tiny": "Priority"}
    later = sc.step(130)  # 30 s on: a backfill pass again, and tiny fits before 1000
    assert (later.plan.backfilled, later.starts) == (True, {"tiny": ["b"]})
