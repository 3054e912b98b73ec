"""A heartbeat that brings and finds nothing is answered without the controller's lock,
and never at the cost of a start, a kill or a report."""

from __future__ import annotations

import threading

from controller.harness import ADMIN, ANA, Cluster, spec
from gpufleet.api.agent_schemas import AgentSync, RunRef, SyncReply


def beat(cluster: Cluster, node: str, *held: tuple[str, int]) -> SyncReply:
    body = AgentSync(running=[RunRef(job_id=j, run=r) for j, r in held])
    return cluster.ctl.sync_agent(principal=ADMIN, node=node, body=body)


def answered_while_busy(cluster: Cluster, node: str, *held: tuple[str, int]) -> bool:
    """Whether a heartbeat is answered while another thread holds the lock (as a long
    cycle would)."""
    got: list[SyncReply] = []
    with cluster.ctl._lock:
        t = threading.Thread(target=lambda: got.append(beat(cluster, node, *held)), daemon=True)
        t.start()
        t.join(1.0)
        answered = bool(got)
    t.join(5.0)
    return answered


def test_quiet_heartbeats_skip_the_lock_but_never_news(cluster: Cluster) -> None:
    assert beat(cluster, "n1").jobs_to_start == []
    before = cluster.ctl._nodes["n1"].last_heartbeat
    cluster.clock.advance(5)
    assert answered_while_busy(cluster, "n1")
    assert cluster.ctl._nodes["n1"].last_heartbeat == before + 5
    # A job placed on the node is news: the next heartbeat takes the full path and gets it.
    job = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, nodelist=["n1"])).job_id
    cluster.ctl.run_cycle_now()
    assert [s.job_id for s in beat(cluster, "n1").jobs_to_start] == [job]
    # Held now: quiet again; a cancel is news again.
    assert beat(cluster, "n1", (job, 1)).jobs_to_kill == []
    cluster.ctl.cancel_job(principal=ANA, job_id=job)
    assert [k.job_id for k in beat(cluster, "n1", (job, 1)).jobs_to_kill] == [job]
    # A kill awaiting its resend keeps the node on the full path (it waits for the lock).
    assert not answered_while_busy(cluster, "n1", (job, 1))
