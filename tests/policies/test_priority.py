"""Orderings: Slurm's multifactor priority, shortest job first and least attained service."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from builders import cluster, node
from gpufleet.core.accounts import Account, AccountTree, AccountUsage, User
from gpufleet.core.cycle import SchedulingProfile, run_cycle
from gpufleet.core.job import Job, JobState, Partition, QoS, RunningJob
from gpufleet.core.model import Request
from gpufleet.core.placement import PlacementProfile
from gpufleet.core.snapshot import Snapshot
from gpufleet.policies.fairshare import FairshareArgs, charge
from gpufleet.policies.placement.fit import FirstFit
from gpufleet.policies.priority import (
    LasArgs,
    LeastAttainedService,
    Multifactor,
    MultifactorArgs,
    QueueColumns,
    ShortestJobFirst,
)

QOS = {
    "low": QoS("low", priority=0),
    "normal": QoS("normal", priority=50),
    "high": QoS("high", priority=100),
}
PARTITIONS = {
    "batch": Partition("batch", priority_job_factor=1),
    "urgent": Partition("urgent", priority_job_factor=4),
}
NO_WEIGHTS = {
    f"weight_{k}": 0 for k in ("age", "fairshare", "job_size", "partition", "qos", "assoc")
}


def pending(id: str = "j", **kw: Any) -> Job:
    """A pending 1-GPU job of alice in team under QoS normal on batch, submitted at 0."""
    spec: dict[str, Any] = {
        "user": "alice",
        "account": "team",
        "qos": "normal",
        "partition": "batch",
        "request": Request(gpus=1),
        "submit_time": 0,
        "time_limit_s": 3600,
    }
    return Job(id=id, **(spec | kw))


def snapshot(
    *jobs: Job, accounts: AccountUsage | None = None, fairshare: Mapping[str, float] | None = None
) -> Snapshot:
    """Two idle nodes of 8 GPUs: 16 GPUs in the cluster."""
    return Snapshot(
        state=cluster(node("n1").gpus(8), node("n2").gpus(8)),
        running=(),
        pending=jobs,
        qos=QOS,
        partitions=PARTITIONS,
        now=0,
        fairshare=fairshare or {},
        accounts=accounts,
    )


def team_tree(alice_priority: int = 0) -> AccountTree:
    return AccountTree(
        [Account("team", shares=1), Account("other", shares=1)],
        [User("alice", "team", priority=alice_priority), User("bob", "other", priority=8)],
    )


@pytest.mark.parametrize(
    ("weights", "job", "now", "expected"),
    [
        # age 3600 / 7200 -> 0.5 x 1000 = 500
        ({"weight_age": 1000, "max_age_s": 7200}, pending(), 3600, 500.0),
        # age 10000 is past the 7200 cap -> 1 x 1000 = 1000
        ({"weight_age": 1000, "max_age_s": 7200}, pending(), 10_000, 1000.0),
        # submitted after now (clock skew) -> age 0
        ({"weight_age": 1000, "max_age_s": 7200}, pending(submit_time=50), 0, 0.0),
        # 4 of 16 GPUs -> 0.25 x 800 = 200
        ({"weight_job_size": 800}, pending(request=Request(gpus=4)), 0, 200.0),
        # favour small: 1 - 4/16 = 0.75 x 800 = 600
        ({"weight_job_size": 800, "favor_small": True}, pending(request=Request(gpus=4)), 0, 600.0),
        # a gang of 4 x 8 GPUs asks for 32 of 16: capped at 1 x 800
        ({"weight_job_size": 800}, pending(request=Request(gpus=8, nodes=4)), 0, 800.0),
        # half a GPU: 0.5 / 16 x 3200 = 100
        ({"weight_job_size": 3200}, pending(request=Request(gpu_milli=500)), 0, 100.0),
        # partition batch: PriorityJobFactor 1 over the largest, 4 -> 0.25 x 1000 = 250
        ({"weight_partition": 1000}, pending(), 0, 250.0),
        # partition urgent: 4 / 4 -> 1 x 1000
        ({"weight_partition": 1000}, pending(partition="urgent"), 0, 1000.0),
        # QoS normal: 50 / 100 -> 0.5 x 10000 = 5000
        ({"weight_qos": 10_000}, pending(), 0, 5000.0),
        # QoS low: 0 / 100 -> 0
        ({"weight_qos": 10_000}, pending(qos="low"), 0, 0.0),
        # nice 100 is subtracted whatever the weights
        ({}, pending(priority_nice=100), 0, -100.0),
        # fairshare given by user: 0.3 x 10000 = 3000
        ({"weight_fairshare": 10_000}, pending(), 0, 3000.0),
    ],
)
def test_multifactor_factor_table(
    weights: dict[str, Any], job: Job, now: int, expected: float
) -> None:
    ordering = Multifactor(MultifactorArgs(**(NO_WEIGHTS | weights)))
    snap = snapshot(job, fairshare={"alice": 0.3})
    assert ordering.priorities(snap, [job], now).tolist() == pytest.approx([expected])


def test_multifactor_sums_every_weighted_factor() -> None:
    args = MultifactorArgs(
        weight_age=1000,
        weight_fairshare=2000,
        weight_job_size=1600,
        weight_partition=400,
        weight_qos=100,
        weight_assoc=800,
        max_age_s=1000,
    )
    job = pending(request=Request(gpus=8), qos="high", partition="urgent", priority_nice=7)
    accounts = AccountUsage(team_tree(alice_priority=2), np.zeros(5))
    # age 250/1000 x 1000 = 250; fairshare: nobody ran, alice ties first -> 1 x 2000 = 2000;
    # size 8/16 x 1600 = 800; partition 4/4 x 400 = 400; qos 100/100 x 100 = 100;
    # assoc 2 / 8 (bob's) x 800 = 200; minus nice 7
    # 250 + 2000 + 800 + 400 + 100 + 200 - 7 = 3743
    assert Multifactor(args).priorities(snapshot(job, accounts=accounts), [job], 250)[0] == 3743


def test_multifactor_fairshare_from_the_account_tree() -> None:
    tree = team_tree()
    usage = np.zeros(len(tree))
    usage[tree.user("other", "bob")] = 100.0
    jobs = [pending("a"), pending("b", user="bob", account="other"), pending("x", user="eve")]
    args = MultifactorArgs(**(NO_WEIGHTS | {"weight_fairshare": 1000}))
    snap = snapshot(*jobs, accounts=AccountUsage(tree, usage))
    # Fair Tree: team never ran (LF inf) -> alice 2/2; other -> bob 1/2; eve has no association -> 0
    assert Multifactor(args).priorities(snap, jobs, 0).tolist() == [1000.0, 500.0, 0.0]
    classic = MultifactorArgs(
        **(NO_WEIGHTS | {"weight_fairshare": 1000}), fairshare=FairshareArgs(algorithm="classic")
    )
    # classic: alice 2^0 = 1; bob used everything: U_E 1 over S 0.5 -> 2^-2 = 0.25
    assert Multifactor(classic).priorities(snap, jobs, 0).tolist() == [1000.0, 250.0, 0.0]


def test_multifactor_skips_factors_whose_weight_is_zero() -> None:
    job = pending(request=Request(gpus=8), qos="high", partition="urgent")
    args = MultifactorArgs(**(NO_WEIGHTS | {"weight_qos": 10}))
    f = Multifactor(args).factors(snapshot(job, fairshare={"alice": 1.0}), [job], 10_000)
    # only QoS is weighted: 100 / 100 -> 1; age, size, partition and fairshare read 0
    assert (f.qos[0], f.age[0], f.job_size[0], f.partition[0], f.fairshare[0]) == (1, 0, 0, 0, 0)


def test_multifactor_follows_new_usage() -> None:
    tree = team_tree()
    jobs = [pending("a"), pending("b", user="bob", account="other")]
    ordering = Multifactor(MultifactorArgs(**(NO_WEIGHTS | {"weight_fairshare": 2})))
    alice_ran = AccountUsage(tree, np.array([0, 0, 0, 5.0, 0]))
    bob_ran = AccountUsage(tree, np.array([0, 0, 0, 0, 5.0]))
    # Fair Tree, 2 users: whoever did not run ranks first -> 2/2 x 2 = 2, the other 1/2 x 2 = 1
    assert ordering.priorities(snapshot(*jobs, accounts=alice_ran), jobs, 0).tolist() == [1, 2]
    assert ordering.priorities(snapshot(*jobs, accounts=bob_ran), jobs, 0).tolist() == [2, 1]
    with pytest.raises(ValueError, match="read-only"):
        bob_ran.usage[3] = 1.0


def test_multifactor_finds_new_associations_and_a_new_tree_across_cycles() -> None:
    ordering = Multifactor(MultifactorArgs(**(NO_WEIGHTS | {"weight_assoc": 8})))
    alice, bob = pending("a"), pending("b", user="bob", account="other")
    team = AccountUsage(team_tree(alice_priority=2), np.zeros(5))
    # assoc: alice 2 / 8 (bob's) x 8 = 2, then bob joins the queue: 8 / 8 x 8 = 8
    assert ordering.priorities(snapshot(alice, accounts=team), [alice], 0).tolist() == [2]
    both = snapshot(alice, bob, accounts=team)
    assert ordering.priorities(both, [alice, bob], 0).tolist() == [2, 8]
    # A tree listing bob first (other indices), alice's priority 4: 4 / 8 x 8 = 4
    swapped = AccountTree(
        [Account("team", shares=1), Account("other", shares=1)],
        [User("bob", "other", priority=8), User("alice", "team", priority=4)],
    )
    other = snapshot(alice, bob, accounts=AccountUsage(swapped, np.zeros(5)))
    assert ordering.priorities(other, [alice, bob], 0).tolist() == [4, 8]


def test_multifactor_reads_a_changed_job_afresh_across_cycles() -> None:
    ordering = Multifactor(MultifactorArgs(**(NO_WEIGHTS | {"weight_qos": 100})))
    first = [pending("a", qos="low"), pending("b", qos="high")]
    # QoS low 0/100 -> 0; high 100/100 x 100 = 100
    assert ordering.priorities(snapshot(*first), first, 0).tolist() == [0.0, 100.0]
    # "a" comes back as a new Job under QoS high; "b" left; "c" arrived
    second = [pending("c", qos="normal"), replace(first[0], qos="high")]
    # normal 50/100 x 100 = 50; the new "a": 100
    assert ordering.priorities(snapshot(*second), second, 0).tolist() == [50.0, 100.0]
    # the same jobs under a snapshot whose QoS priorities changed: high is now the only
    # positive one at 100 and normal is missing -> 0
    snap = replace(snapshot(*second), qos={"high": QoS("high", priority=100)})
    assert ordering.priorities(snap, second, 0).tolist() == [0.0, 100.0]


def test_queue_columns_start_afresh_once_departed_jobs_dominate() -> None:
    columns = QueueColumns()
    for k in range(4):
        columns.rows([pending(f"q{k}-{i}") for i in range(600)])
    rows = columns.rows([pending("x"), pending("y")])
    # 2400 rows held, the longest queue 600 (> 2 x 600 + 1024): rebuilt, x and y are rows 0, 1
    assert rows.tolist() == [0, 1]
    assert len(columns.jobs) == 2


def test_multifactor_without_qos_or_partition_priorities_gives_zero() -> None:
    job = pending(qos="plain", partition="flat")
    snap = Snapshot(
        state=cluster(node("n").gpus(8)),
        running=(),
        pending=[job],
        qos={"plain": QoS("plain")},
        partitions={"flat": Partition("flat", priority_job_factor=0)},
        now=0,
    )
    args = MultifactorArgs(**(NO_WEIGHTS | {"weight_qos": 100, "weight_partition": 100}))
    # largest QoS priority and PriorityJobFactor are both 0 -> both factors 0
    assert Multifactor(args).priorities(snap, [job], 0).tolist() == [0.0]


@pytest.mark.parametrize(
    "key",
    [
        "weight_age",
        "weight_fairshare",
        "weight_job_size",
        "weight_partition",
        "weight_qos",
        "weight_assoc",
    ],
)
def test_multifactor_args_reject_negative_weights_naming_the_key(key: str) -> None:
    with pytest.raises(ValidationError, match=key):
        MultifactorArgs(**{key: -1})


def test_multifactor_args_carry_slurms_names() -> None:
    slurm = {k: f.description for k, f in MultifactorArgs.model_fields.items() if f.description}
    assert slurm["weight_qos"] == "PriorityWeightQOS"
    assert slurm["max_age_s"].startswith("PriorityMaxAge")
    assert slurm["favor_small"].startswith("PriorityFavorSmall")
    with pytest.raises(ValidationError, match="max_age_s"):
        MultifactorArgs(max_age_s=0)


def test_multifactor_orders_the_cycle() -> None:
    """One node of 8 GPUs, two 8-GPU jobs: the under-served user's job starts."""
    tree = team_tree()
    usage = np.zeros(len(tree))
    usage[tree.user("team", "alice")] = 50.0
    early = pending("early", request=Request(gpus=8))
    fair = pending("fair", request=Request(gpus=8), user="bob", account="other", submit_time=10)
    snap = Snapshot(
        state=cluster(node("n").gpus(8)),
        running=(),
        pending=[early, fair],
        qos=QOS,
        partitions=PARTITIONS,
        now=20,
        accounts=AccountUsage(tree, usage),
    )
    profile = SchedulingProfile(Multifactor(), PlacementProfile("first", [(FirstFit(), 1.0)]))
    plan = run_cycle(snap, profile)
    # bob's account never ran: fairshare 1 x 10000 beats alice's 0.5 x 10000 and 10 s more age
    assert list(plan.starts) == ["fair"]
    assert plan.reasons == {"early": "Resources"}


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (pending(time_limit_s=7200), -7200.0),  # no estimate: the time limit
        (pending(time_limit_s=7200, runtime_estimate_s=600), -600.0),  # the predictor's estimate
        # an estimate of 0 still counts, as the 1 s any run holds
        (pending(time_limit_s=7200, runtime_estimate_s=0), -1.0),
        (pending(time_limit_s=7200, runtime_estimate_s=9000), -7200.0),  # never past the limit
    ],
)
def test_sjf_runtime_estimate(job: Job, expected: float) -> None:
    assert ShortestJobFirst().priorities(snapshot(job), [job], 0).tolist() == [expected]


