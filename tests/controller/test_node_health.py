"""A node's health verdicts drain it with the reason, resume it, and fill its history."""

from __future__ import annotations

from controller.harness import ADMIN, ANA, OPERATOR, Cluster, spec
from gpufleet.api.agent_schemas import AgentSync, GpuReading, NodeHealth


def report(cluster: Cluster, node: str, **verdict: object) -> None:
    health = NodeHealth(**{"ok": True, "at": cluster.clock.now(), **verdict})  # type: ignore[arg-type]
    cluster.ctl.sync_agent(principal=ADMIN, node=node, body=AgentSync(health=health))


def events(cluster: Cluster, node: str) -> list[tuple[str, dict[str, object]]]:
    entries = cluster.ctl.list_audit(principal=ADMIN).entries
    return [(e.action, e.detail) for e in reversed(entries) if e.target == node]


def test_a_failing_check_drains_and_new_jobs_avoid_the_node(cluster: Cluster) -> None:
    report(cluster, "n1")
    assert events(cluster, "n1") == []  # healthy from the start: nothing to record
    report(cluster, "n1", ok=False, reason="mount /shared: no answer within 10 s")
    node = cluster.ctl.get_node(principal=ADMIN, name="n1")
    assert (node.state, node.reason) == ("drain", "health: mount /shared: no answer within 10 s")
    report(cluster, "n1", ok=False, reason="mount /shared: no answer within 10 s")  # no news
    jobs = [cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=4)).job_id for _ in "ab"]
    cluster.ctl.run_cycle_now()
    assert [cluster.state(j) for j in jobs] == ["RUNNING", "PENDING"]
    assert cluster.where(jobs[0]) == "n2"
    # Remediation ran and the checks pass again: resumed, every step in the history.
    cluster.clock.advance(60)
    report(cluster, "n1", ok=True, remediation="ran /usr/local/sbin/remount: exit 0")
    assert cluster.ctl.get_node(principal=ADMIN, name="n1").state in ("idle", "mixed", "allocated")
    assert events(cluster, "n1") == [
        (
            "node.health",
            {"ok": False, "reason": "mount /shared: no answer within 10 s", "masked_gpus": []},
        ),
        ("node.remediation", {"result": "ran /usr/local/sbin/remount: exit 0"}),
        ("node.health", {"ok": True, "reason": "", "masked_gpus": []}),
    ]


def test_health_never_lifts_an_operators_drain(cluster: Cluster) -> None:
    cluster.ctl.drain_node(principal=OPERATOR, name="n2", reason="new DIMMs")
    report(cluster, "n2", ok=False, reason="gpu 3: xid 79 (reboot class)")
    assert cluster.ctl.get_node(principal=ADMIN, name="n2").reason == "new DIMMs"
    report(cluster, "n2", ok=True)
    node = cluster.ctl.get_node(principal=ADMIN, name="n2")
    assert (node.state, node.reason) == ("drain", "new DIMMs")


def test_a_masked_gpu_is_avoided_while_the_node_works_on(cluster: Cluster) -> None:
    report(cluster, "n1", masked_gpus=[0, 1, 2])
    assert cluster.ctl.get_node(principal=ADMIN, name="n1").state == "idle"  # not drained
    one = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=1, nodelist=["n1"])).job_id
    pair = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=2, nodelist=["n1"])).job_id
    cluster.ctl.run_cycle_now()
    assert (cluster.state(pair), cluster.state(one)) == ("PENDING", "RUNNING")
    gpus = cluster.ctl.get_node(principal=ADMIN, name="n1").gpus
    assert [g.jobs for g in gpus] == [[], [], [], [one]]
    report(cluster, "n1", masked_gpus=[])
    cluster.ctl.run_cycle_now()
    assert cluster.state(pair) == "RUNNING"
    assert [a for a, _ in events(cluster, "n1")] == ["node.health", "node.health"]


def test_a_masked_gpu_says_why_in_the_node_list(cluster: Cluster) -> None:
    """The node keeps its Slurm state (idle); each GPU says whether and why it is masked,
    from its reading, which ``gpufleet nodes`` shows as the node's reason."""
    sick = GpuReading(index=1, xid_last=48, healthy=False, health_reason="xid 48 (reset class)")
    readings = [GpuReading(index=0), sick, GpuReading(index=2), GpuReading(index=3)]
    health = NodeHealth(ok=True, masked_gpus=[1, 3], at=cluster.clock.now())
    cluster.ctl.sync_agent(
        principal=ADMIN, node="n1", body=AgentSync(gpus=readings, health=health)
    )
    node = cluster.ctl.get_node(principal=ADMIN, name="n1")
    assert (node.state, node.reason) == ("idle", "")
    assert [g.masked for g in node.gpus] == ["", "xid 48 (reset class)", "", "unhealthy"]
    report(cluster, "n1", masked_gpus=[])
    assert [g.masked for g in cluster.ctl.get_node(principal=ADMIN, name="n1").gpus] == [""] * 4
