"""Preemption with grace time in the controller, on a manual clock: the preempting job
gets the room its victim lets go, even when the requeued victim ranks above it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.harness import ANA, Cluster, spec
from gpufleet.api.agent_schemas import RunReport
from gpufleet.core.job import QoS
from gpufleet.policies.config import Policy, PolicyConfig
from store.databases import Database

# FIFO without backfill: the requeued victim, submitted first, ranks above its preemptor.
POLICY = Policy(
    PolicyConfig.model_validate({"ordering": {"plugin": "fifo"}, "preemption": {"enabled": True}})
)
QOS = {
    "normal": QoS("normal"),
    "high": QoS("high", preempt=("preemptible", "scavenger")),
    "preemptible": QoS("preemptible", preempt_mode="requeue", grace_s=60),
    "scavenger": QoS("scavenger", preempt_mode="requeue"),  # no grace time
}


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    # An agent quiet through the clock's jumps keeps its node up.
    c = Cluster(
        db,
        profile_factory=lambda workload: POLICY.profile(workload),
        qos=QOS,
        heartbeat_timeout_s=7200.0,
    )
    c.register("n1")
    yield c
    c.ctl.stop()


def test_a_victim_requeued_ahead_of_its_preemptor_leaves_it_the_room(cluster: Cluster) -> None:
    ctl, clock = cluster.ctl, cluster.clock
    low = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, qos="preemptible")).job_id
    ctl.run_cycle_now()
    cluster.sync("n1")
    clock.advance(1000)
    high = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, qos="high")).job_id
    ctl.run_cycle_now()
    (kill,) = cluster.sync("n1").jobs_to_kill
    assert (kill.job_id, kill.signal, kill.grace_s) == (low, "TERM", 60)
    clock.advance(60)  # the victim exits at the end of its grace time and is requeued
    report = RunReport(job_id=low, run=1, state="signalled", signal=15, at=clock.now())
    cluster.sync("n1", [report])
    ctl.run_cycle_now()
    assert (cluster.state(high), cluster.state(low)) == ("RUNNING", "PENDING")
    # Later cycles leave it running: the victim is not started, nor stopped again.
    for _ in range(3):
        clock.advance(10)
        ctl.run_cycle_now()
    assert (cluster.state(high), cluster.state(low)) == ("RUNNING", "PENDING")
    assert ctl.get_job(principal=ANA, job_id=low).restart_count == 1


def test_a_victim_without_grace_time_is_killed_and_holds_its_room_until_it_ends(
    cluster: Cluster,
) -> None:
    """As Slurm: SIGTERM, SIGKILL after the kill grace (KillWait), and the preemptor
    starts once the victim has ended, never beside it on the same GPUs."""
    ctl, clock = cluster.ctl, cluster.clock
    low = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, qos="scavenger")).job_id
    ctl.run_cycle_now()
    cluster.sync("n1")
    clock.advance(1000)
    high = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, qos="high")).job_id
    ctl.run_cycle_now()
    reply = cluster.sync("n1")
    assert reply.jobs_to_start == []
    assert [(k.job_id, k.signal, k.grace_s) for k in reply.jobs_to_kill] == [
        (low, "TERM", cluster.setup.kill_grace_s)
    ]
    assert (cluster.state(low), cluster.state(high)) == ("COMPLETING", "PENDING")
    clock.advance(5)
    ctl.run_cycle_now()  # the victim still lives: its room is not given away
    assert cluster.sync("n1").jobs_to_start == []
    ended = clock.now() - 2  # it trapped SIGTERM and exited; the report came later
    report = RunReport(job_id=low, run=1, state="exited", exit_code=0, at=ended, cause="killed")
    cluster.sync("n1", [report])
    ctl.run_cycle_now()
    assert (cluster.state(high), cluster.state(low)) == ("RUNNING", "PENDING")
    assert [launch.job_id for launch in cluster.sync("n1").jobs_to_start] == [high]
    history = ctl.get_job(principal=ANA, job_id=low).history
    states = [(e.state, e.time) for e in history][1:]
    preempted_at = clock.now() - 5
    assert states == [
        ("RUNNING", preempted_at - 1000),
        ("COMPLETING", preempted_at),
        ("PREEMPTED", ended),
        ("REQUEUED", clock.now()),
        ("PENDING", clock.now()),
    ]