def test_sjf_orders_shortest_first() -> None:
    jobs = [
        pending("long", time_limit_s=900),
        pending("short", time_limit_s=60),
        pending("mid", time_limit_s=300),
    ]
    prio = ShortestJobFirst().priorities(snapshot(*jobs), jobs, 0)
    assert [jobs[i].id for i in np.argsort(-prio, kind="stable")] == ["short", "mid", "long"]


def test_las_continuous_prefers_least_attained_service() -> None:
    # attained GPU-seconds: 8 GPUs x 100 s = 800; 1 GPU x 500 s = 500; never ran = 0
    jobs = [
        pending("big", gpu_seconds_attained=800.0),
        pending("small", gpu_seconds_attained=500.0),
        pending("new"),
    ]
    prio = LeastAttainedService().priorities(snapshot(*jobs), jobs, 0)
    assert prio.tolist() == [-800.0, -500.0, 0.0]


@pytest.mark.parametrize(
    ("attained", "queue"),
    [
        (0.0, 0),  # below the first threshold (3600)
        (3599.0, 0),
        (3600.0, 1),  # reaching a threshold demotes: 3600 <= x < 36000
        (20_000.0, 1),
        (36_000.0, 2),  # past the last threshold: the last queue
        (1e9, 2),
    ],
)
def test_las_discretised_queues(attained: float, queue: int) -> None:
    las = LeastAttainedService(LasArgs(thresholds_gpu_s=(3600.0, 36_000.0)))
    job = pending(gpu_seconds_attained=attained)
    assert las.priorities(snapshot(job), [job], 0).tolist() == [-queue]


