"""Closed-loop replay: a job that follows another is submitted after that one ends.

Each scenario states the arithmetic of the times it expects; the property
test checks, over random traces, that no follower is submitted before the
job it follows has ended plus its think time.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import node
from gpufleet.core.model import InvalidSpec, Node, Request
from gpufleet.sim.driver import JobRecord, SimResult
from gpufleet.sim.metrics import job_rows, summarize
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces.record import TraceJob

FIFO = {"ordering": {"plugin": "fifo"}, "placement": {"plugin": "first-fit"}}


def nodes(count: int) -> list[Node]:
    return [node(f"n{i}").gpus(1).build() for i in range(count)]


def tj(job_id: str, submit: int, duration: int, gpus: int = 1, **extra: Any) -> TraceJob:
    request = Request(gpus=gpus, cpu_milli=1000)
    return TraceJob(id=job_id, submit_time=submit, duration_s=duration, request=request, **extra)


def run(cluster: list[Node], jobs: list[TraceJob], **sim: Any) -> SimResult:
    return replay(cluster, jobs, profile_from_dict({**FIFO, "sim": sim}, "test"))


def by_id(result: SimResult) -> dict[str, JobRecord]:
    return {r.job.id: r for r in result.jobs}


def test_follower_is_submitted_at_the_end_plus_think_time() -> None:
    jobs = [tj("a", 0, 100), tj("b", 0, 50, after="a", think_s=30)]
    b = by_id(run(nodes(2), jobs))["b"]
    # a ends at 100; b is submitted at 100 + 30 = 130 although a node was free from 0.
    assert (b.submit_time, b.first_start, b.end) == (130, 130, 180)


def test_a_later_submit_time_wins() -> None:
    jobs = [tj("a", 0, 100), tj("b", 500, 50, after="a", think_s=30)]
    # max(500, 100 + 30) = 500
    assert by_id(run(nodes(1), jobs))["b"].submit_time == 500


def test_chain_accumulates_think_times() -> None:
    jobs = [
        tj("a", 0, 100),
        tj("b", 0, 20, after="a", think_s=10),
        tj("c", 0, 5, after="b", think_s=7),
    ]
    recs = by_id(run(nodes(1), jobs))
    # b: 100 + 10 = 110, ends 130; c: 130 + 7 = 137, ends 142.
    assert [(recs[k].submit_time, recs[k].end) for k in "bc"] == [(110, 130), (137, 142)]


def test_wait_and_jct_count_from_the_actual_submission() -> None:
    jobs = [tj("a", 0, 100), tj("c", 0, 200), tj("b", 0, 50, after="a", think_s=10)]
    result = run(nodes(1), jobs)
    b = by_id(result)["b"]
    # One node, FIFO: a 0..100, c 100..300; b submitted at 110 waits for c: starts 300.
    assert (b.submit_time, b.first_start, b.end) == (110, 300, 350)
    row = next(r for r in job_rows(result) if r[0] == "b")
    # submit 110, queue 300 - 110 = 190, JCT 350 - 110 = 240 (not 350 from the trace's 0).
    assert (row[6], row[11], row[12]) == (110, 240, 190)
    summary = summarize(result)
    # JCTs: a 100, c 300, b 240 -> mean 640 / 3.
    assert summary["jct_mean_s"] == pytest.approx(640 / 3)
    assert summary["unsubmitted"] == 0


def test_a_timed_out_job_releases_its_follower() -> None:
    jobs = [tj("a", 0, 100, time_limit_s=60), tj("b", 0, 10, after="a", think_s=5)]
    recs = by_id(run(nodes(1), jobs))
    # a's limit cuts it at 60; b is submitted at 65.
    assert (recs["a"].state, recs["b"].submit_time) == ("timeout", 65)


def test_followers_of_a_job_that_never_runs_are_never_submitted() -> None:
    jobs = [
        tj("big", 0, 100, gpus=4),  # fits no 1-GPU node
        tj("b", 0, 10, after="big"),
        tj("c", 0, 10, after="b"),
        tj("d", 0, 10),
    ]
    result = run(nodes(2), jobs)
    recs = by_id(result)
    assert {k: r.state for k, r in recs.items()} == {
        "big": "unschedulable",
        "b": "unsubmitted",
        "c": "unsubmitted",
        "d": "completed",
    }
    assert recs["b"].first_start == recs["c"].first_start == -1
    summary = summarize(result)
    assert (summary["unsubmitted"], summary["unschedulable"], summary["completed"]) == (2, 1, 1)
    # Only d ran and could: 1 of 1 met its deadline.
    assert summary["deadlines_met_pct"] == 100.0


def test_follower_that_fits_no_node_stays_unschedulable_and_blocks_its_own() -> None:
    jobs = [tj("a", 0, 10), tj("big", 0, 10, gpus=4, after="a"), tj("c", 0, 10, after="big")]
    recs = by_id(run(nodes(1), jobs))
    assert [recs[k].state for k in ("a", "big", "c")] == [
        "completed",
        "unschedulable",
        "unsubmitted",
    ]


def test_a_trace_without_followers_has_no_unsubmitted_count() -> None:
    assert "unsubmitted" not in summarize(run(nodes(1), [tj("a", 0, 10)]))


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([tj("a", 0, 1, after="zz")], "job a: after: no job 'zz' in the trace"),
        (
            [tj("a", 0, 1, after="b"), tj("b", 0, 1, after="a"), tj("c", 0, 1, after="a")],
            "job a: after: a cycle: a -> b -> a",
        ),
    ],
    ids=["unknown", "cycle"],
)
def test_bad_references_are_refused(jobs: list[TraceJob], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run(nodes(1), jobs)


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ({"after": "a"}, "after", "names the job itself"),
        ({"after": ""}, "after", "must not be empty"),
        ({"after": "b", "think_s": -1}, "think_s", "must be zero or more"),
        ({"think_s": 5}, "think_s", "needs after"),
    ],
)
def test_record_checks_its_own_reference(extra: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(InvalidSpec, match=reason) as caught:
        tj("a", 0, 1, **extra)
    assert caught.value.field == field


@st.composite
def closed_loop_traces(draw: st.DrawFn) -> list[TraceJob]:
    """Up to 12 jobs of 1 to 3 GPUs (3 fits no node), each following an earlier one or none."""
    n = draw(st.integers(1, 12))
    jobs = []
    for i in range(n):
        after = draw(st.none() | st.integers(0, i - 1)) if i else None
        jobs.append(
            tj(
                f"j{i}",
                draw(st.integers(0, 300)),
                draw(st.integers(0, 200)),
                gpus=draw(st.sampled_from([1, 1, 1, 2, 3])),
                after=None if after is None else f"j{after}",
                think_s=0 if after is None else draw(st.integers(0, 100)),
            )
        )
    return jobs


@settings(max_examples=60, deadline=None)
@given(closed_loop_traces())
def test_no_follower_is_submitted_before_its_predecessor_ends(trace: list[TraceJob]) -> None:
    recs = by_id(run([node("n0").gpus(2).build(), node("n1").gpus(1).build()], trace))
    for r in recs.values():
        t = r.trace
        if t.after is None:
            assert r.submit_time == t.submit_time
            continue
        before = recs[t.after]
        if before.end < 0:  # it never ended: the follower never went in
            assert r.state in ("unsubmitted", "unschedulable") and r.first_start < 0
        elif r.state != "unschedulable":
            assert r.submit_time == max(t.submit_time, before.end + t.think_s)
            assert r.first_start >= r.submit_time
