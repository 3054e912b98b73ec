"""Columns kept across cycles, limits judged for many jobs at once, and the windowed walk.

The cycle walks runs of jobs that change nothing in compiled windows; these tests
hold it to the plan a job-by-job walk makes, and its caches to the plan a
fresh profile makes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from operator import attrgetter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, node
from gpufleet.core.columns import Rows
from gpufleet.core.cycle import SchedulingProfile, run_cycle
from gpufleet.core.job import Job, JobState, Partition, QoS, RunningJob
from gpufleet.core.placement import PlacementContext, PlacementProfile, Placer
from gpufleet.core.plan import NODE_NOT_AVAIL, Plan
from gpufleet.core.protocols import Admission
from gpufleet.core.snapshot import QueueView, Snapshot, Tally
from gpufleet.core.state import Assignment, BoolArray, IntArray
from gpufleet.core.timeline import NEVER, RunningEvents, Timeline
from gpufleet.policies.backfill import Backfill, BackfillArgs
from gpufleet.policies.limits import PartitionLimits, QosLimits
from gpufleet.policies.placement.fit import FirstFit
from gpufleet.policies.preemption import CheapestVictims
from gpufleet.policies.queue import Fifo
from scenario.harness import QueuedJobBuilder, Scenario, qjob


def test_rows_follow_object_identity() -> None:
    rows: Rows[Job] = Rows()
    a, b = qjob("a").gpus(1).job(), qjob("b").gpus(1).job()
    assert rows.rows([a, b]).tolist() == [0, 1]
    # The same objects keep their rows in any order; a changed b is a new object: row 2.
    b2 = replace(b, time_limit_s=60)
    assert rows.rows([b2, a, b]).tolist() == [2, 0, 1]
    assert rows.values("limit", attrgetter("time_limit_s")).tolist() == [3600, 3600, 60]
    # One new object listed twice gets one row.
    c = qjob("c").gpus(1).job()
    assert rows.rows([c, b, c]).tolist() == [3, 1, 3]
    # Codes by first appearance: a, b, b2 are alice's, c too -> one key.
    codes, keys = rows.codes("user", attrgetter("user"))
    assert (codes.tolist(), keys) == ([0, 0, 0, 0], ["alice"])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 70), min_size=1, max_size=12))
def test_columns_grown_in_steps_read_as_computed_at_once(steps: list[int]) -> None:
    """Columns grow into room kept behind them: every array handed out keeps its values,
    and the last equals the column computed over every row at once."""
    rows: Rows[Job] = Rows()
    seen: list[Job] = []
    handed = []
    for k, step in enumerate(steps):
        new = [qjob(f"j{k}-{i}").gpus(1).limit(60 * (i % 7 + 1)).job() for i in range(step)]
        seen += new
        rows.rows(seen)
        limits = rows.values("limit", attrgetter("time_limit_s"))
        ids = rows.values("id", attrgetter("id"), object)
        codes, keys = rows.codes("limit", attrgetter("time_limit_s"))
        handed.append((limits, limits.tolist(), ids, ids.tolist(), codes, codes.tolist()))
        assert limits.tolist() == [j.time_limit_s for j in seen]
        assert ids.tolist() == [j.id for j in seen]
        assert [keys[c] for c in codes.tolist()] == [j.time_limit_s for j in seen]
    for limits, limit_list, ids, id_list, codes, code_list in handed:
        assert (limits.tolist(), ids.tolist(), codes.tolist()) == (limit_list, id_list, code_list)


def test_rows_start_afresh_once_departed_objects_dominate() -> None:
    rows: Rows[Job] = Rows()
    queue = [qjob(f"old{i}").gpus(1).job() for i in range(2000)]
    rows.rows(queue)
    # One job asked alone (as whether an arrival sorts past the queue's cut) keeps the
    # queue's rows: it is row 2000, and the queue's jobs keep theirs.
    assert rows.rows([qjob("x").gpus(1).job()]).tolist() == [2000]
    assert rows.rows(queue[:3]).tolist() == [0, 1, 2]
    # Queues of 1,000 new jobs: the rows outnumber 2 x 2000 + 1024 = 5024 only after
    # the fourth (2001 + 4 x 1000), so the fifth starts afresh: its jobs are rows 0..999.
    for k in range(5):
        fresh = rows.rows([qjob(f"q{k}-{i}").gpus(1).job() for i in range(1000)])
        assert fresh[0] == (0 if k == 4 else 2001 + 1000 * k)
    assert len(rows.objects) == 1000


QOS_LIMITS = st.builds(
    QoS,
    name=st.just("capped"),
    max_wall_s=st.sampled_from([0, 600, 3600]),
    max_jobs_per_user=st.integers(0, 3),
    max_gpus_per_user=st.integers(0, 6),
    max_gpus_per_account=st.integers(0, 10),
    group_gpus=st.integers(0, 16),
)
PARTITION_LIMITS = st.builds(
    Partition,
    name=st.just("narrow"),
    max_time_s=st.sampled_from([0, 600, 3600]),
    allowed_accounts=st.sampled_from([(), ("x",), ("x", "y")]),
    allowed_qos=st.sampled_from([(), ("capped",), ("free",)]),
)


@st.composite
def queued(draw: st.DrawFn, prefix: str) -> list[Job]:
    jobs = []
    for i in range(draw(st.integers(0, 12))):
        b = qjob(f"{prefix}{i}").limit(draw(st.sampled_from([60, 600, 3600, 7200])))
        user = draw(st.sampled_from(["u0", "u1", "u2"]))
        b.user(user, account=draw(st.sampled_from(["x", "y", "z"])))
        b.qos(draw(st.sampled_from(["capped", "free"])))
        b.partition(draw(st.sampled_from(["narrow", "wide"])))
        shape = draw(st.sampled_from(["one", "two", "half", "mig"]))
        if shape == "mig":
            b.mig("3g.40gb")
        elif shape == "half":
            b.fraction(500)
        else:
            b.gpus(1 if shape == "one" else 2)
        jobs.append(b.job())
    return jobs


@settings(max_examples=60)  # about 2 s
@given(QOS_LIMITS, PARTITION_LIMITS, queued("r"), queued("p"))
def test_limits_judge_many_jobs_as_each_alone(
    qos: QoS, partition: Partition, running: list[Job], pending: list[Job]
) -> None:
    snap = Snapshot(
        state=cluster(node("n").gpus(8)),
        running=(),
        pending=pending,
        qos={"capped": qos, "free": QoS("free")},
        partitions={"narrow": partition, "wide": Partition("wide")},
        now=0,
    )
    tally = Tally()
    for j in running:
        tally.add(j)
    table: Rows[Job] = Rows()
    queue = QueueView(table, table.rows(pending))
    for plugin in (QosLimits(), PartitionLimits()):
        alone = [plugin.admit(snap, j, tally) for j in pending]
        assert plugin.admit_all(snap, queue, tally).tolist() == alone
    # A window sees the same reasons as the whole view, and a start updates them.
    if pending:
        half = queue.window(len(pending) // 2, len(pending))
        tally.add(pending[0])
        alone = [QosLimits().admit(snap, j, tally) for j in pending[len(pending) // 2 :]]
        assert QosLimits().admit_all(snap, half, tally).tolist() == alone


def test_tally_of_running_sums_per_key() -> None:
    jobs = [
        qjob("a").gpus(2).user("u0", "x").job(state=JobState.RUNNING, start_time=0),
        qjob("b").fraction(500).user("u0", "x").job(state=JobState.RUNNING, start_time=0),
        qjob("c").gpus(1).user("u1", "x").qos("high").job(state=JobState.RUNNING, start_time=0),
    ]
    running = [RunningJob(j, (), 100) for j in jobs]
    table = RunningEvents()
    tally = Tally.of_running(table, table.rows(running))
    # u0 under normal: 2 jobs, 2000 + 500 milli; account x: 2500 normal, 1000 high.
    assert tally.user_jobs == {("normal", "u0"): 2, ("high", "u1"): 1}
    assert tally.user_milli == {("normal", "u0"): 2500, ("high", "u1"): 1000}
    assert tally.account_milli == {("normal", "x"): 2500, ("high", "x"): 1000}
    assert tally.qos_milli == {"normal": 2500, "high": 1000}


def test_a_tally_of_running_counts_the_starts_made_before_it_is_read() -> None:
    """It sums the running jobs when first read, and the cycle's starts and preemptions
    made before then count as if made after."""
    running = [qjob("a").gpus(2).user("u0", "x").job(state=JobState.RUNNING, start_time=0)]
    table = RunningEvents()
    rows = table.rows([RunningJob(j, (), 100) for j in running])
    started = qjob("b").gpus(1).user("u0", "x").job()
    lazy = Tally.of_running(table, rows)
    lazy.add(started)
    lazy.add(running[0], -1)
    eager = Tally.of_running(table, rows)
    assert eager.user_jobs == {("normal", "u0"): 1}  # read first: summed now
    eager.add(started)
    eager.add(running[0], -1)
    for kind in ("user_jobs", "user_milli", "account_milli", "qos_milli"):
        assert getattr(lazy, kind) == getattr(eager, kind), kind
    assert lazy.user_milli == {("normal", "u0"): 1000}


class OneByOne:
    """The same limit without ``admit_all``: the cycle must consider every job alone."""

    def __init__(self, inner: QosLimits | PartitionLimits) -> None:
        self.inner = inner

    def admit(self, snapshot: Snapshot, job: Job, tally: Tally) -> str:
        return self.inner.admit(snapshot, job, tally)


SHAPES = ["one", "two", "four", "eight", "gang", "half"]


def busy_snapshot(seed: int, jobs: int) -> Snapshot:
    """8 nodes x 8 GPUs partly busy, and a queue of mixed shapes from 6 users under limits."""
    rng = np.random.default_rng(seed)
    state = cluster(*(node(f"n{i}").gpus(8) for i in range(8)))
    placer = Placer(PlacementProfile("first-fit", [(FirstFit(), 1.0)]))
    running = []
    for i in range(20):
        b = qjob(f"r{i}").gpus(int(rng.choice([1, 2, 4]))).limit(int(rng.integers(100, 5000)))
        j = b.user(f"u{i % 6}").job(state=JobState.RUNNING, start_time=0)
        placed = placer.place(state, j.request)
        if placed is not None:
            running.append(RunningJob(j, tuple(placed), j.time_limit_s))
    pending = []
    for i in range(jobs):
        b = qjob(f"p{i:04d}").submit(int(rng.integers(0, 1000)))
        b.limit(int(rng.choice([30, 300, 3600, 7200, 90_000])))
        b.user(f"u{rng.integers(6)}", account=f"a{rng.integers(2)}")
        b.qos(str(rng.choice(["normal", "capped"])))
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        if shape == "gang":
            b.gpus(8).gang(2)
        elif shape == "half":
            b.fraction(500)
        else:
            b.gpus({"one": 1, "two": 2, "four": 4, "eight": 8}[shape])
        pending.append(b.job())
    return Snapshot(
        state=state,
        running=running,
        pending=pending,
        qos={
            "normal": QoS("normal"),
            "capped": QoS("capped", max_gpus_per_user=4, max_jobs_per_user=3),
        },
        partitions={"main": Partition("main", max_time_s=86_400)},
        now=10,
    )


BACKFILL = {
    "none": None,
    "easy": BackfillArgs(mode="easy"),
    "easy-capped": BackfillArgs(mode="easy", max_job_test=40),
    "easy-2": BackfillArgs(mode="easy", max_job_test=2),
    "easy-16": BackfillArgs(mode="easy", max_job_test=16),  # reached within a window (seed 2)
    "conservative": BackfillArgs(mode="conservative"),
}


def profile(backfill: str, admission: list[Admission]) -> SchedulingProfile:
    args = BACKFILL[backfill]
    return SchedulingProfile(
        ordering=Fifo(),
        placement=PlacementProfile("first-fit", [(FirstFit(), 1.0)]),
        admission=admission,
        backfill=None if args is None else Backfill(args),
    )


def same(a: Plan, b: Plan) -> None:
    assert a.starts == b.starts
    assert (a.expected_start, a.expected_nodes) == (b.expected_start, b.expected_nodes)
    assert list(a.reasons.items()) == list(b.reasons.items())
    assert a.stats["tested"] == b.stats["tested"]


@pytest.mark.parametrize("backfill", ["none", "easy", "easy-capped", "easy-16", "conservative"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_windows_settle_jobs_as_the_job_by_job_walk_does(backfill: str, seed: int) -> None:
    snap = busy_snapshot(seed, 400)
    alone = run_cycle(snap, profile(backfill, [OneByOne(PartitionLimits()), OneByOne(QosLimits())]))
    windowed = run_cycle(snap, profile(backfill, [PartitionLimits(), QosLimits()]))
    same(windowed, alone)
    # 400 jobs on 64 GPUs: most wait, with limits, Priority or Resources as reasons.
    assert len(windowed.reasons) > 300
    assert {"QOSMaxGPUsPerUserLimit", "Priority"} <= set(windowed.reasons.values())


def test_a_profile_reused_across_cycles_plans_as_a_fresh_one() -> None:
    snap = busy_snapshot(3, 300)
    shared = profile("easy", [PartitionLimits(), QosLimits()])
    run_cycle(snap, shared)
    # Next cycle: two jobs finished, the head of the queue changed its limit (a new object
    # under the same id), and a job arrived.
    running = list(snap.running[2:])
    head = replace(snap.pending[0], time_limit_s=60)
    arrived = qjob("late").gpus(1).submit(5).job()
    later = replace(
        snap, running=running, pending=[head, *snap.pending[1:], arrived], now=snap.now + 10
    )
    for r in snap.running[:2]:
        for a in r.assignments:
            later.state.release(a)
    same(
        run_cycle(later, shared),
        run_cycle(later, profile("easy", [PartitionLimits(), QosLimits()])),
    )


def test_a_profile_reused_across_cycles_sees_node_health_and_shape() -> None:
    # An 8-GPU job fits only a (b has 4 GPUs): while a is down it fits no node; once a is
    # back it starts there, but not once a GPU of a is cut into MIG slices (7 whole
    # GPUs left); with an 8-GPU c added, it starts on c.
    state = cluster(node("a").gpus(8), node("b").gpus(4))
    big = qjob("big").gpus(8).job()
    snap = Snapshot(
        state=state,
        running=(),
        pending=[big],
        qos={"normal": QoS("normal")},
        partitions={"main": Partition("main")},
        now=0,
    )
    shared = profile("easy", [])
    state.healthy[0] = False
    assert run_cycle(snap, shared).reasons == {"big": NODE_NOT_AVAIL}
    state.healthy[0] = True
    assert [a.node for a in run_cycle(snap, shared).starts["big"]] == [0]
    state.set_mig_layout("a", 0, (("1g.10gb", 0),))
    assert run_cycle(snap, shared).reasons == {"big": NODE_NOT_AVAIL}
    state.add_node(node("c").gpus(8).build())
    assert [a.node for a in run_cycle(snap, shared).starts["big"]] == [2]


def test_a_profile_reused_across_cycles_sees_its_partitions_change() -> None:
    # An 8-GPU job fits only a, which is busy: it waits for resources, but fits no node
    # while its partition holds b alone.
    state = cluster(node("a").gpus(8).used(8), node("b").gpus(4))
    snap = Snapshot(
        state=state,
        running=(),
        pending=[qjob("big").gpus(8).job()],
        qos={"normal": QoS("normal")},
        partitions={"main": Partition("main")},
        now=0,
    )
    only_b = replace(snap, partitions={"main": Partition("main", nodes=("b",))})
    shared = profile("easy", [])
    for s, reason in [(snap, "Resources"), (only_b, NODE_NOT_AVAIL), (snap, "Resources")]:
        assert run_cycle(s, shared).reasons == {"big": reason}


def carried_out(snap: Snapshot, plan: Plan) -> Snapshot:
    """``snap`` once ``plan``'s starts run (on its state)."""
    running = list(snap.running)
    for job in snap.pending:
        if job.id in plan.starts:
            assignments = tuple(plan.starts[job.id])
            for a in assignments:
                snap.state.allocate(a)
            started = replace(job, state=JobState.RUNNING, start_time=snap.now)
            running.append(RunningJob(started, assignments, snap.now + job.time_limit_s))
    pending = [j for j in snap.pending if j.id not in plan.starts]
    return replace(snap, running=running, pending=pending)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    backfill=st.sampled_from(["none", "easy", "easy-2", "conservative"]),
    later=st.integers(1, 6000),
)
def test_a_settled_plan_holds_while_only_the_clock_moves(
    seed: int, backfill: str, later: int
) -> None:
    """What ``run_cycle``'s ``settled`` rests on: once a cycle starts nobody, a cycle
    later on the same jobs, nobody having ended, starts nobody either and gives the
    same reasons; with the settled plan it skips the walk."""
    limits: list[Admission] = [PartitionLimits(), QosLimits()]
    shared = profile(backfill, limits)
    snap = busy_snapshot(seed, 150)
    settled = run_cycle(snap, shared)
    while settled.starts:  # a backfill test limit may leave some for the next cycle
        snap = carried_out(snap, settled)
        settled = run_cycle(snap, shared)
    ends = [r.expected_end for r in snap.running]
    moved = replace(snap, now=min(snap.now + later, min(ends, default=NEVER) - 1))
    fresh = run_cycle(moved, profile(backfill, limits))
    reused = run_cycle(moved, shared, settled=settled)
    assert not fresh.starts and not fresh.preemptions
    assert (reused.starts, reused.reasons) == (fresh.starts, fresh.reasons)
    assert reused.considered == fresh.considered and reused.stats["tested"] == 0
    assert fresh.stats["tested"] > 0 or backfill == "none"