def test_las_jobs_in_one_queue_tie_so_the_cycle_keeps_submission_order() -> None:
    las = LeastAttainedService(LasArgs(thresholds_gpu_s=(1000.0,)))
    jobs = [pending("a", gpu_seconds_attained=900.0), pending("b", gpu_seconds_attained=10.0)]
    # both in queue 0 (below 1000): equal priorities, unlike continuous LAS
    assert las.priorities(snapshot(*jobs), jobs, 0).tolist() == [0.0, 0.0]


@pytest.mark.parametrize("thresholds", [(0.0,), (10.0, 10.0), (20.0, 10.0), (-5.0,)])
def test_las_args_reject_thresholds_not_increasing(thresholds: tuple[float, ...]) -> None:
    with pytest.raises(ValidationError, match="thresholds_gpu_s"):
        LasArgs(thresholds_gpu_s=thresholds)


def test_names_are_registry_keys() -> None:
    assert (Multifactor.NAME, ShortestJobFirst.NAME, LeastAttainedService.NAME) == (
        "multifactor",
        "sjf",
        "las",
    )


def test_fairshare_converges_to_the_shares_over_a_long_run() -> None:
    """The issue's scenario, through the real cycle: three accounts of 60, 30 and 10
    shares keep one node of 8 GPUs busy with 1-GPU, 100 s jobs for 300 cycles; every
    100 s the usage is charged and decayed, finished jobs leave and the cycle starts
    more. Each account's share of the usage approaches its share of the tree.
    """
    tree = AccountTree(
        [Account("a", shares=60), Account("b", shares=30), Account("c", shares=10)],
        [User("ua", "a"), User("ub", "b"), User("uc", "c")],
    )
    state = cluster(node("n").gpus(8))
    args = MultifactorArgs()
    profile = SchedulingProfile(Multifactor(args), PlacementProfile("first", [(FirstFit(), 1.0)]))
    accounts = AccountUsage(tree, np.zeros(len(tree)))
    running: list[RunningJob] = []
    serial = 0
    for now in range(0, 30_000, 100):
        accounts = charge(accounts, running, state, QOS, 100 if now else 0, args.fairshare)
        for r in running:  # every job runs exactly one step
            for a in r.assignments:
                state.release(a)
        queue = [
            pending(f"{u}{serial + k}", user=u, account=a, submit_time=now)
            for a, u in (("a", "ua"), ("b", "ub"), ("c", "uc"))
            for k in range(8)
        ]
        serial += 8
        snap = Snapshot(state, (), queue, QOS, PARTITIONS, now, accounts=accounts)
        plan = run_cycle(snap, profile)
        by_id = {j.id: j for j in queue}
        running = []
        for job_id, placed in plan.starts.items():
            for a in placed:
                state.allocate(a)
            job = replace(by_id[job_id], state=JobState.RUNNING, start_time=now)
            running.append(RunningJob(job, tuple(placed), now + 100))
        assert len(running) == 8  # the node never idles
    rolled = tree.rollup(accounts.usage)
    shares = [rolled[tree.account(a)] / rolled[0] for a in "abc"]
    assert shares == pytest.approx([0.6, 0.3, 0.1], abs=0.03)


