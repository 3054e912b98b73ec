"""The discrete-event driver: golden tiny traces with JCTs worked out by hand,
preemption with grace and checkpoints, failures, reservations, work
conservation, determinism, and the orderings published studies report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from builders import node
from gpufleet.core.cycle import Plan, Snapshot
from gpufleet.core.model import Node, Request
from gpufleet.policies.fairshare import FairshareArgs
from gpufleet.sim.driver import (
    JobRecord,
    NoProgress,
    SimConfig,
    SimResult,
    Simulation,
    to_job,
)
from gpufleet.sim.events import EventQueue, Kind
from gpufleet.sim.faults import FaultModel
from gpufleet.sim.metrics import job_rows, summarize
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces import load_trace
from gpufleet.sim.traces.record import TraceJob

FIFO = {"ordering": {"plugin": "fifo"}, "placement": {"plugin": "first-fit"}}
EASY = {**FIFO, "backfill": {"mode": "easy", "resolution_s": 1}}
ORACLE = {"oracle_limits": True}


def nodes(count: int, gpus: int = 1) -> list[Node]:
    return [node(f"n{i}").gpus(gpus).build() for i in range(count)]


def tj(job_id: str, submit: int, duration: int, gpus: int = 1, **extra: Any) -> TraceJob:
    width = extra.pop("width", 1)
    request = Request(gpus=gpus, cpu_milli=1000, nodes=width)
    return TraceJob(id=job_id, submit_time=submit, duration_s=duration, request=request, **extra)


def run(cluster: list[Node], jobs: list[TraceJob], policy: dict[str, Any], **sim: Any) -> SimResult:
    return replay(cluster, jobs, profile_from_dict({**policy, "sim": sim}, "test"))


def by_id(result: SimResult) -> dict[str, JobRecord]:
    return {r.job.id: r for r in result.jobs}


def jcts(result: SimResult) -> dict[str, int]:
    return {r.job.id: r.end - r.trace.submit_time for r in result.jobs}


GOLDEN = [
    pytest.param(
        2,
        [tj("a", 0, 10), tj("b", 0, 20), tj("c", 0, 15)],
        FIFO,
        # a, b start at 0 on n0, n1; c waits for a (ends 10): 10 + 15 = 25.
        {"a": 10, "b": 20, "c": 25},
        id="fifo-2x1-three-jobs",
    ),
    pytest.param(
        1,
        [tj("a", 0, 10), tj("b", 5, 10)],
        FIFO,
        # b arrives at 5, starts when a ends at 10, ends 20: JCT 20 - 5 = 15.
        {"a": 10, "b": 15},
        id="fifo-queueing-delay",
    ),
    pytest.param(
        2,
        [tj("a", 0, 10), tj("b", 1, 10, width=2), tj("c", 2, 5)],
        FIFO,
        # The 2-node gang b waits for a (10), runs 10..20: JCT 19. Strict FIFO keeps
        # c behind b although n1 is free: c runs 20..25, JCT 23.
        {"a": 10, "b": 19, "c": 23},
        id="fifo-gang-blocks",
    ),
    pytest.param(
        2,
        [tj("a", 0, 10), tj("b", 1, 10, width=2), tj("c", 2, 5)],
        EASY,
        # b is held to start at 10 on both nodes; c (limit 5) ends at 7 <= 10 on
        # the idle n1, so it backfills: JCT 5. b still starts at 10: JCT 19.
        {"a": 10, "b": 19, "c": 5},
        id="easy-backfill",
    ),
    pytest.param(
        1,
        [tj("long", 0, 100), tj("x", 1, 30), tj("y", 1, 10)],
        {**FIFO, "ordering": {"plugin": "sjf"}},
        # SJF with oracle limits: y (10) before x (30) once long ends at 100.
        # y: 100..110 -> 109; x: 110..140 -> 139.
        {"long": 100, "x": 139, "y": 109},
        id="sjf-oracle",
    ),
]


@pytest.mark.parametrize(("count", "jobs", "policy", "expected"), GOLDEN)
def test_golden_jcts(
    count: int, jobs: list[TraceJob], policy: dict[str, Any], expected: dict[str, int]
) -> None:
    result = run(nodes(count), jobs, policy, **ORACLE)
    assert jcts(result) == expected
    assert all(r.state == "completed" for r in result.jobs)


def test_golden_summary_arithmetic() -> None:
    result = run(nodes(2), [tj("a", 0, 10), tj("b", 0, 20), tj("c", 0, 15)], FIFO)
    s = summarize(result)
    # JCTs 10, 20, 25: mean 55 / 3; waits 0, 0, 10: mean 10 / 3.
    assert s["jct_mean_s"] == pytest.approx(55 / 3)
    assert s["jct_p50_s"] == 20
    assert s["queue_mean_s"] == pytest.approx(10 / 3)
    # 10 + 20 + 15 = 45 GPU-seconds over 2 GPUs x 25 s of makespan = 90 %.
    assert s["makespan_s"] == 25
    assert s["gpu_alloc_mean_pct"] == pytest.approx(90.0)
    # c: JCT 25 over max(15, 10) -> 5/3; a and b: 1. Mean (1 + 1 + 5/3) / 3.
    assert s["slowdown_mean"] == pytest.approx((2 + 5 / 3) / 3)


# Multifactor with its QoS weight ranks "high" above the "preemptible" victim, so a
# victim requeued after its grace time does not win its nodes back.
PREEMPT = {**FIFO, "ordering": {"plugin": "multifactor"}, "preemption": {"enabled": True}}


def low_and_high(checkpoint: int | None = 30) -> list[TraceJob]:
    return [
        tj("low", 0, 100, preemptible=True, priority_class="low", checkpoint_interval_s=checkpoint),
        tj("high", 50, 10, priority_class="high"),
    ]


def test_preemption_loses_work_since_the_last_checkpoint() -> None:
    result = run(nodes(1), low_and_high(), PREEMPT)
    low, high = by_id(result)["low"], by_id(result)["high"]
    # high arrives at 50 and preempts low at once; low checkpointed at 30, so
    # 20 s are lost and 70 remain. high runs 50..60, low again 60..130.
    assert (high.first_start, high.end) == (50, 60)
    assert (low.end, low.preemptions, low.requeues) == (130, 1, 1)
    assert low.lost_preemption_gpu_s == 20
    # allocated 50 + 70 = 120 = the 100 s of work + the 20 s lost
    assert low.allocated_gpu_s == 120


LAS = {
    "ordering": {"plugin": "las", "las": {"thresholds_gpu_s": [300], "starve_limit_s": 600}},
    "placement": {"plugin": "best-fit"},
    "preemption": {"enabled": True, "plugin": "las", "quantum_s": 300},
}


@pytest.mark.parametrize("checkpoint", [1800, None])
def test_las_stops_no_job_before_its_first_checkpoint(checkpoint: int | None) -> None:
    """Three jobs that each fill the node, starved in turn: stopped at every quantum
    before their first checkpoint they would start over forever. LAS waits for one."""
    jobs = [tj(k, 0, 3600, gpus=8, checkpoint_interval_s=checkpoint) for k in "abc"]
    result = run(nodes(1, gpus=8), jobs, LAS)
    runs = [(r.job.id, r.end, r.preemptions, r.lost_preemption_gpu_s) for r in result.jobs]
    if checkpoint is None:  # never saves: never stopped, FIFO's order
        assert runs == [("a", 3600, 0, 0), ("b", 7200, 0, 0), ("c", 10800, 0, 0)]
    else:  # a and b are each stopped as they save at 1800, losing nothing
        assert runs == [("a", 5400, 1, 0), ("b", 7200, 1, 0), ("c", 10800, 0, 0)]


# Each QoS preempts the other, so the jobs take turns stopping each other, each run
# stopped before its first checkpoint: a policy that can only lose work.
MUTUAL = {
    **PREEMPT,
    "qos": [{"name": "a", "preempt": ["b"]}, {"name": "b", "preempt": ["a"]}],
}


def test_a_replay_that_makes_no_progress_stops() -> None:
    jobs = [
        tj("x", 0, 3600, gpus=8, qos="a", checkpoint_interval_s=1800),
        tj("y", 10, 3600, gpus=8, qos="b", checkpoint_interval_s=1800),
    ]
    with pytest.raises(NoProgress) as err:
        run(nodes(1, gpus=8), jobs, MUTUAL)
    assert str(err.value).startswith("test: the replay makes no progress: ")
    assert "and checkpoints every 1800 s, so it starts over each time" in str(err.value)


def test_jobs_that_checkpoint_within_the_quantum_progress() -> None:
    jobs = [tj(k, 0, 3600, gpus=8, checkpoint_interval_s=30) for k in "abc"]
    result = run(nodes(1, gpus=8), jobs, LAS)
    assert {r.state for r in result.jobs} == {"completed"}
    assert sum(r.preemptions for r in result.jobs) > 0


def test_grace_time_lets_the_victim_run_on() -> None:
    qos = [{"name": "preemptible", "grace_s": 10}]
    result = run(nodes(1), low_and_high(), {**PREEMPT, "qos": qos})
    low, high = by_id(result)["low"], by_id(result)["high"]
    # Signalled at 50, stopped at 60 (before its checkpoint due at 60): keeps 30,
    # loses 30. high runs 60..70; low resumes with 70 s left: 70..140.
    assert (high.first_start, high.end) == (60, 70)
    assert low.lost_preemption_gpu_s == 30
    assert low.end == 140


@pytest.mark.parametrize("width", [1, 2])
def test_a_victim_requeued_ahead_of_its_preemptor_does_not_take_its_room(width: int) -> None:
    """FIFO without backfill ranks the requeued victim (submitted at 0) above the job
    that stopped it; the room is the preemptor's even so, or the victim would win it
    back, be stopped again, and so on forever (or, on one node, both would wait)."""
    qos = [{"name": "preemptible", "grace_s": 60}]
    low = [tj(f"lo{i}", 0, 3000, gpus=4, preemptible=True) for i in range(1, width + 1)]
    jobs = [*low, tj("hi", 1000, 100, gpus=4, priority_class="high")]
    fifo = {**FIFO, "preemption": {"enabled": True}, "qos": qos}
    result = by_id(run(nodes(width, gpus=4), jobs, fifo))
    # hi stops lo1 at 1000 and runs once its grace time is over: 1060..1160.
    assert (result["hi"].first_start, result["hi"].end) == (1060, 1160)
    assert (result["lo1"].preemptions, result["lo1"].end) == (1, 4160)
    assert {r.state for r in result.values()} == {"completed"}


def test_cancel_mode_ends_the_victim() -> None:
    qos = [{"name": "preemptible", "preempt_mode": "cancel"}]
    result = run(nodes(1), low_and_high(), {**PREEMPT, "qos": qos})
    low = by_id(result)["low"]
    # Cancelled at 50: all 50 s it ran are lost, checkpointed or not.
    assert (low.state, low.end) == ("cancelled", 50)
    assert low.lost_preemption_gpu_s + low.lost_other_gpu_s == 50


def test_time_limit_ends_a_job_as_timed_out() -> None:
    result = run(nodes(1), [tj("a", 0, 100, time_limit_s=40)], FIFO)
    a = by_id(result)["a"]
    assert (a.state, a.end, a.lost_other_gpu_s) == ("timeout", 40, 40)


def test_default_time_limit_rounds_the_duration_up() -> None:
    result = run(nodes(1), [tj("a", 0, 100)], FIFO, limit_round_s=60)
    # 100 s rounds up to 120; the job completes within it.
    assert result.jobs[0].job.time_limit_s == 120
    assert result.jobs[0].state == "completed"


def test_a_job_that_never_fits_is_unschedulable_and_the_replay_ends() -> None:
    result = run(nodes(2), [tj("big", 0, 10, gpus=4), tj("a", 0, 10)], FIFO)
    assert {r.job.id: r.state for r in result.jobs} == {"big": "unschedulable", "a": "completed"}


def test_maintenance_reservation_delays_jobs_until_it_ends() -> None:
    res = [{"name": "m", "start": 0, "end": 100, "nodes": ["n0"], "maintenance": True}]
    result = run(nodes(1), [tj("a", 0, 10)], {**FIFO, "reservations": res})
    # a would overlap the window [0, 100) on the only node; it starts at its end.
    assert (by_id(result)["a"].first_start, by_id(result)["a"].end) == (100, 110)


def test_event_order_is_time_then_kind_then_sequence() -> None:
    q = EventQueue()
    q.push(5, Kind.ARRIVAL, "late")
    q.push(3, Kind.SCHEDULE, "tick")
    q.push(3, Kind.ARRIVAL, "first")
    q.push(3, Kind.JOB_END, "end")
    q.push(3, Kind.ARRIVAL, "second")
    # time 3 before 5; at 3 ends before arrivals before the cycle; arrivals in push order
    assert [q.pop().key for _ in range(len(q))] == ["end", "first", "second", "tick", "late"]


SYNTH = "synthetic:n_jobs=150,seed=3,gpus_total=64,max_duration_s=7200,load=1.5"
NODES8 = Path(__file__).parent / "fixtures" / "nodes8x8.csv"


@pytest.fixture(scope="module")
def workload() -> tuple[list[Node], list[TraceJob]]:
    from gpufleet.sim.openb import load_nodes

    return load_nodes(NODES8), load_trace(SYNTH)


def test_work_is_conserved_with_preemption_and_failures(
    workload: tuple[list[Node], list[TraceJob]],
) -> None:
    cluster, jobs = workload
    policy = {**EASY, "preemption": {"enabled": True}}
    result = run(cluster, jobs, policy, mtbf_s=50_000, mttr_s=600, checkpoint_interval_s=600)
    assert result.node_failures > 0
    assert sum(r.preemptions for r in result.jobs) > 0
    completed = sum(r.gpus * r.trace.duration_s for r in result.jobs if r.state == "completed")
    lost = sum(
        r.lost_preemption_gpu_s + r.lost_failure_gpu_s + r.lost_other_gpu_s for r in result.jobs
    )
    allocated = sum(r.allocated_gpu_s for r in result.jobs)
    assert completed + lost == pytest.approx(allocated)
    # The time integral of allocation counts the same GPU-seconds.
    assert result.alloc_milli_s / 1000 == pytest.approx(allocated)


def test_same_seed_same_replay(workload: tuple[list[Node], list[TraceJob]]) -> None:
    cluster, jobs = workload[0], workload[1][:80]
    policy = {**EASY, "ordering": {"plugin": "multifactor"}, "preemption": {"enabled": True}}
    first = run(cluster, jobs, policy, mtbf_s=50_000, seed=7)
    second = run(cluster, jobs, policy, mtbf_s=50_000, seed=7)
    assert job_rows(first) == job_rows(second)
    assert first.samples == second.samples
    other = run(cluster, jobs, policy, mtbf_s=50_000, seed=8)
    assert job_rows(other) != job_rows(first)


def test_sjf_with_an_oracle_beats_fifo_on_mean_jct(
    workload: tuple[list[Node], list[TraceJob]],
) -> None:
    cluster, jobs = workload
    fifo = summarize(run(cluster, jobs, EASY, **ORACLE))
    sjf = summarize(run(cluster, jobs, {**EASY, "ordering": {"plugin": "sjf"}}, **ORACLE))
    assert sjf["jct_mean_s"] < fifo["jct_mean_s"]


def test_backfill_beats_a_strict_queue(workload: tuple[list[Node], list[TraceJob]]) -> None:
    cluster, jobs = workload
    strict = summarize(run(cluster, jobs, FIFO))
    easy = summarize(run(cluster, jobs, EASY))
    assert easy["jct_mean_s"] < strict["jct_mean_s"]
    assert easy["gpu_alloc_mean_pct"] > strict["gpu_alloc_mean_pct"]


def test_fairshare_improves_jains_index_over_fifo(
    workload: tuple[list[Node], list[TraceJob]],
) -> None:
    cluster, jobs = workload
    # Fairshare alone: no QoS, age or partition weight to blur it.
    weights = {"weight_qos": 0, "weight_age": 0, "weight_partition": 0}
    fair = {**EASY, "ordering": {"plugin": "multifactor", "multifactor": weights}}
    fifo = summarize(run(cluster, jobs, EASY))
    fairshare = summarize(run(cluster, jobs, fair))
    assert fairshare["jain_fairness"] > fifo["jain_fairness"]


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        # no limit: 100 s rounds up to an hour; everything else defaults
        (tj("a", 0, 100), ("normal", "default", "default", "default", 3600)),
        # 3,601 s rounds up to two hours; the account defaults to the user
        (tj("a", 0, 3601, user="u"), ("normal", "u", "u", "default", 7200)),
        # a preemptible job gets the preemptible QoS whatever its class; limits are kept
        (
            tj("a", 0, 10, preemptible=True, account="x", partition="p", time_limit_s=50),
            ("preemptible", "x", "x", "p", 50),
        ),
    ],
)
def test_trace_jobs_become_core_jobs(
    trace: TraceJob, expected: tuple[str, str, str, str, int]
) -> None:
    job = to_job(trace, SimConfig())
    assert (job.qos, job.user, job.account, job.partition, job.time_limit_s) == expected


@pytest.mark.parametrize(
    ("trace", "defined", "qos"),
    [
        # a Slurm export's QOS, defined by the profile: the job runs under it
        (tj("a", 0, 10, qos="scavenger"), {"normal", "scavenger"}, "scavenger"),
        # not defined: the priority class, as before
        (tj("a", 0, 10, qos="gold"), {"normal", "scavenger"}, "normal"),
        # preemptible trace jobs keep the preemptible QoS
        (tj("a", 0, 10, qos="scavenger", preemptible=True), {"scavenger"}, "preemptible"),
    ],
)
def test_a_trace_jobs_qos_is_used_when_the_replay_defines_it(
    trace: TraceJob, defined: set[str], qos: str
) -> None:
    assert to_job(trace, SimConfig(), defined).qos == qos


def test_oracle_limits_are_the_duration() -> None:
    assert (
        to_job(tj("a", 0, 100, time_limit_s=900), SimConfig(oracle_limits=True)).time_limit_s == 100
    )


def test_fault_draws_are_seeded_and_positive() -> None:
    first, again, other = (FaultModel(3600, 600, seed) for seed in (1, 1, 2))
    a = [*first.first_failures(50), first.repair_after(), first.fail_after()]
    assert a == [*again.first_failures(50), again.repair_after(), again.fail_after()]
    assert a != [*other.first_failures(50), other.repair_after(), other.fail_after()]
    assert min(a) >= 1
    with pytest.raises(ValueError, match="mtbf_s and mttr_s"):
        FaultModel(0, 600, 1)


def test_failures_requeue_jobs_and_count_lost_work(
    workload: tuple[list[Node], list[TraceJob]],
) -> None:
    cluster, jobs = workload
    result = run(cluster, jobs, EASY, mtbf_s=20_000, mttr_s=600, checkpoint_interval_s=300)
    hit = [r for r in result.jobs if r.failures]
    assert hit and all(r.requeues >= r.failures for r in hit)
    # A failure costs at most one checkpoint interval of the job's GPUs (300 s, or
    # the interval the trace gives the job).
    assert all(
        r.lost_failure_gpu_s <= r.failures * (r.job.checkpoint_interval_s or 0) * r.gpus
        for r in hit
    )
    assert all(r.state == "completed" for r in result.jobs)


@pytest.mark.parametrize(
    ("interval", "start_of_c"),
    [
        (0, 2),  # every cycle backfills: c slips in when it arrives
        # bf_interval 30: the pass at 0 started a; the cycles at 1 and 2 are main
        # passes that stop at b. The periodic cycle 30 s after b came (31) is the next
        # backfill pass, although nothing happened then.
        (30, 31),
    ],
)
def test_a_backfill_interval_backfills_in_the_periodic_pass(interval: int, start_of_c: int) -> None:
    jobs = [
        tj("a", 0, 1000, gpus=6, time_limit_s=1000),
        tj("b", 1, 100, gpus=8, time_limit_s=100),  # waits for a: 1000
        tj("c", 2, 50, gpus=2, time_limit_s=100),  # ends by 1000: may backfill
    ]
    policy = {
        **FIFO,
        "backfill": {"mode": "conservative", "resolution_s": 1, "interval_s": interval},
    }
    result = by_id(run(nodes(1, gpus=8), jobs, policy, interval_s=30))
    assert (result["b"].first_start, result["c"].first_start) == (1000, start_of_c)


def test_the_replays_account_tree_is_the_profiles() -> None:
    profile = profile_from_dict(
        {
            **FIFO,
            "accounts": [
                {"name": "research", "shares": 3},
                {"name": "vision", "parent": "research"},
            ],
            "users": [
                {"name": "ana", "account": "vision", "shares": 2},
                {"name": "svc", "account": "vision", "shares": "parent"},
            ],
        },
        "tree",
    )
    # ana and svc are the profile's; bob's account is only in the trace; root's jobs bill nobody.
    jobs = [
        tj("1", 0, 10, user="ana", account="vision"),
        tj("2", 0, 10, user="svc", account="vision"),
        tj("3", 0, 10, user="bob", account="other"),
        tj("4", 0, 10, user="root", account="root"),
    ]
    sim = Simulation(
        nodes(1),
        jobs,
        profile.build([], 0),
        associations=profile.associations(),
        fairshare=FairshareArgs(),
    )
    assert sim.book.ledger is not None
    tree = sim.book.ledger.tree
    assert tree.names[tree.parent[tree.account("vision")]] == "research"
    assert tree.use_parent[tree.user("vision", "svc")]
    assert tree.shares[tree.user("vision", "ana")] == 2
    assert tree.names[tree.parent[tree.account("other")]] == "root"
    # research 3 of 4 shares; vision its only child: 0.75. other: 1 of 4.
    assert sim.entitlement == {"other": 0.25, "vision": 0.75}


def test_a_steered_replay_carries_out_the_steers_plan_and_wakes_when_told() -> None:
    """The steer sees each plan the profile makes and returns the one carried out: it
    holds both jobs back until 5, when a wake time runs a cycle (nothing else happens
    then, and the cycle at 0 started nobody), and starts b where the profile put a."""
    seen: list[tuple[int, list[str]]] = []

    def steer(snapshot: Snapshot, plan: Plan) -> Plan:
        seen.append((snapshot.now, sorted(plan.starts)))
        if snapshot.now < 5:
            return Plan()
        if snapshot.now == 5:
            return Plan(starts={"b": plan.starts["a"]})
        return plan

    jobs = [tj("a", 0, 10), tj("b", 0, 10)]
    profile = profile_from_dict(FIFO, "fifo")
    result = by_id(replay(nodes(1), jobs, profile, steer=steer, wake=[5]))
    assert (result["b"].first_start, result["a"].first_start) == (5, 15)
    assert seen[:3] == [(0, ["a"]), (5, ["a"]), (15, ["a"])]