def test_a_settled_plan_is_not_taken_on_a_new_order_or_with_a_clocked_plugin() -> None:
    limits: list[Admission] = [PartitionLimits(), QosLimits()]
    shared = profile("easy", limits)
    snap = busy_snapshot(1, 150)
    snap = carried_out(snap, run_cycle(snap, shared))
    settled = run_cycle(snap, shared)
    assert not settled.starts
    # The last job is resubmitted earliest: a new first job.
    first = replace(snap.pending[-1], submit_time=-1)
    moved = replace(snap, pending=[first, *snap.pending[:-1]], now=snap.now + 1)
    plan = run_cycle(moved, shared, settled=settled)
    assert plan.considered[0] == first.id and plan.stats["tested"] > 0
    assert plan.reasons == run_cycle(moved, profile("easy", limits)).reasons
    # Nor while another plugin reads the clock: a preemptor's exempt times pass.
    later = replace(snap, now=snap.now + 1)
    preempting = replace(shared, preemption=CheapestVictims())
    assert run_cycle(later, shared, settled=settled).stats["tested"] == 0
    assert run_cycle(later, preempting, settled=settled).stats["tested"] > 0
    # Nor on another cluster: a node failed (or came, left, or changed partition).
    later.state.healthy[0] = False
    assert run_cycle(later, shared, settled=settled).stats["tested"] > 0


