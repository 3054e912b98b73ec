"""Alerts that act: Alertmanager's notifications drain nodes and apply the idle-GPU policy.

A controller on a manual clock with two agents; notifications are built as
Alertmanager sends them and handed to the webhook's handler.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.harness import ADMIN, ANA, Cluster, spec
from gpufleet.controller.alerts import Alert, Notification
from gpufleet.controller.config import ConfigError, config_from_dict
from gpufleet.controller.service import Principal
from gpufleet.controller.webhook import handle
from gpufleet.core.job import Partition
from store.databases import Database

ALERTMANAGER = Principal(user="alertmanager", role="alerts")


def notify(cluster: Cluster, *alerts: Alert) -> list[tuple[str, str, str]]:
    """Post one notification; (action, target, detail) of each alert's answer."""
    status = "firing" if any(a.status == "firing" for a in alerts) else "resolved"
    body = Notification(status=status, receiver="gpufleet", alerts=list(alerts))
    reply = handle(cluster.ctl, principal=ALERTMANAGER, body=body)
    return [(a.action, a.target, a.detail) for a in reply.actions]


def fault(node: str, status: str = "firing", **labels: str) -> Alert:
    return Alert.model_validate({
        "status": status,
        "labels": {"alertname": "GpuXidHardwareError", "action": "drain", "Hostname": node,
                   "gpu": "1", **labels},
        "annotations": {"summary": f"XID 79 on GPU 1 of {node}"},
        "fingerprint": "f1",
    })  # fmt: skip


def idle(job: str, status: str = "firing") -> Alert:
    return Alert.model_validate({
        "status": status,
        "labels": {"alertname": "GpufleetAllocatedGpuIdle", "action": "idle-gpu",
                   "hpc_job": job, "Hostname": "n1", "gpu": "0"},
        "fingerprint": "f2",
    })  # fmt: skip


def audit(cluster: Cluster) -> list[tuple[str, str, str]]:
    entries = cluster.ctl.list_audit(principal=ADMIN).entries
    return [(e.who, e.action, e.target) for e in reversed(entries) if e.action != "config.patch"]


def configure(cluster: Cluster, alerts: dict[str, Any]) -> None:
    cluster.ctl.patch_config(principal=ADMIN, patch={"alerts": alerts})


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    partitions = {"gpu": Partition("gpu"), "debug": Partition("debug")}
    c = Cluster(db, partitions=partitions, heartbeat_timeout_s=1e9)
    c.register()
    yield c
    c.ctl.stop()


def test_a_gpu_fault_drains_its_node_once(cluster: Cluster) -> None:
    assert notify(cluster, fault("n2")) == [
        ("drain", "n2", "alert GpuXidHardwareError: XID 79 on GPU 1 of n2")
    ]
    node = cluster.ctl.get_node(principal=ADMIN, name="n2")
    assert (node.state, node.reason) == (
        "drain",
        "alert GpuXidHardwareError: XID 79 on GPU 1 of n2",
    )
    # Alertmanager repeats a firing alert: the node is drained already.
    ((action, _, detail),) = notify(cluster, fault("n2"))
    assert action == "none" and detail.startswith("drained already")
    assert audit(cluster) == [("alertmanager", "node.drain", "n2")]
    assert cluster.ctl.get_node(principal=ADMIN, name="n1").state == "idle"


@pytest.mark.parametrize(
    ("alert", "why"),
    [
        (fault("n1", status="resolved"), "resolved"),
        (fault("n9"), "no such node"),
        (fault("", Hostname=""), "no Hostname or node label"),
        (Alert(status="firing", labels={"alertname": "GpuTemperatureHigh"}), "no action label"),
        (Alert(status="firing", labels={"action": "reboot"}), "no action for action='reboot'"),
        (idle(""), "no hpc_job label"),
        (idle("999"), "no such job"),
    ],
)
def test_alerts_that_ask_nothing_possible_change_nothing(
    cluster: Cluster, alert: Alert, why: str
) -> None:
    assert [(a, d) for a, _, d in notify(cluster, alert)] == [("none", why)]
    assert audit(cluster) == []
    assert {n.state for n in cluster.ctl.list_nodes(principal=ADMIN)} == {"idle"}


def test_draining_can_be_turned_off(cluster: Cluster) -> None:
    configure(cluster, {"drain": False})
    assert notify(cluster, fault("n1")) == [("none", "", "off")]
    assert cluster.ctl.get_node(principal=ADMIN, name="n1").state == "idle"


