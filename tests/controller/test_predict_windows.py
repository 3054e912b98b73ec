"""Runtime prediction and policy windows in the live controller, as in the simulator.

The controller trains its predictor from the store on start (the jobs that
ended by themselves, in the order they ended) and from each job that ends
after; pending jobs carry its estimates for ordering and backfill. Windows
switch the policy at their boundaries on the controller's clock, and each
switch is audited and shown in the metrics.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.harness import ADMIN, OPERATOR, Cluster, spec
from gpufleet.controller.clock import ManualClock, WallClock
from gpufleet.controller.config import ConfigError, config_from_dict
from gpufleet.controller.errors import Conflict, Forbidden, Invalid
from gpufleet.controller.loop import SchedulerLoop
from gpufleet.controller.service import Principal
from gpufleet.controller.setup import setup_from_config
from gpufleet.policies.predict import Features, PredictArgs, QuantilePredictor
from store.databases import Database

ANA = Principal(user="ana", role="user", account="vision")
H = 3600
MONDAY = datetime(2026, 3, 2, tzinfo=UTC).timestamp()  # a Monday, 00:00 UTC


def config(**policy: Any) -> dict[str, Any]:
    return {
        "server": {"interval_s": 60},
        "policy": {
            "qos": [{"name": "normal"}],
            "partitions": [{"name": "gpu"}],
            "accounts": [{"name": "vision"}],
            **policy,
        },
        "principals": [{"name": "ana", "accounts": ["vision"]}],
    }


def cluster(db: Database, document: dict[str, Any], start: float = MONDAY) -> Cluster:
    built = setup_from_config(config_from_dict(document).build())
    c = Cluster(db, ManualClock(start), **{f.name: getattr(built, f.name) for f in fields(built)})
    c.register("n1")
    return c


SJF_PREDICT = config(
    ordering={"plugin": "sjf"},
    backfill={"mode": "easy"},
    predict={"ordering": True, "backfill": True, "min_history": 1},
)


@pytest.fixture
def predicting(db: Database) -> Iterator[Cluster]:
    c = cluster(db, SJF_PREDICT)
    yield c
    c.ctl.stop()


def run(c: Cluster, name: str, seconds: float, limit: int = H, code: int = 0) -> str:
    """Submit a 4-GPU job, start it on n1 and let it exit ``code`` after ``seconds``."""
    job = submit(c, name, limit)
    c.ctl.run_cycle_now()
    c.sync("n1")
    assert c.state(job) == "RUNNING"
    c.clock.advance(seconds)
    c.exit("n1", job, 1, code)
    return job


def submit(c: Cluster, name: str, limit: int = H) -> str:
    job = spec(name=name, gpus_per_node=4, time_limit_s=limit)
    return c.ctl.submit(principal=ANA, spec=job).job_id


def test_it_trains_from_the_store_and_orders_by_its_estimates(predicting: Cluster) -> None:
    c = predicting
    run(c, "long", 3000)
    run(c, "short", 100)
    c.restart()  # what it learnt comes back from the store
    blocker = submit(c, "block")
    c.ctl.run_cycle_now()
    c.sync("n1")
    long, short = submit(c, "long"), submit(c, "short")  # equal limits: FIFO would run long
    c.ctl.run_cycle_now()
    pending = c.ctl.book.pending
    assert (pending[long].runtime_estimate_s, pending[short].runtime_estimate_s) == (3000, 100)
    c.clock.advance(50)
    c.exit("n1", blocker, 1)
    c.ctl.run_cycle_now()
    assert (c.state(short), c.state(long)) == ("RUNNING", "PENDING")


def test_a_finish_re_estimates_the_waiting_jobs_before_the_next_cycle(predicting: Cluster) -> None:
    c = predicting
    run(c, "other", 1800)  # the user's only history: half the limit
    first = submit(c, "cold")
    c.ctl.run_cycle_now()
    c.sync("n1")
    second = submit(c, "cold")
    c.ctl.run_cycle_now()
    assert c.ctl.book.pending[second].runtime_estimate_s == 1800  # 0.5 x 3600
    c.clock.advance(600)
    c.exit("n1", first, 1)  # "cold" ran 600 s
    c.ctl.run_cycle_now()
    running = c.ctl.book.running[second]
    start = running.job.start_time
    assert start is not None
    # started with the new estimate; backfill expects its end after 600 s, not the limit
    assert (running.job.runtime_estimate_s, running.expected_end) == (600, start + 600)


def test_estimates_match_a_predictor_told_the_same_finishes(predicting: Cluster) -> None:
    c = predicting
    ran = {"a": 700, "b": 2000, "a2": 300}
    for name, seconds in ran.items():
        run(c, name.rstrip("2"), seconds)
    c.restart()
    blocker = submit(c, "block")
    c.ctl.run_cycle_now()
    c.sync("n1")
    waiting = {name: submit(c, name, 7200) for name in ("a", "b", "new")}
    c.ctl.run_cycle_now()
    twin = QuantilePredictor(PredictArgs(min_history=1))
    for name, seconds in ran.items():
        twin.observe(Features("ana", "vision", name.rstrip("2"), 4.0, H), seconds)
    for name, job in waiting.items():
        expected = twin.predict(Features("ana", "vision", name, 4.0, 7200))
        assert c.ctl.book.pending[job].runtime_estimate_s == expected
    assert blocker in c.ctl.book.running


def test_failed_runs_are_learnt_as_failures_live_and_from_the_store(
    predicting: Cluster,
) -> None:
    c = predicting
    run(c, "train", 3000)
    run(c, "train", 120, code=1)  # two runs of a bug, each failing within minutes
    run(c, "train", 100, code=1)
    twin = QuantilePredictor(PredictArgs(min_history=1))
    f = Features("ana", "vision", "train", 4.0, H)
    for seconds, failed in ((3000, False), (120, True), (100, True)):
        twin.observe(f, seconds, failed=failed)
    # the completed run's 3000 s: no run has ended yet after two failures in a row
    # (learnt as runs of the script, the median of 3000, 120, 100 would be 120)
    assert twin.predict(f) == 3000
    submit(c, "block")
    c.ctl.run_cycle_now()
    c.sync("n1")
    fixed = submit(c, "train")
    c.ctl.run_cycle_now()
    assert c.ctl.book.pending[fixed].runtime_estimate_s == 3000  # learnt live
    c.restart()
    c.ctl.run_cycle_now()
    assert c.ctl.book.pending[fixed].runtime_estimate_s == 3000  # trained from the store


def test_the_report_gives_the_error_per_bucket_of_submit_time(predicting: Cluster) -> None:
    c = predicting
    for seconds in (1000, 1200, 1100, 900):
        run(c, "train", seconds)
    report = c.ctl.prediction_report(principal=OPERATOR, buckets=2)
    assert [b.jobs for b in report.buckets] == [2, 2]
    # the first had no history (estimate = limit 3600), the others the median of those before
    first = report.buckets[0]
    assert first.mae_s == pytest.approx(((3600 - 1000) + (1200 - 1000)) / 2)
    # short only for the second: 1000 < 1200 (then 1100 = 1100, and 1100 > 900)
    assert report.overall.under_pct == 25.0
    assert report.overall.limit_mae_s == pytest.approx(3600 - 1050)


def test_the_report_refuses_what_it_cannot_show(db: Database) -> None:
    c = cluster(db, config())
    try:
        with pytest.raises(Conflict, match="predict"):
            c.ctl.prediction_report(principal=OPERATOR)
        with pytest.raises(Forbidden):
            c.ctl.prediction_report(principal=ANA)
    finally:
        c.ctl.stop()
    c = cluster(db, SJF_PREDICT)
    try:
        with pytest.raises(Conflict, match="no job"):
            c.ctl.prediction_report(principal=OPERATOR)
        with pytest.raises(Invalid, match="buckets"):
            c.ctl.prediction_report(principal=OPERATOR, buckets=0)
    finally:
        c.ctl.stop()


DAY_DOWN = config(
    windows=[
        {
            "name": "day",
            "days": ["weekdays"],
            "start": "08:00",
            "end": "20:00",
            "policy": {"partitions": [{"name": "gpu", "state": "down"}]},
        }
    ]
)


def test_a_window_switches_the_policy_at_its_boundaries(db: Database) -> None:
    c = cluster(db, DAY_DOWN, start=MONDAY + 7 * H)
    try:
        job = submit(c, "batch")
        c.clock.set(MONDAY + 8 * H)  # the partition goes down by day
        c.sync("n1")  # the agent keeps its node up meanwhile
        c.ctl.run_cycle_now()
        assert c.ctl.get_job(principal=ANA, job_id=job).reason == "PartitionDown"
        assert c.ctl._next_switch == MONDAY + 20 * H
        c.clock.set(MONDAY + 20 * H)
        c.sync("n1")
        c.ctl.run_cycle_now()
        assert c.state(job) == "RUNNING"
        audit = c.ctl.list_audit(principal=ADMIN).entries
        switches = [(e.time, e.detail["open"]) for e in audit if e.action == "policy.window"]
        assert switches == [(MONDAY + 20 * H, []), (MONDAY + 8 * H, ["day"])]
        gauges = {
            s.labels["window"]: s.value
            for m in c.ctl.metrics.window_open.collect()
            for s in m.samples
        }
        assert gauges == {"day": 0.0}
    finally:
        c.ctl.stop()


def test_a_restart_inside_a_window_starts_in_its_policy(db: Database) -> None:
    c = cluster(db, DAY_DOWN, start=MONDAY + 9 * H)
    try:
        job = submit(c, "batch")
        c.ctl.run_cycle_now()
        assert c.state(job) == "PENDING"
        c.restart()
        c.ctl.run_cycle_now()
        assert c.ctl.get_job(principal=ANA, job_id=job).reason == "PartitionDown"
        actions = {e.action for e in c.ctl.list_audit(principal=ADMIN).entries}
        assert "policy.window" not in actions  # starting in a window is no switch
    finally:
        c.ctl.stop()


def test_a_bad_window_is_refused_with_its_key() -> None:
    qos = [{"name": "normal", "priority": "high"}]
    bad = config(windows=[{"name": "day", "tz": "Mars/Olympus", "policy": {"qos": qos}}])
    with pytest.raises(ConfigError) as e:
        config_from_dict(bad).build()
    text = " ".join(e.value.problems)
    assert "policy.windows.day.tz: unknown time zone" in text
    assert "policy.windows.day.policy.qos" in text


def test_the_loop_runs_a_cycle_at_the_next_boundary_before_its_timer() -> None:
    ran = threading.Event()
    due = time.time() + 0.3
    loop = SchedulerLoop(ran.set, WallClock(), interval_s=30.0, due=lambda: due)
    began = time.monotonic()
    loop.start()
    try:
        assert ran.wait(5)
        assert 0.25 <= time.monotonic() - began < 5
    finally:
        loop.stop()