def test_a_timeline_over_flattened_running_jobs_sees_the_same_releases() -> None:
    snap = busy_snapshot(4, 0)
    flattened = RunningEvents()
    request = qjob("q").gpus(4).job().request
    for running in (snap.running, snap.running[5:], snap.running[::2]):
        shared = Timeline(snap.state, snap.now, 60, running, flattened)
        fresh = Timeline(snap.state, snap.now, 60, running)
        assert shared.node_times(request).tolist() == fresh.node_times(request).tolist()


def flattened_entries(table: RunningEvents, rows: IntArray) -> list[list[tuple[int, ...]]]:
    """Each kind of entry of ``table.live(rows)``, owners as job ids, in a canonical order;
    and the tasks and GPU shares must come in order of their ends."""
    flat = table.live(rows)
    assert (np.diff(flat.end) >= 0).all() and (np.diff(flat.g_end) >= 0).all()
    out = []
    for matrix in (flat.tasks, flat.shares, flat.mig):
        owners = [int(table.objects[o].job.id[1:]) for o in matrix[0].tolist()]
        out.append(sorted(zip(owners, *matrix[1:].tolist(), strict=True)))
    return out


def running_job(i: int, end: int, places: list[tuple[int, int]]) -> RunningJob:
    """Job ``r{i}`` ending at ``end``, a task per (node, GPUs) place, one MIG slice on the first."""
    tasks = tuple(
        Assignment(n, tuple(range(g)), 1000 if g else 0, 0, 100 * (i + 1), 7 * i, () if k else (i,))
        for k, (n, g) in enumerate(places)
    )
    j = qjob(f"r{i}").gpus(1).job(state=JobState.RUNNING, start_time=0)
    return RunningJob(j, tasks, end)


