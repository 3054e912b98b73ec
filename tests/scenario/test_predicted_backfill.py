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
