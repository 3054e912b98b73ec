"""The synthetic generator's scripts (jobs run again) and its range of limit overestimates."""

from __future__ import annotations

import pytest

from gpufleet.sim.traces.record import TraceJob
from gpufleet.sim.traces.synthetic import (
    LIMIT_LADDER_H,
    MODAL_LIMITS_H,
    THINK_MIN_S,
    WorkloadShape,
    generate,
)


def test_scripts_repeat_with_their_typical_duration() -> None:
    shape = WorkloadShape(scripts=3, script_jitter=0.1, size_mix={1: 1.0}, users=4)
    jobs = generate(400, seed=4, gpus_total=8, shape=shape)
    by_script: dict[tuple[str, str], list[int]] = {}
    for j in jobs:
        by_script.setdefault((j.user, j.labels["name"]), []).append(j.duration_s)
    assert {name for _, name in by_script} == {"script0", "script1", "script2"}
    for durations in by_script.values():  # 1 +- 0.1 of one typical duration (up to rounding)
        assert max(durations) <= 1.1 / 0.9 * min(durations) + 1


def offered_load(jobs: list[TraceJob], gpus: int) -> float:
    span = jobs[-1].submit_time - jobs[0].submit_time
    return sum(j.request.gpus * j.duration_s for j in jobs) / span / gpus


def test_scripts_keep_the_offered_load() -> None:
    shape = WorkloadShape(load=1.0, size_mix={1: 1.0})
    plain = generate(3000, seed=4, gpus_total=8, shape=shape)
    scripted = generate(3000, seed=4, gpus_total=8, shape=shape.model_copy(update={"scripts": 4}))
    assert 0.7 < offered_load(scripted, 8) / offered_load(plain, 8) < 1.4


def test_without_scripts_the_jobs_are_as_before() -> None:
    jobs = generate(50, seed=3, gpus_total=64)
    assert generate(50, seed=3, gpus_total=64, shape=WorkloadShape(scripts=0)) == jobs
    assert all(not j.labels for j in jobs)


@pytest.mark.parametrize(("low", "high"), [(2.0, 10.0), (1.0, 1.0)])
def test_limits_overestimate_within_the_range(low: float, high: float) -> None:
    shape = WorkloadShape(limit_overestimate_min=low, limit_overestimate=high)
    for j in generate(300, seed=2, gpus_total=64, shape=shape):
        assert j.time_limit_s is not None
        # the factor times the duration, rounded up to an hour
        assert low * j.duration_s <= j.time_limit_s < high * j.duration_s + 3600


def test_the_overestimate_range_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="limit_overestimate_min: must not exceed"):
        WorkloadShape(limit_overestimate_min=5, limit_overestimate=2)


HABITS = WorkloadShape(
    scripts=3, users=20, limit_habits=True, limit_overestimate_min=2, limit_overestimate=10
)


def test_habit_limits_are_round_and_cover_the_run() -> None:
    ladder = {h * 3600 for h in LIMIT_LADDER_H}
    for j in generate(2000, seed=5, gpus_total=64, shape=HABITS):
        assert j.time_limit_s is not None
        assert j.time_limit_s in ladder  # runtimes are clipped to 7 days, the last rung
        assert j.time_limit_s >= j.duration_s


def test_a_user_asks_the_same_limit_for_the_same_script_and_size() -> None:
    limits: dict[tuple[str, str, float], set[int | None]] = {}
    for j in generate(2000, seed=5, gpus_total=64, shape=HABITS):
        limits.setdefault((j.user, j.labels["name"], j.request.gpus), set()).add(j.time_limit_s)
    # one limit per script and size, but for the rare run whose jitter outgrows it
    assert sum(len(v) == 1 for v in limits.values()) / len(limits) > 0.9