jobs_ = st.lists(
    st.tuples(
        st.integers(0, 50),
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=12,
)


CHANGES = st.sampled_from(["none", "end", "checkpoint"])


@settings(max_examples=80, deadline=None)
@given(jobs_, st.lists(st.lists(st.tuples(st.integers(0, 11), CHANGES)), max_size=6))
def test_running_jobs_flattened_across_cycles_match_a_fresh_flattening(
    specs: list[tuple[int, list[tuple[int, int]]]], cycles: list[list[tuple[int, str]]]
) -> None:
    # Each cycle runs some of the jobs; a job may come back changed (a new object): it
    # ends 1000 s later, as a driver hands a job whose expected end moved, or only its
    # job changed, as at a checkpoint.
    pool = [running_job(i, end, places) for i, (end, places) in enumerate(specs)]
    kept = RunningEvents()
    for cycle in cycles:
        running: dict[int, RunningJob] = {}
        for i, change in cycle:
            if i < len(pool):
                r = pool[i]
                if change == "end":
                    pool[i] = replace(r, expected_end=r.expected_end + 1000)
                elif change == "checkpoint":
                    pool[i] = replace(r, job=replace(r.job, last_checkpoint=1))
                running[i] = pool[i]
        jobs = list(running.values())
        fresh = RunningEvents()
        assert flattened_entries(kept, kept.rows(jobs)) == flattened_entries(
            fresh, fresh.rows(jobs)
        )


timeline_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "ask"]),
        st.sampled_from(["r0", "r3", "new1", "new2", "new3"]),  # r0, r3 run (if placed)
        st.integers(0, 7),
        st.integers(0, 3),
        st.integers(0, 5000),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(timeline_ops)