@pytest.mark.parametrize(
    ("period", "now", "ages"),
    [
        # Without a period, age counts to now: 700 - 0 and 700 - 650, over 1000.
        (0, 700, [0.7, 0.05]),
        # PriorityCalcPeriod 300: last recomputed at 600, so 600 - 0 and, for the
        # job submitted after it, 0.
        (300, 700, [0.6, 0.0]),
        (300, 900, [0.9, 0.25]),  # recomputed at 900: 900 - 650
    ],
)
def test_age_counts_to_the_last_priority_calculation(
    period: int, now: int, ages: list[float]
) -> None:
    args = MultifactorArgs(**{**NO_WEIGHTS, "weight_age": 1}, max_age_s=1000, calc_period_s=period)
    jobs = (pending("old", submit_time=0), pending("new", submit_time=650))
    factors = Multifactor(args).factors(snapshot(*jobs), jobs, now)
    assert factors.age.tolist() == pytest.approx(ages)


@pytest.mark.parametrize(
    ("period", "now", "wake"),
    [(0, 700, None), (300, 700, 900), (300, 900, 1200)],  # None: priorities move any time
)
def test_a_cycle_wakes_when_the_priorities_are_next_recomputed(
    period: int, now: int, wake: int | None
) -> None:
    ordering = Multifactor(MultifactorArgs(calc_period_s=period))
    profile = SchedulingProfile(ordering, PlacementProfile("first-fit", [(FirstFit(), 1.0)]))
    plan = run_cycle(replace(snapshot(pending("j", submit_time=0)), now=now), profile)
    assert plan.clocked
    assert plan.wake == wake


