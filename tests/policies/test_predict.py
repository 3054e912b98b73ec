"""The runtime predictor and shortest-job-first with aging: tables with the arithmetic."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


Seen = list[tuple[Features, int, bool]]  # features, seconds run, failed


def completed(f: Features, *runtimes: int) -> Seen:
    return [(f, r, False) for r in runtimes]


def failed(f: Features, *runtimes: int) -> Seen:
    return [(f, r, True) for r in runtimes]


# two scripts of one user: a runs twice, fails twice and is fixed; b runs twice, fails
TWO_SCRIPTS = (
    completed(feat(name="a"), 1000, 1000)
    + failed(feat(name="a"), 100, 100)
    + completed(feat(name="a"), 1000)
    + completed(feat(name="b"), 2000, 2000)
    + failed(feat(name="b"), 200)
)


@pytest.mark.parametrize(
    ("seen", "asked", "expected"),
    [
        # two failures after completed runs: after[0] = 1 failed, 2 completed; after[1] =
        # 1 failed; nothing has ended after 2 failures in a row, so p = 0: the completed
        # runs' 3000 (as runs of the script, the median of 3000, 3000, 100, 200: 1600)
        (completed(feat(), 3000, 3000) + failed(feat(), 100, 200), feat(), 3000),
        # a new script's two failures do not make its estimate: the user's completed
        # ratios of "eval" (0.25, 0.5 -> 0.375) x 8000; p = 0 after 2 failures
        (
            completed(feat(name="eval"), 900, 1800) + failed(feat(limit=8000), 60, 120),
            feat(limit=8000),
            3000,
        ),
        # after[0] = 2 failed, 4 completed (a: 1000, 1000, then b: 2000, 2000, and each
        # script's first failure); after[1] = 1 failed (a's second); after[2] = 1
        # completed (a's fix). b after one failure: p = 1 / (1 + 0 + 1) = 0.5; b's one
        # failure is under min_history, the user's failures 100, 100, 200 -> 100:
        # 2000 - 0.5 x (2000 - 100) = 1050
        (
            TWO_SCRIPTS,
            feat(name="b"),
            1050,
        ),
        # the same, a after its fix: p = 2 / (2 + 4 + 1); a's failures 100, 100:
        # 1000 - 2/7 x (1000 - 100) = 742.9
        (
            TWO_SCRIPTS,
            feat(name="a"),
            743,
        ),
        # nameless jobs have no streak: after[0] = 2 failed, 2 completed, p = 2/5; the
        # ratios 0.5 x 1000 = 500 and the user's failures 10: 500 - 0.4 x 490 = 304
        (
            completed(feat(name=""), 1800, 1800) + failed(feat(name=""), 10, 10),
            feat(name="", limit=1000),
            304,
        ),
    ],
)
def test_failed_runs_are_learnt_apart(seen: Seen, asked: Features, expected: int) -> None:
    p = QuantilePredictor()
    for f, runtime, fails in seen:
        p.observe(f, runtime, failed=fails)
    assert p.predict(asked) == expected


def test_without_failures_a_failed_run_is_a_run_of_the_script() -> None:
    p = QuantilePredictor(PredictArgs(failures=False))
    for f, runtime, fails in completed(feat(), 3000, 3000) + failed(feat(), 100, 200):
        p.observe(f, runtime, failed=fails)
    assert p.predict(feat()) == 1600  # the median of 3000, 3000, 100, 200


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", ""]),
            st.integers(0, 20_000),
            st.booleans(),
        ),
        max_size=40,
    ),
    st.sampled_from(["a", "b", ""]),
)
def test_failures_never_move_the_estimate_of_a_completed_run(
    seen: list[tuple[str, int, bool]], asked: str
) -> None:
    learnt, told_completed = QuantilePredictor(), QuantilePredictor()
    for name, runtime, fails in seen:
        learnt.observe(feat(name=name, limit=7200), runtime, failed=fails)
        if not fails:
            told_completed.observe(feat(name=name, limit=7200), runtime)
    f = feat(name=asked, limit=7200)
    assert learnt.completed(f) == told_completed.completed(f)
    # a failure-prone run is expected shorter than a completed one, never past the limit
    assert 1 <= learnt.predict(f) <= max(1, min(7200, round(learnt.completed(f))))


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


def test_first_estimates_learn_failed_runs_apart() -> None:
    train = Features("ada", "ml", "train", 1.0, 3600)
    jobs = [
        Finished(train, submit=0, first_start=0, end=1000, ran_s=1000),
        Finished(train, submit=1000, first_start=1000, end=1060, ran_s=60, failed=True),
        Finished(train, submit=1100, first_start=1100, end=1160, ran_s=60, failed=True),
        Finished(train, submit=1200, first_start=1200, end=2100, ran_s=900),
    ]
    outcomes = first_estimates(jobs, QuantilePredictor(PredictArgs(min_history=1)))
    # the limit, then the completed run's 1000 s each time: the fix after two failures
    # is not estimated at their 60 s
    assert [o.estimate for o in outcomes] == [3600, 1000, 1000, 1000]