def test_a_timeline_changed_as_it_is_asked_answers_as_one_built_afresh(
    ops: list[tuple[str, str, int, int, int]],
) -> None:
    # Holders change between questions, as a cycle's starts and preemptions change them:
    # a fresh timeline given the same changes at once answers the same.
    snap = busy_snapshot(5, 0)
    requests = [qjob("q").gpus(1).job().request, qjob("q").gpus(4).job().request]
    kept = Timeline(snap.state, snap.now, 60, snap.running, RunningEvents())
    done: list[tuple[str, str, int, int, int]] = []
    for op in [*ops, ("ask", "", 0, 0, 0)]:
        if op[0] == "ask":
            fresh = Timeline(snap.state, snap.now, 60, snap.running)
            for kind, key, n, gpus, end in done:
                if kind == "add":
                    fresh.add(key, [Assignment(n, tuple(range(gpus)), 1000)], end)
                else:
                    fresh.remove(key)
            for r in requests:
                assert kept.node_times(r).tolist() == fresh.node_times(r).tolist()
            continue
        kind, key, n, gpus, end = op
        if kind == "add":
            kept.add(key, [Assignment(n, tuple(range(gpus)), 1000)], end)
        else:
            kept.remove(key)
        done.append(op)


def greedy(tag: str, count: int) -> list[QueuedJobBuilder]:
    """Jobs a QoS limit keeps pending (2 GPUs under a 1-GPU cap): a run that changes nothing."""
    return [qjob(f"{tag}{i:02d}").gpus(2).qos("capped").submit(10) for i in range(count)]


