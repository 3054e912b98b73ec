"""Backfill with runtime estimates: a job backfills if its estimated end precedes a hold."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import node
from gpufleet.core.cycle import run_cycle
from scenario.harness import Scenario, qjob


def scene(estimates: bool) -> Scenario:
    # a: 8 of 8 GPUs busy until 1000; b: 2 of 8 busy until 500. Now is 100.
    sc = Scenario([node("a").gpus(8), node("b").gpus(8)], now=100)
    sc.run(qjob("r1").gpus(8).limit(1000), start=0, on="a")
    sc.run(qjob("r2").gpus(2).limit(500), start=0, on="b")
    sc.submit(
        qjob("gang").gpus(8).gang(2).submit(1),  # held on a and b from 1000
        qjob("short").gpus(4).limit(5000).with_(runtime_estimate_s=600).submit(2),
    )
    return sc


@pytest.mark.parametrize(
    ("estimates", "starts", "reasons"),
    [
        # by its limit short would hold b until 100 + 5000 > 1000: it waits
        (False, {}, {"gang": "Resources", "short": "Priority"}),
        # by its estimate it ends at 100 + 600 = 700 <= 1000: it starts on b
        (True, {"short": ["b"]}, {"gang": "Resources"}),
    ],
)
def test_backfill_fits_jobs_by_their_estimates(
    estimates: bool, starts: dict[str, list[str]], reasons: dict[str, str]
) -> None:
    sc = scene(estimates)
    out = sc._outcome(run_cycle(sc.snapshot(), replace(sc.profile(), estimates=estimates)))
    assert out.expected_start == {"gang": 1000}
    assert out.starts == starts
    assert out.reasons == reasons


@pytest.mark.parametrize(("estimates", "end"), [(False, 5100), (True, 700)])
def test_the_book_expects_a_run_to_end_by_its_estimate(estimates: bool, end: int) -> None:
    sc = Scenario([node("b").gpus(8)], now=100)
    book = sc._book()
    book.estimates = estimates
    sc.submit(qjob("short").gpus(4).limit(5000).with_(runtime_estimate_s=600))
    out = sc.step()
    assert out.effects is not None
    assert [(s.job_id, s.expected_end) for s in out.effects.started] == [("short", end)]


@pytest.mark.parametrize(
    ("now", "end"),
    [
        (500, 700),  # still within its estimate: 100 + 600
        (900, 1700),  # 200 s past it: as long again as it ran, 900 + 800
        (4000, 5100),  # as long again would pass the limit: the limit's end, 100 + 5000
    ],
)
def test_a_run_past_its_estimate_is_expected_to_run_as_long_again(now: int, end: int) -> None:
    sc = Scenario([node("b").gpus(8)], now=100)
    sc._book().estimates = True
    sc.submit(qjob("r").gpus(4).limit(5000).with_(runtime_estimate_s=600))
    sc.step()
    assert [r.expected_end for r in sc._book().snapshot(now).running] == [end]


def test_an_overrun_does_not_keep_a_planned_start_at_now() -> None:
    # r was estimated at 600 s but runs on at 900; the gang needs both nodes
    sc = Scenario([node("a").gpus(8), node("b").gpus(8)], now=100)
    sc._book().estimates = True
    sc.submit(qjob("r").gpus(4).limit(5000).with_(runtime_estimate_s=600).submit(0))
    sc.step()
    sc.submit(
        qjob("gang").gpus(8).gang(2).submit(1),
        qjob("small").gpus(2).limit(5000).with_(runtime_estimate_s=300).submit(2),
    )
    sc.now = 900
    out = sc._outcome(run_cycle(sc.snapshot(), replace(sc.profile(), estimates=True)))
    # r is expected until 900 + 800 = 1700: the gang is planned then, and small
    # (900 + 300 = 1200 <= 1700) starts now beside r instead of waiting behind it
    assert out.expected_start == {"gang": 1700}
    assert out.starts == {"small": ["a"]}


@pytest.mark.parametrize("estimates", [False, True])
def test_estimates_make_every_cycle_depend_on_the_clock(estimates: bool) -> None:
    # fifo, first-fit, limits and backfill alone do not read the clock; estimated ends do
    profile = replace(Scenario([node("a").gpus(8)]).profile(), estimates=estimates)
    assert profile.clocked() is estimates
