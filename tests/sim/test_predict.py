"""Runtime prediction in the simulator: it learns online and never peeks ahead."""

from __future__ import annotations

import numpy as np

from gpufleet.policies.predict import Features, PredictArgs, QuantilePredictor
from gpufleet.sim.driver import JobRecord
from gpufleet.sim.traces import load_trace
from gpufleet.sim.traces.record import TraceJob
from sim.test_driver import EASY, by_id, nodes, run, tj


def named(job_id: str, submit: int, duration: int) -> TraceJob:
    return tj(job_id, submit, duration, user="u", time_limit_s=3600, labels={"name": "train"})


def test_an_estimate_uses_only_jobs_finished_before_it() -> None:
    jobs = [
        named("a", 0, 100),  # ends at 100
        named("b", 50, 1000),  # ends at 1050
        named("c", 60, 10),  # arrives before anyone finished: the limit; ends at 70
        named("d", 120, 50),  # a and c finished: median of 100, 10 = 55 (with b's 1000: 100)
        named("e", 2000, 10),  # all four finished: median of 100, 1000, 10, 50 = 75
    ]
    predict = {"min_history": 1}
    result = run(nodes(8), jobs, {**EASY, "predict": predict})
    got = {k: r.predicted_s for k, r in by_id(result).items()}
    assert got == {"a": 3600, "b": 3600, "c": 3600, "d": 55, "e": 75}


def test_failed_runs_in_the_trace_are_learnt_as_failures() -> None:
    def train(job_id: str, submit: int, duration: int, status: str = "") -> TraceJob:
        labels = {"name": "train"} | ({"status": status} if status else {})
        return tj(job_id, submit, duration, user="u", time_limit_s=3600, labels=labels)

    jobs = [
        train("a", 0, 1000),  # ends at 1000
        train("b", 1010, 60, "Failed"),  # a bug: ends at 1070
        train("c", 1100, 60, "FAILED"),  # ends at 1160
        # the fix: a's 1000, since no run has yet ended after 2 failures in a row
        # (learnt as runs of the script, the median of 1000, 60, 60 would be 60)
        train("d", 1200, 900),  # ends at 2100
        train("e", 1300, 5000, "Failed"),  # stopped at its limit at 4900: a timeout
        # completed 1000, 900, 3600 -> 1000; failures 60, 60 -> 60; after 0 failures
        # 1 run failed (b) and 2 completed (a, e): p = 1/4: 1000 - 0.25 x 940 = 765
        train("f", 5000, 100),
    ]
    result = run(nodes(8), jobs, {**EASY, "predict": {"min_history": 1}})
    got = {k: r.predicted_s for k, r in by_id(result).items()}
    assert got == {"a": 3600, "b": 1000, "c": 1000, "d": 1000, "e": 1000, "f": 765}


def test_every_estimate_matches_a_predictor_told_only_of_ends_before_the_start() -> None:
    trace = load_trace(
        "synthetic:n_jobs=150,seed=3,gpus_total=16,load=1.3,max_duration_s=7200,scripts=3,"
        "fail_share=0.3"
    )
    assert sum(t.failed for t in trace) > 30
    args = {"history": 1000, "min_history": 2}  # a window that never overflows
    result = run(nodes(4, 4), trace, {**EASY, "predict": args})
    records = [r for r in result.jobs if r.first_start >= 0]
    assert len(records) > 100
    ended = sorted((r for r in records if r.end >= 0), key=lambda r: r.end)
    for rec in records:
        offline = QuantilePredictor(PredictArgs(**args))
        for done in ended:
            if done.end <= rec.first_start:
                failed = done.trace.failed and not done.remaining  # not a timeout
                ran = done.trace.duration_s - done.remaining
                offline.observe(_features(done), ran, failed=failed)
        assert rec.predicted_s == offline.predict(_features(rec)), rec.job.id


def _features(rec: JobRecord) -> Features:
    return Features.of(rec.job, rec.name)


def repeated_jobs(n: int = 80) -> list[TraceJob]:
    """Four scripts run again and again (60 s to 2 h each, +-10 %), limits a flat 4 h."""
    rng = np.random.default_rng(7)
    typical = {"tiny": 60, "small": 600, "mid": 1800, "big": 7200}
    names = rng.choice(sorted(typical), size=n)
    return [
        tj(
            f"j{i:03d}",
            i * 120,
            int(typical[str(name)] * rng.uniform(0.9, 1.1)),
            user="u",
            time_limit_s=4 * 3600,
            labels={"name": str(name)},
        )
        for i, name in enumerate(names)
    ]


def test_predicted_sjf_beats_fifo_and_sjf_by_limits() -> None:
    jobs = repeated_jobs()
    sjf = {**EASY, "ordering": {"plugin": "sjf"}}
    policies = {
        "fifo": EASY,
        "limits": sjf,
        "predicted": {**sjf, "predict": {"backfill": True}},
    }
    mean = {
        name: sum(r.end - r.trace.submit_time for r in run(nodes(2), jobs, p).jobs) / len(jobs)
        for name, p in policies.items()
    }
    oracle = run(nodes(2), jobs, sjf, oracle_limits=True).jobs
    mean["oracle"] = sum(r.end - r.trace.submit_time for r in oracle) / len(jobs)
    # measured: fifo = limits 36,011 s (every limit is 4 h), predicted 18,988 s, oracle 16,218 s
    assert mean["predicted"] < 0.7 * mean["limits"], mean
    assert mean["predicted"] < 0.7 * mean["fifo"], mean
    assert mean["predicted"] < 1.25 * mean["oracle"], mean