CAPPED = [QoS("normal"), QoS("capped", max_gpus_per_user=1)]


def backfill_before_a_hold() -> Scenario:
    # a: 6 of 8 GPUs busy until 1000; b and c full. big is held on a from 1000, so
    # a's 2 free GPUs take only jobs ending by then: short (ends 310), not long (3610).
    sc = Scenario(nodes=[node("a").gpus(8), node("b").gpus(8), node("c").gpus(8)], now=10)
    sc.qos = CAPPED
    sc.run(qjob("ra").gpus(6).limit(1000), start=0, on="a")
    sc.run(qjob("rb").gpus(8).limit(2000), start=0, on="b")
    sc.run(qjob("rc").gpus(8).limit(3000), start=0, on="c")
    sc.submit(qjob("big").gpus(8).submit(0), qjob("long").gpus(2).submit(1))
    sc.submit(*greedy("g", 30), qjob("short").gpus(2).limit(300).submit(11))
    return sc.submit(*greedy("h", 30), qjob("short2").gpus(2).limit(300).submit(12))


def a_partition_not_yet_waiting() -> Scenario:
    # Only 2 jobs are tested: wide waits in main, first starts on c's free GPU; second
    # is not tested, and as the first of side to wait it waits for Resources, not Priority.
    sc = Scenario(nodes=[node("a").gpus(8), node("b").gpus(8), node("c").gpus(8)], now=10)
    sc.qos = CAPPED
    sc.partitions = [Partition("main", nodes=("a", "b")), Partition("side", nodes=("c",))]
    sc.run(qjob("ra").gpus(8).limit(1000), start=0, on="a")
    sc.run(qjob("rb").gpus(8).limit(1000), start=0, on="b")
    sc.run(qjob("rc").gpus(6).limit(1000), start=0, on="c")
    sc.submit(qjob("wide").gpus(8).partition("main"), qjob("first").gpus(1).partition("side"))
    sc.submit(*greedy("g", 30), qjob("second").gpus(1).partition("side").submit(11))
    return sc