def test_users_who_set_no_limit_get_the_default_unless_a_job_needs_more() -> None:
    shape = HABITS.model_copy(update={"limit_fixed_share": 1.0, "limit_default_h": 12})
    jobs = generate(2000, seed=5, gpus_total=64, shape=shape)
    per_job = generate(2000, seed=5, gpus_total=64, shape=shape.model_copy(
        update={"limit_fixed_share": 0.0}))
    for j, own in zip(jobs, per_job, strict=True):
        assert j.time_limit_s == max(12 * 3600, own.time_limit_s or 0)


def test_habit_limits_rank_jobs_worse_than_per_job_limits() -> None:
    def rank_agreement(shape: WorkloadShape) -> float:
        jobs = generate(2000, seed=5, gpus_total=64, shape=shape)
        pairs = zip(jobs[::2], jobs[1::2], strict=False)
        same = [(a.duration_s < b.duration_s) == ((a.time_limit_s or 0) < (b.time_limit_s or 0))
                for a, b in pairs if a.time_limit_s != b.time_limit_s]
        return sum(same) / len(same)

    per_job = HABITS.model_copy(update={"limit_habits": False})
    per_user = HABITS.model_copy(update={"limit_per_user": True})
    assert rank_agreement(per_user) < rank_agreement(HABITS) < rank_agreement(per_job)


def test_a_per_user_habit_asks_one_limit_unless_a_job_would_outrun_it() -> None:
    shape = HABITS.model_copy(update={"limit_per_user": True, "limit_fixed_share": 0.0})
    jobs = generate(2000, seed=5, gpus_total=64, shape=shape)
    by_user: dict[str, list[TraceJob]] = {}
    for j in jobs:
        by_user.setdefault(j.user, []).append(j)
    ladder = sorted(h * 3600 for h in LIMIT_LADDER_H)
    for own in by_user.values():
        habit = min(j.time_limit_s or 0 for j in own)
        for j in own:
            assert j.time_limit_s is not None and j.time_limit_s >= j.duration_s
            if j.time_limit_s != habit:  # raised only as far as the job needs
                assert j.duration_s > habit
                assert j.time_limit_s == min(r for r in ladder if r >= j.duration_s)
    # the same users' limits as per-script habits, but far fewer distinct values per user
    per_script = generate(2000, seed=5, gpus_total=64, shape=shape.model_copy(
        update={"limit_per_user": False}))
    def distinct(js: list[TraceJob]) -> int:
        return sum(len({j.time_limit_s for j in js if j.user == u}) for u in by_user)
    assert distinct(jobs) < distinct(per_script)


def test_limit_per_user_needs_limit_habits() -> None:
    with pytest.raises(ValueError, match="limit_per_user: needs limit_habits"):
        WorkloadShape(limit_per_user=True)


PER_JOB = HABITS.model_copy(  # runtimes of at most 4 hours, as in benchmarks/elastic_predict.py
    update={
        "limit_per_job": True,
        "limit_default_h": 72,
        "limit_fixed_share": 0.0,
        "max_duration_s": 4 * 3600,
    }
)


def test_per_job_limits_round_a_factor_of_their_own_up_to_the_modal_values() -> None:
    rungs = sorted(round(h * 3600) for h in (*MODAL_LIMITS_H, 72))
    for j in generate(2000, seed=5, gpus_total=64, shape=PER_JOB):
        limit = j.time_limit_s
        assert limit in rungs and limit >= 2 * j.duration_s
        below = [r for r in rungs if r < limit]
        # the rung below would not have covered the job's factor (at most 10) times its runtime
        assert not below or below[-1] < 10 * j.duration_s


def test_per_job_limits_differ_between_runs_of_one_script() -> None:
    limits: dict[tuple[str, str], set[int | None]] = {}
    for j in generate(2000, seed=5, gpus_total=64, shape=PER_JOB):
        limits.setdefault((j.user, j.labels["name"]), set()).add(j.time_limit_s)
    assert sum(len(v) > 1 for v in limits.values()) / len(limits) > 0.2


