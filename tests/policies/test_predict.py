"""The runtime predictor and shortest-job-first with aging: tables with the arithmetic."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.core.job import Job
from gpufleet.core.model import Request
from gpufleet.policies.config import PolicyError, parse_policy
from gpufleet.policies.predict import Features, PredictArgs, QuantilePredictor, with_estimate
from gpufleet.policies.prediction_error import Finished, first_estimates
from gpufleet.policies.priority import ShortestJobFirst, SjfArgs
from policies.test_priority import pending, snapshot


def feat(user: str = "u", name: str = "train", gpus: float = 1, limit: int = 3600) -> Features:
    return Features(user, "acct", name, gpus, limit)


@pytest.mark.parametrize(
    ("seen", "asked", "expected"),
    [
        ([], feat(), 3600),  # nothing finished: the limit
        ([(feat(), 100)], feat(), 3600),  # one run is under min_history 2: the limit
        ([(feat(), 100), (feat(), 300)], feat(), 200),  # same user+name: median of 100, 300
        # other GPU count: the user+name group (100, 300, 500) -> 300
        ([(feat(), 100), (feat(), 300), (feat(gpus=4), 500)], feat(gpus=2), 300),
        # a new name: the user's runtime/limit ratios 0.25, 0.5 -> 0.375 x 8000 = 3000
        ([(feat(), 900), (feat(), 1800)], feat(name="eval", limit=8000), 3000),
        # nameless jobs learn ratios only: 0.5 x 1000 = 500
        ([(feat(name=""), 1800), (feat(name=""), 1800)], feat(name="", limit=1000), 500),
        # another user of the account: the account's ratios (0.5, 0.5) x 600
        ([(feat(), 1800), (feat(), 1800)], feat(user="v", limit=600), 300),
        (
            [(feat(limit=10_000), 9000), (feat(limit=10_000), 9000)],
            feat(limit=600),
            600,
        ),  # <= limit
    ],
)
def test_quantile_predictor(
    seen: list[tuple[Features, int]], asked: Features, expected: int
) -> None:
    p = QuantilePredictor()
    for f, runtime in seen:
        p.observe(f, runtime)
    assert p.predict(asked) == expected


def test_only_the_recent_history_counts() -> None:
    p = QuantilePredictor(PredictArgs(history=2))
    for runtime in (3000, 100, 200):  # 3000 falls out of a history of 2
        p.observe(feat(), runtime)
    assert p.predict(feat()) == 150


def test_with_estimate_stamps_the_job() -> None:
    p = QuantilePredictor(PredictArgs(min_history=1))
    p.observe(feat(user="alice", name="x", limit=7200), 600)
    job = with_estimate(pending(time_limit_s=7200), p, "x")
    assert (job.runtime_estimate_s, job.expected_runtime_s) == (600, 600)


def sjf_order(jobs: list[Job], now: int, **kw: Any) -> list[str]:
    prio = ShortestJobFirst(SjfArgs(aging=kw.pop("aging", 0.0)), **kw).priorities(
        snapshot(*jobs), jobs, now
    )
    return [j.id for _, j in sorted(zip(-prio, jobs, strict=True), key=lambda t: t[0])]


OLD_LONG = pending("old", time_limit_s=7200, runtime_estimate_s=3000, submit_time=0)
NEW_SHORT = pending("new", time_limit_s=7200, runtime_estimate_s=600, submit_time=5000)


@pytest.mark.parametrize(
    ("now", "aging", "estimates", "expected"),
    [
        (5000, 0.0, True, ["new", "old"]),  # 600 < 3000
        (5000, 0.0, False, ["old", "new"]),  # limits tie at 7200: listed order (cycle: submit)
        # aging 0.5: old = 0.5 x 5000 - 3000 = -500; new = 0 - 600 = -600: old first
        (5000, 0.5, True, ["old", "new"]),
        # aging 0.1: old = 500 - 3000 = -2500 < new's -600: new first
        (5000, 0.1, True, ["new", "old"]),
    ],
)
def test_sjf_ranks_by_estimate_with_aging(
    now: int, aging: float, estimates: bool, expected: list[str]
) -> None:
    assert sjf_order([OLD_LONG, NEW_SHORT], now, aging=aging, estimates=estimates) == expected


def test_the_predict_table_switches_each_use() -> None:
    text = '[ordering]\nplugin = "sjf"\n[ordering.sjf]\naging = 0.5\n[predict]\nbackfill = true\n'
    profile = parse_policy(text).profile()
    assert isinstance(profile.ordering, ShortestJobFirst)
    assert (profile.ordering.estimates, profile.ordering.args.aging, profile.estimates) == (
        True,
        0.5,
        True,
    )
    plain = parse_policy('[ordering]\nplugin = "sjf"\n').profile()
    assert isinstance(plain.ordering, ShortestJobFirst)
    assert (plain.ordering.estimates, plain.estimates) == (False, False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[predict]\nquantile = 1.5\n", "predict.quantile"),
        ("[predict]\nhistory = 0\n", "predict.history"),
        ("[ordering.sjf]\naging = -1\n", "ordering.sjf.aging"),
    ],
)
def test_bad_predict_settings_name_the_key(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy(text, "p.toml")


def test_features_of_a_job() -> None:
    job = pending(request=Request(gpus=2), time_limit_s=900)
    assert Features.of(job, "n") == Features("alice", "team", "n", 2.0, 900)


def test_an_estimate_follows_what_was_learnt_since() -> None:
    p = QuantilePredictor()
    p.observe(feat(), 100)
    p.observe(feat(), 300)
    assert p.predict(feat()) == 200  # median of 100, 300
    p.observe(feat(), 2000)
    assert p.predict(feat()) == 300  # median of 100, 300, 2000
    p.observe(feat(name="other"), 3600)
    # a new script: the user's ratios 100, 300, 2000, 3600 over 3600: median 1150 / 3600
    assert p.predict(feat(name="new")) == 1150


def test_a_job_ending_in_the_second_it_started_does_not_teach_its_own_estimate() -> None:
    # The controller keeps whole seconds: a job that ran 0 s ends when it started.
    quick = Features("ada", "ml", "quick", 1.0, 600)
    jobs = [
        Finished(quick, submit=0, first_start=0, end=0, ran_s=0),
        Finished(quick, submit=1, first_start=1, end=1, ran_s=0),
    ]
    outcomes = first_estimates(jobs, QuantilePredictor(PredictArgs(min_history=1)))
    assert [o.estimate for o in outcomes] == [600, 1]  # the limit, then what the first ran