def a_blocked_queue() -> Scenario:
    # No backfill: head waits and blocks the partition, so huge2 waits for Priority
    # though its shape never fits (huge, before head, said ReqNodeNotAvail).
    sc = Scenario(nodes=[node("a").gpus(8)], now=10)
    sc.qos = CAPPED
    sc.run(qjob("ra").gpus(4).limit(1000), start=0, on="a")
    sc.submit(qjob("huge").gpus(16), qjob("head").gpus(8).submit(1), *greedy("g", 30))
    return sc.submit(qjob("huge2").gpus(16).submit(11))


@pytest.mark.parametrize(
    ("build", "backfill", "starts", "reasons"),
    [
        (
            backfill_before_a_hold,
            "easy",
            {"short"},
            {"big": "Resources", "long": "Priority", "short2": "Priority"},
        ),
        (
            a_partition_not_yet_waiting,
            "easy-2",
            {"first"},
            {"wide": "Resources", "second": "Resources"},
        ),
        (
            a_blocked_queue,
            "none",
            set(),
            {"huge": "ReqNodeNotAvail", "head": "Resources", "huge2": "Priority"},
        ),
    ],
)
def test_a_window_stops_at_a_job_that_might_change_something(
    build: Callable[[], Scenario], backfill: str, starts: set[str], reasons: dict[str, str]
) -> None:
    snap = build().snapshot()
    windowed = run_cycle(snap, profile(backfill, [PartitionLimits(), QosLimits()]))
    alone = run_cycle(snap, profile(backfill, [OneByOne(PartitionLimits()), OneByOne(QosLimits())]))
    assert set(windowed.starts) == starts
    limited = {j: r for j, r in windowed.reasons.items() if j[1:].isdigit()}
    assert set(limited.values()) == {"QOSMaxGPUsPerUserLimit"}
    assert {j: r for j, r in windowed.reasons.items() if j not in limited} == reasons
    same(windowed, alone)


