"""The controller service end to end on a manual clock, against SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace

import pytest
import sqlalchemy as sa

from controller.harness import ADMIN, ANA, BOB, OPERATOR, Cluster, inventory, setup, spec
from gpufleet.adapters.store import tables as t
from gpufleet.api.agent_schemas import AgentRegister, RunReport
from gpufleet.controller import service
from gpufleet.controller.clock import WallClock
from gpufleet.controller.errors import Conflict, Forbidden, Invalid, NotFound
from gpufleet.controller.loop import SchedulerLoop
from gpufleet.controller.service import PROFILE_MIN_S, Controller
from gpufleet.core.cycle import SchedulingProfile
from gpufleet.core.job import Partition
from gpufleet.core.model import Request
from gpufleet.core.workload import TYPICAL
from gpufleet.policies.config import Policy, PolicyConfig
from store.databases import Database


def test_a_job_runs_to_completion_with_its_history(cluster: Cluster) -> None:
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec(gpus_per_node=2)).job_id
    assert cluster.state(job) == "PENDING"
    ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"
    node = cluster.where(job)
    reply = cluster.sync(node)
    assert [(s.job_id, s.run, len(s.gpu_uuids)) for s in reply.jobs_to_start] == [(job, 1, 2)]
    assert cluster.sync(node).jobs_to_start == []  # the agent holds it now: nothing new
    cluster.clock.advance(30)
    cluster.exit(node, job, 1)
    out = ctl.get_job(principal=ANA, job_id=job)
    assert out.state == "COMPLETED" and out.exit_code == 0
    assert [e.state for e in out.history] == ["PENDING", "RUNNING", "COMPLETED"]
    # The same report again changes nothing.
    cluster.exit(node, job, 1)
    assert [e.state for e in ctl.get_job(principal=ANA, job_id=job).history][-1] == "COMPLETED"


def test_a_nonzero_exit_fails_the_job(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    cluster.exit(node, job, 1, code=3)
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.exit_code) == ("FAILED", 3)


def test_an_array_runs_at_most_its_limit_at_once(cluster: Cluster) -> None:
    sub = cluster.ctl.submit(principal=ANA, spec=spec(array="0-5%2"))
    assert sub.array_task_count == 6
    cluster.ctl.run_cycle_now()
    page = cluster.ctl.list_jobs(principal=ANA)
    running = sorted(j.job_id for j in page.jobs if j.state == "RUNNING")
    assert running == [f"{sub.job_id}_0", f"{sub.job_id}_1"]  # 8 GPUs free, but %2
    waiting = {j.reason for j in page.jobs if j.state == "PENDING"}
    assert waiting == {"JobArrayTaskLimit"}
    node = cluster.where(running[0])
    cluster.sync(node)
    cluster.exit(node, running[0], 1)
    cluster.ctl.run_cycle_now()
    page = cluster.ctl.list_jobs(principal=ANA)
    assert sum(j.state == "RUNNING" for j in page.jobs) == 2


def test_afterok_waits_then_starts_and_never_after_a_failure(cluster: Cluster) -> None:
    ctl = cluster.ctl
    first = ctl.submit(principal=ANA, spec=spec()).job_id
    ok = ctl.submit(principal=ANA, spec=spec(dependency=f"afterok:{first}")).job_id
    notok = ctl.submit(principal=ANA, spec=spec(dependency=f"afternotok:{first}")).job_id
    ctl.run_cycle_now()
    assert cluster.state(ok) == "PENDING"
    assert ctl.get_job(principal=ANA, job_id=ok).reason == "Dependency"
    node = cluster.where(first)
    cluster.sync(node)
    cluster.exit(node, first, 1, code=0)
    ctl.run_cycle_now()
    assert cluster.state(ok) == "RUNNING"
    assert ctl.get_job(principal=ANA, job_id=notok).reason == "DependencyNeverSatisfied"


def test_unknown_dependency_is_invalid(cluster: Cluster) -> None:
    with pytest.raises(Invalid) as e:
        cluster.ctl.submit(principal=ANA, spec=spec(dependency="afterok:999"))
    assert e.value.field == "body.dependency"


def test_hold_release_and_cancel(cluster: Cluster) -> None:
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec(hold=True)).job_id
    ctl.run_cycle_now()
    out = ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.reason, out.held) == ("PENDING", "JobHeldUser", True)
    ctl.release_job(principal=ANA, job_id=job)
    ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"
    node = cluster.where(job)
    cluster.sync(node)
    ctl.cancel_job(principal=ANA, job_id=job)
    assert cluster.state(job) == "COMPLETING"
    reply = cluster.sync(node)
    assert [(k.job_id, k.run) for k in reply.jobs_to_kill] == [(job, 1)]
    report = RunReport(job_id=job, run=1, state="signalled", signal=15, at=cluster.clock.now())
    cluster.sync(node, [report])
    assert cluster.state(job) == "CANCELLED"
    with pytest.raises(Conflict):
        ctl.cancel_job(principal=ANA, job_id=job)


def test_requeue_starts_a_new_run(cluster: Cluster) -> None:
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec()).job_id
    ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    ctl.requeue_job(principal=OPERATOR, job_id=job)
    report = RunReport(job_id=job, run=1, state="signalled", signal=15, at=cluster.clock.now())
    cluster.sync(node, [report])
    out = ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.restart_count) == ("PENDING", 1)
    ctl.run_cycle_now()
    node = cluster.where(job)
    assert [s.run for s in cluster.sync(node).jobs_to_start] == [2]


def test_request_id_makes_a_retry_return_the_first_job(cluster: Cluster) -> None:
    first = cluster.ctl.submit(principal=ANA, spec=spec(request_id="abc"))
    again = cluster.ctl.submit(principal=ANA, spec=spec(request_id="abc"))
    other = cluster.ctl.submit(principal=BOB, spec=spec(request_id="abc"))
    assert again.job_id == first.job_id and again.duplicate
    assert other.job_id != first.job_id and not other.duplicate


def test_users_see_and_touch_only_their_own_jobs(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    with pytest.raises(NotFound):
        cluster.ctl.get_job(principal=BOB, job_id=job)
    with pytest.raises(NotFound):
        cluster.ctl.cancel_job(principal=BOB, job_id=job)
    with pytest.raises(Forbidden):
        cluster.ctl.list_jobs(principal=BOB, user="ana")
    assert cluster.ctl.list_jobs(principal=BOB).jobs == []
    assert [j.job_id for j in cluster.ctl.list_jobs(principal=OPERATOR).jobs] == [job]
    with pytest.raises(Forbidden):
        cluster.ctl.drain_node(principal=ANA, name="n1", reason="x")


def test_restart_rebuilds_and_kills_nothing(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    pending = cluster.ctl.submit(principal=ANA, spec=spec(hold=True)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    cluster.restart()
    reply = cluster.sync(node)
    assert reply.jobs_to_kill == [] and reply.jobs_to_start == []
    assert cluster.state(job) == "RUNNING" and cluster.state(pending) == "PENDING"
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"  # never started twice
    cluster.exit(node, job, 1)
    assert cluster.state(job) == "COMPLETED"
    nxt = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    assert int(nxt) > int(pending)


def test_a_stored_begin_time_past_any_bound_waits_and_stops_no_cycle(cluster: Cluster) -> None:
    # A row stored before submissions bounded begin: past int64, it would fail every cycle.
    later = cluster.ctl.submit(principal=ANA, spec=spec(begin=10**9 * 100)).job_id
    with cluster.ctl.store.write() as conn:
        conn.execute(
            t.jobs.update().where(t.jobs.c.job_id == later).values(begin_time=float(10**20))
        )
    cluster.restart()
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"
    waiting = cluster.ctl.get_job(principal=ANA, job_id=later)
    assert (waiting.state, waiting.reason) == ("PENDING", "BeginTime")


def test_a_start_persisted_but_never_sent_is_sent_after_a_restart(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.run_cycle_now()  # committed; no agent has synced yet
    node = cluster.where(job)
    cluster.restart()
    assert [(s.job_id, s.run) for s in cluster.sync(node).jobs_to_start] == [(job, 1)]


def test_a_lost_node_requeues_its_jobs(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    other = "n2" if node == "n1" else "n1"
    cluster.clock.advance(200)
    cluster.sync(other)
    cluster.ctl.run_cycle_now()
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert "NODE_FAIL" in [e.state for e in out.history]
    assert out.state == "RUNNING" and out.node_list == [other]


def test_a_node_back_from_a_lost_heartbeat_loses_the_reason(cluster: Cluster) -> None:
    cluster.clock.advance(200)
    cluster.sync("n2")
    cluster.ctl.run_cycle_now()
    reasons = {n.name: (n.state, n.reason) for n in cluster.ctl.list_nodes(principal=ADMIN)}
    assert reasons["n1"] == ("down", "heartbeat lost")
    cluster.sync("n1")  # back by a sync
    n1 = {n.name: n for n in cluster.ctl.list_nodes(principal=ADMIN)}["n1"]
    assert (n1.state, n1.reason) == ("idle", "")
    cluster.clock.advance(200)
    cluster.sync("n2")
    cluster.ctl.run_cycle_now()
    cluster.register("n1")  # back by a new agent
    cluster.restart()  # and as stored
    n1 = {n.name: n for n in cluster.ctl.list_nodes(principal=ADMIN)}["n1"]
    assert n1.reason == ""


def test_usage_counts_gpu_hours_and_exports_replayable_history(
    cluster: Cluster, tmp_path: object
) -> None:
    from pathlib import Path

    from gpufleet.sim.traces.history import load_history

    start = cluster.clock.now()
    job = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=2)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    cluster.clock.advance(1800)
    cluster.exit(node, job, 1)
    end = cluster.clock.now() + 1
    rows = cluster.ctl.usage(principal=OPERATOR, start=start, end=end, by="user")
    assert [(r.key, round(r.gpu_hours, 6)) for r in rows] == [("ana", 1.0)]  # 2 GPUs x 0.5 h
    path = Path(str(tmp_path)) / "history.jsonl"
    path.write_text("".join(cluster.ctl.export_usage(principal=OPERATOR, start=start, end=end)))
    (trace,) = load_history(path)
    assert (trace.id, trace.duration_s, trace.request.gpus, trace.user) == (job, 1800, 2, "ana")


def test_tokens_authenticate_until_revoked(cluster: Cluster) -> None:
    made = cluster.ctl.create_token(principal=ADMIN, name="t", user="ana", role="user")
    who = cluster.ctl.authenticate(token=made.token)
    assert who is not None and (who.user, who.role) == ("ana", "user")
    with pytest.raises(Forbidden):
        cluster.ctl.create_token(principal=ANA, name="t", user="ana", role="admin")
    cluster.ctl.revoke_token(principal=ADMIN, token_id=made.id)
    assert cluster.ctl.authenticate(token=made.token) is None
    assert cluster.ctl.authenticate(token="gf_nonsense") is None


def test_a_listing_shows_what_the_job_itself_shows(cluster: Cluster) -> None:
    ctl = cluster.ctl
    ids = [
        ctl.submit(principal=ANA, spec=spec(stdout="out-%j.txt", stderr="/logs/%x.err")).job_id,
        ctl.submit(principal=ANA, spec=spec(array="0-1", name="a")).job_id,
    ]
    listed = {j.job_id: j for j in ctl.list_jobs(principal=ANA).jobs}
    assert len(listed) == 3
    for job_id, job in listed.items():
        assert job == ctl.get_job(principal=ANA, job_id=job_id).model_copy(update={"history": []})
    assert listed[ids[0]].stdout_path == f"/tmp/out-{ids[0]}.txt"
    assert listed[ids[0]].stderr_path == "/logs/job.err"


def test_a_stored_submission_event_is_shown_once(cluster: Cluster) -> None:
    # Stores written before submissions stopped writing a history row keep theirs.
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec(array="0-2")).job_id + "_1"
    out = ctl.get_job(principal=ANA, job_id=job)
    assert [(e.time, e.state) for e in out.history] == [(out.submit_time, "PENDING")]
    with ctl.store.write() as conn:
        pk = conn.execute(sa.select(t.jobs.c.id).where(t.jobs.c.job_id == job)).scalar_one()
        conn.execute(
            t.job_history.insert().values(job=pk, time=out.submit_time, state="PENDING", reason="")
        )
    assert [e.state for e in ctl.get_job(principal=ANA, job_id=job).history] == ["PENDING"]


def test_a_time_limit_over_the_partitions_maximum_is_refused_at_submission(db: Database) -> None:
    partitions = {
        "short": Partition("short", default_time_s=0, max_time_s=1800),
        "odd": Partition("odd", default_time_s=7200, max_time_s=3600),  # a setup built by hand
    }
    cluster = Cluster(db, partitions=partitions)
    try:
        ctl = cluster.ctl
        with pytest.raises(Invalid) as e:
            ctl.submit(principal=ANA, spec=spec(partition="short", time_limit_s=1801))
        assert e.value.field == "body.time_limit_s"
        with pytest.raises(Invalid) as e:
            ctl.submit(principal=ANA, spec=spec(partition="odd"))
        assert (e.value.field, "default" in e.value.message) == ("body.time_limit_s", True)
        assert ctl.list_jobs(principal=ANA).jobs == []
        # No default time: the partition's maximum, as Slurm gives.
        job = ctl.submit(principal=ANA, spec=spec(partition="short")).job_id
        assert ctl.get_job(principal=ANA, job_id=job).time_limit_s == 1800
    finally:
        cluster.ctl.stop()


def test_no_limit_is_refused_under_a_maximum_and_runs_unbounded_without_one(
    db: Database,
) -> None:
    partitions = {
        "gpu": Partition("gpu", default_time_s=600),
        "short": Partition("short", max_time_s=1800),
    }
    cluster = Cluster(db, partitions=partitions, kill_grace_s=30, backstop_s=60.0)
    try:
        ctl = cluster.ctl
        cluster.register()
        # As Slurm's EnforcePartLimits=ALL: UNLIMITED is over any maximum.
        with pytest.raises(Invalid) as e:
            ctl.submit(principal=ANA, spec=spec(partition="short", time_limit_s=0))
        assert e.value.field == "body.time_limit_s"
        assert "no limit" in e.value.reason and "1800 s" in e.value.reason
        job = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, time_limit_s=0)).job_id
        assert ctl.get_job(principal=ANA, job_id=job).time_limit_s == 0  # not the default
        ctl.run_cycle_now()
        node = cluster.where(job)
        assert [s.time_limit_s for s in cluster.sync(node).jobs_to_start] == [0]  # no kill timer
        cluster.clock.advance(400 * 86400)  # past any default, even the year planned with
        cluster.sync(node)
        ctl.run_cycle_now()
        assert cluster.state(job) == "RUNNING"
        # A signalled death with no cause is no TIMEOUT: there is no limit to be past.
        report = RunReport(job_id=job, run=1, state="signalled", signal=9, at=cluster.clock.now())
        cluster.sync(node, [report])
        assert cluster.state(job) == "FAILED"
    finally:
        cluster.ctl.stop()


@pytest.mark.parametrize("state", ["drain", "inactive"])
def test_a_drained_or_inactive_partition_takes_no_new_job_and_keeps_its_queue(
    db: Database, state: str
) -> None:
    cluster = Cluster(db, partitions={"gpu": Partition("gpu")})
    try:
        queued = cluster.ctl.submit(principal=ANA, spec=spec()).job_id  # no node yet: waits
        cluster.setup = replace(cluster.setup, partitions={"gpu": Partition("gpu", state=state)})
        cluster.restart()
        with pytest.raises(Invalid) as e:
            cluster.ctl.submit(principal=ANA, spec=spec())
        assert (e.value.field, e.value.reason) == (
            "body.partition",
            f"partition gpu is {state} and takes no new jobs",
        )
        cluster.register()
        cluster.ctl.run_cycle_now()
        # As Slurm: a draining partition still starts its queue, an inactive one does not.
        out = cluster.ctl.get_job(principal=ANA, job_id=queued)
        expected = ("RUNNING", "") if state == "drain" else ("PENDING", "PartitionInactive")
        assert (out.state, out.reason) == expected
    finally:
        cluster.ctl.stop()


def test_array_indices_stay_below_the_sites_max_array_size(db: Database) -> None:
    assert setup().max_array_size == 1001  # Slurm's default MaxArraySize
    cluster = Cluster(db, max_array_size=10)
    try:
        ctl = cluster.ctl
        assert ctl.submit(principal=ANA, spec=spec(array="0-9", hold=True)).array_task_count == 10
        for array in ("0-10", "10", "0-99999"):
            with pytest.raises(Invalid) as e:
                ctl.submit(principal=ANA, spec=spec(array=array, hold=True))
            assert e.value.field == "body.array"
            assert "maximum of 9 (max_array_size = 10)" in e.value.reason
        assert len(ctl.list_jobs(principal=ANA).jobs) == 10
    finally:
        cluster.ctl.stop()


def test_the_placement_profile_follows_the_submissions_mix(db: Database) -> None:
    policy = Policy(PolicyConfig())
    built: list[tuple[Request, ...]] = []

    def factory(workload: Sequence[Request]) -> SchedulingProfile:
        built.append(tuple(workload))
        return policy.profile(workload)

    cluster = Cluster(db, profile_factory=factory)
    try:
        ctl, clock = cluster.ctl, cluster.clock
        ctl.run_cycle_now()
        assert built == [TYPICAL]  # nothing submitted yet
        ctl.submit(principal=ANA, spec=spec(hold=True, gpus_per_node=1))
        ctl.run_cycle_now()
        assert len(built) == 1  # drifted, but too soon after the last build
        clock.advance(PROFILE_MIN_S)
        ctl.run_cycle_now()
        whole = Request(cpu_milli=1000, gpus=1)
        assert built[-1] == (whole,)
        for _ in range(3):
            ctl.submit(principal=ANA, spec=spec(hold=True, gpus_per_node=1))
        clock.advance(PROFILE_MIN_S)
        ctl.run_cycle_now()
        assert len(built) == 2  # the same mix: no rebuild
        ctl.submit(principal=ANA, spec=spec(hold=True, gpus_per_node=0, gpu_milli=500))
        clock.advance(PROFILE_MIN_S)
        ctl.run_cycle_now()
        assert len(built) == 3 and built[-1][-1].gpu_milli == 500
        cluster.restart()  # the window comes back from the store, one entry per submission
        ctl = cluster.ctl
        ctl.submit(principal=ANA, spec=spec(hold=True, array="0-99"))
        ctl.run_cycle_now()
        assert len(built[-1]) == 6 and built[-1][0] == whole
    finally:
        cluster.ctl.stop()


def test_a_drained_node_keeps_its_runs_until_it_is_lost(cluster: Cluster) -> None:
    ctl, clock = cluster.ctl, cluster.clock
    job = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, requeue=True)).job_id
    ctl.run_cycle_now()
    node = cluster.where(job)
    other = next(n for n in ("n1", "n2") if n != node)
    cluster.sync(node)
    ctl.drain_node(principal=OPERATOR, name=other, reason="rma")
    ctl.drain_node(principal=OPERATOR, name=node, reason="rma")
    second = ctl.submit(principal=ANA, spec=spec()).job_id
    ctl.run_cycle_now()
    assert (cluster.state(job), cluster.state(second)) == ("RUNNING", "PENDING")
    clock.advance(121)  # the drained node's agent falls silent; the other one syncs
    cluster.sync(other)
    ctl.run_cycle_now()
    out = ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.restart_count) == ("PENDING", 1)  # NODE_FAIL, requeued
    ctl.resume_node(principal=OPERATOR, name=other)
    ctl.run_cycle_now()
    assert cluster.where(job) == other and cluster.state(second) == "PENDING"


def test_a_lost_node_goes_down_at_its_heartbeat_deadline_not_the_next_cycle(db: Database) -> None:
    # The timer's cycle is 30 s away; the node's agent falls silent for its 1 s timeout.
    built = setup(interval_s=30.0, heartbeat_timeout_s=1.0)
    ctl = Controller(setup=built, db_url=db.url, clock=WallClock(), schema=db.schema)
    ctl.start()
    try:
        body = AgentRegister(inventory=inventory("n1"))
        ctl.register_agent(principal=ADMIN, node="n1", body=body)
        job = ctl.submit(principal=ANA, spec=spec()).job_id
        began = time.monotonic()
        while time.monotonic() - began < 5:
            out = ctl.get_job(principal=ANA, job_id=job)
            if "NODE_FAIL" in [e.state for e in out.history]:
                break
            time.sleep(0.05)
        assert "NODE_FAIL" in [e.state for e in out.history], out.history
        assert time.monotonic() - began < 5
        n1 = {n.name: n for n in ctl.list_nodes(principal=ADMIN)}["n1"]
        assert (n1.state, n1.reason) == ("down", "heartbeat lost")
    finally:
        ctl.stop()


def test_a_due_time_that_moved_on_starts_no_cycle() -> None:
    # A node heard from while the loop waited for its deadline: no cycle before the new one.
    ran = threading.Event()
    dues = [time.time() + 0.2]

    def due() -> float:
        return dues[0] if len(dues) == 1 else dues[-1]

    loop = SchedulerLoop(ran.set, WallClock(), interval_s=30.0, due=due)
    loop.start()
    try:
        time.sleep(0.05)
        dues.append(time.time() + 60)  # the deadline moved on
        assert not ran.wait(0.6)
    finally:
        loop.stop()


def test_the_shapes_known_to_fit_stay_bounded(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each new shape walks the nodes once and is remembered; many one-off shapes
    # must not grow the memory without end.
    monkeypatch.setattr(service, "MAX_SHAPES", 2)
    for gpus in (1, 2, 3, 4, 1):
        cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=gpus))
        assert len(cluster.ctl._holdable) <= 2
    with pytest.raises(Invalid):  # still checked after the memory starts again
        cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=5))