def running(cluster: Cluster, partition: str = "gpu") -> str:
    job = cluster.ctl.submit(principal=ANA, spec=spec(partition=partition)).job_id
    cluster.ctl.run_cycle_now()
    cluster.sync(cluster.where(job))
    assert cluster.state(job) == "RUNNING"
    return job


def history(cluster: Cluster, job: str) -> list[tuple[str, str]]:
    shown = cluster.ctl.get_job(principal=ANA, job_id=job)  # the owner sees it
    return [(e.state, e.reason) for e in shown.history]


def test_by_default_the_owner_is_notified_once_and_nothing_else(cluster: Cluster) -> None:
    job = running(cluster)
    ((action, target, detail),) = notify(cluster, idle(job))
    assert (action, target) == ("notify", job)
    assert detail == "alert GpufleetAllocatedGpuIdle: GPU 0: its GPUs are idle"
    assert history(cluster, job)[-1] == ("RUNNING", detail)
    cluster.clock.advance(86400)
    ((action, _, detail),) = notify(cluster, idle(job))
    assert action == "none" and "policy is notify" in detail
    assert cluster.state(job) == "RUNNING"
    assert len(history(cluster, job)) == 3  # PENDING, RUNNING, the one notice
    assert audit(cluster) == [("alertmanager", "job.idle-notice", job)]


@pytest.mark.parametrize(("policy", "final"), [("requeue", "PENDING"), ("cancel", "CANCELLED")])
def test_after_the_grace_time_the_partition_policy_acts(
    cluster: Cluster, policy: str, final: str
) -> None:
    configure(
        cluster,
        {
            "idle_gpu": {
                "action": "notify",
                "partitions": {"debug": {"action": policy, "grace_s": 600}},
            }
        },
    )
    job = running(cluster, "debug")
    elsewhere = running(cluster, "gpu")
    ((action, _, detail),) = notify(cluster, idle(job))
    assert action == "notify" and detail.endswith(f"{policy} in 600 s if still so")
    cluster.clock.advance(599)
    assert notify(cluster, idle(job))[0][0] == "none"  # within the grace time
    cluster.clock.advance(1)
    ((action, target, _),) = notify(cluster, idle(job))
    assert (action, target) == (policy, job)
    node = cluster.where(job)
    cluster.sync(node)  # the agent gets the kill
    assert cluster.state(job) == "COMPLETING"
    cluster.exit(node, job, 1, code=143)
    assert cluster.state(job) == final
    # The job in a partition with the default policy is only told.
    assert notify(cluster, idle(elsewhere))[0][0] == "notify"
    cluster.clock.advance(3600)
    assert notify(cluster, idle(elsewhere))[0][0] == "none"
    assert cluster.state(elsewhere) == "RUNNING"
    assert audit(cluster) == [
        ("alertmanager", "job.idle-notice", job),
        ("alertmanager", f"job.{policy}", job),
        ("alertmanager", "job.idle-notice", elsewhere),
    ]


def test_a_requeued_job_is_noticed_again_on_its_next_run(cluster: Cluster) -> None:
    configure(cluster, {"idle_gpu": {"action": "requeue", "grace_s": 0}})
    job = running(cluster)
    assert notify(cluster, idle(job))[0][0] == "notify"
    assert notify(cluster, idle(job))[0][0] == "requeue"
    node = cluster.where(job)
    cluster.sync(node)
    cluster.exit(node, job, 1, code=143)
    cluster.ctl.run_cycle_now()
    cluster.sync(cluster.where(job))
    assert cluster.state(job) == "RUNNING"
    assert notify(cluster, idle(job))[0][0] == "notify"  # run 2 gets its own notice first


@pytest.mark.parametrize(
    ("alerts", "problem"),
    [
        ({"idle_gpu": {"action": "explode"}}, "alerts.idle_gpu.action: "),
        ({"idle_gpu": {"grace_s": -1}}, "alerts.idle_gpu.grace_s: "),
        ({"idle_gpu": {"partitions": {"nope": {}}}}, "alerts.idle_gpu.partitions.nope: no such"),
        ({"drian": True}, "alerts.drian: "),
    ],
)
def test_the_configuration_names_a_bad_alerts_key(alerts: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config_from_dict({"alerts": alerts}, "test").build("test")
    assert [p for p in raised.value.problems if p.startswith(problem)], raised.value.problems


def test_a_valid_alerts_table_builds() -> None:
    config = config_from_dict(
        {"alerts": {"idle_gpu": {"partitions": {"default": {"action": "requeue"}}}}}, "test"
    )
    config.build("test")
    assert config.to_dict()["alerts"]["idle_gpu"]["partitions"]["default"]["action"] == "requeue"