class NotFirst:
    """A placement filter that keeps every node but the first: the placer is no longer
    the built-in fit alone, so windows leave every test that may pass to it."""

    def filter(self, ctx: PlacementContext) -> BoolArray:
        keep = np.ones(ctx.state.num_nodes, dtype=np.bool_)
        keep[0] = False
        return keep


VARIANTS = ["plain", "filtered", "exclusive", "excluded", "will-run", "mig"]


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 10_000),
    st.sampled_from(["none", "easy", "easy-2", "conservative", "conservative-8"]),
    st.sampled_from(VARIANTS),
)
def test_windows_walk_as_the_job_by_job_walk_whatever_the_profile(
    seed: int, backfill: str, variant: str
) -> None:
    snap = busy_snapshot(seed, 150)
    rng = np.random.default_rng(seed)
    if variant in ("exclusive", "excluded"):  # some jobs narrow or take whole nodes

        def narrowed(j: Job) -> Job:
            if variant == "exclusive":
                return replace(j, exclusive=True)
            return replace(j, exclude=("n3", "n5"))

        picked = rng.random(len(snap.pending)) < 0.2
        pending = [narrowed(j) if p else j for j, p in zip(snap.pending, picked, strict=True)]
        snap = replace(snap, pending=pending)
    if variant == "mig":  # node times the compiled pass leaves to the timeline
        st = snap.state
        idle = np.argwhere(st.gpu_milli_free == st.gpu_milli_total)[-2:]  # the last two idle
        for v, gpu in idle.tolist():
            st.set_mig_layout(st.nodes[v].name, gpu, (("3g.40gb", 0), ("3g.40gb", 4)))
        picked = rng.random(len(snap.pending)) < 0.2
        mig = [qjob(j.id).submit(j.submit_time).limit(j.time_limit_s).mig("3g.40gb").job()
               for j in snap.pending]  # fmt: skip
        pending = [m if p else j for j, m, p in zip(snap.pending, mig, picked, strict=True)]
        snap = replace(snap, pending=pending)
    args = {
        "none": None,
        "easy": BackfillArgs(mode="easy"),
        "easy-2": BackfillArgs(mode="easy", max_job_test=2),
        "conservative": BackfillArgs(mode="conservative"),
        "conservative-8": BackfillArgs(mode="conservative", max_job_test=8),
    }[backfill]
    if variant == "will-run" and args is not None:
        args = args.model_copy(update={"will_run_window_s": 30})
    filters = [NotFirst()] if variant == "filtered" else []

    def made(admission: list[Admission]) -> SchedulingProfile:
        return SchedulingProfile(
            ordering=Fifo(),
            placement=PlacementProfile("first-fit", [(FirstFit(), 1.0)], filters=filters),
            admission=admission,
            backfill=None if args is None else Backfill(args),
        )

    windowed = run_cycle(snap, made([PartitionLimits(), QosLimits()]))
    alone = run_cycle(snap, made([OneByOne(PartitionLimits()), OneByOne(QosLimits())]))
    same(windowed, alone)