steps = st.lists(
    st.tuples(
        st.integers(0, 400),  # seconds the clock moves
        st.sampled_from(["none", "arrive", "stranger", "leave", "usage", "qos", "nice"]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_priorities_kept_between_recalculations_are_those_computed_afresh(
    changes: list[tuple[int, str]],
) -> None:
    """One ordering asked cycle after cycle (with ``calc_period_s`` it keeps each job's
    priority until the next recalculation) agrees with a fresh one every time."""
    args = MultifactorArgs(calc_period_s=300, weight_job_size=100)
    kept = Multifactor(args)
    jobs = [pending(f"j{i}", submit_time=10 * i) for i in range(6)]  # alice's, in team
    tree = team_tree()
    usage = AccountUsage(tree, np.zeros(len(tree)))
    qos, now = dict(QOS), 100
    base = snapshot()  # one cluster state throughout, as a driver keeps it
    for i, (step, change) in enumerate(changes):
        now += step
        if change == "arrive":
            jobs.append(pending(f"new{i}", submit_time=now, qos="high"))
        elif change == "stranger":  # bob's first job may come mid-period: a new association
            jobs.append(pending(f"bob{i}", submit_time=now, user="bob", account="other"))
        elif change == "leave" and jobs:
            jobs.pop(0)
        elif change == "usage":  # a new fairshare view: a new object
            usage = AccountUsage(tree, np.arange(len(tree), dtype=np.float64) * (i + 1))
        elif change == "qos":  # the same table, changed
            qos["normal"] = QoS("normal", priority=10 * i)
        elif change == "nice" and jobs:  # a changed job is a new object
            jobs[0] = replace(jobs[0], priority_nice=5 * i)
        snap = replace(base, pending=jobs, accounts=usage, qos=qos, now=now)
        fresh = Multifactor(args).priorities(snap, jobs, now)
        assert kept.priorities(snap, jobs, now).tolist() == fresh.tolist()