def test_users_who_set_no_limit_get_the_partition_maximum_per_job() -> None:
    shape = PER_JOB.model_copy(update={"limit_fixed_share": 1.0})
    assert {j.time_limit_s for j in generate(500, seed=5, gpus_total=64, shape=shape)} == {
        72 * 3600
    }


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"limit_per_job": True}, "limit_per_job: needs limit_habits"),
        (
            {"limit_per_job": True, "limit_habits": True, "limit_per_user": True},
            "limit_per_job: not with limit_per_user",
        ),
    ],
)
def test_limit_per_job_is_a_kind_of_habit(update: dict[str, bool], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkloadShape(**update)


DEBUGGING = PER_JOB.model_copy(update={"fail_share": 0.3, "fail_burst": 3})


def failed_runs(shape: WorkloadShape, n: int = 3000) -> tuple[list[TraceJob], list[bool]]:
    jobs = generate(n, seed=5, gpus_total=64, shape=shape)
    return jobs, [j.labels.get("status") == "Failed" for j in jobs]


def test_failed_runs_are_the_share_asked_and_end_early() -> None:
    jobs, failed = failed_runs(DEBUGGING)
    assert len(jobs) == 3000
    assert 0.25 < sum(failed) / len(jobs) < 0.35
    for j, f in zip(jobs, failed, strict=True):
        if f:  # at most fail_within_s, times 1 + the script's jitter
            assert j.duration_s <= 1.1 * DEBUGGING.fail_within_s + 1


def test_a_burst_is_closed_loop_and_asks_what_the_fixed_run_asks() -> None:
    jobs, failed = failed_runs(DEBUGGING)
    position = {j.id: i for i, j in enumerate(jobs)}
    followers = [j for j in jobs if j.after is not None]
    assert followers  # about one job in three follows a failed run
    for j in followers:
        before = jobs[position[j.after]]
        # The run before comes first in the trace, failed, from the same user and
        # script, asking the same; the follower may go in from the same time.
        assert position[j.after] < position[j.id] and before.labels["status"] == "Failed"
        assert (before.user, before.labels["name"]) == (j.user, j.labels["name"])
        assert (before.request, before.time_limit_s) == (j.request, j.time_limit_s)
        assert before.submit_time == j.submit_time
        assert THINK_MIN_S <= j.think_s <= DEBUGGING.think_max_s
    # Every failed run is followed by the next run of its burst, unless the trace ends first.
    followed = {j.after for j in followers}
    unfollowed = [j for j, f in zip(jobs, failed, strict=True) if f and j.id not in followed]
    assert all(j.submit_time == jobs[-1].submit_time for j in unfollowed)
    assert len(followed) == len(followers)  # one follower each: a burst is a chain
    # Think times spread log-uniformly over 1 to 20 minutes: the median near sqrt(60 x 1200).
    think = sorted(j.think_s for j in followers)
    assert 200 < think[len(think) // 2] < 330


def test_without_bursts_no_job_follows_another() -> None:
    jobs = generate(500, seed=5, gpus_total=64, shape=PER_JOB)
    assert all(j.after is None and not j.think_s for j in jobs)


def test_without_failed_runs_the_jobs_are_the_drawn_ones() -> None:
    jobs, failed = failed_runs(DEBUGGING, 500)
    plain = generate(500, seed=5, gpus_total=64, shape=PER_JOB)
    runs = [(j.user, j.labels["name"], j.duration_s, j.time_limit_s) for j in plain]
    fixed = [(j.user, j.labels["name"], j.duration_s, j.time_limit_s)
             for j, f in zip(jobs, failed, strict=True) if not f]
    assert fixed == runs[: len(fixed)]


def test_debugging_bursts_keep_the_offered_load_and_need_scripts() -> None:
    plain = generate(3000, seed=4, gpus_total=64, shape=PER_JOB)
    assert 0.8 < offered_load(generate(3000, seed=4, gpus_total=64, shape=DEBUGGING), 64) / (
        offered_load(plain, 64)
    ) < 1.25
    with pytest.raises(ValueError, match="fail_share: needs scripts"):
        WorkloadShape(fail_share=0.3)
