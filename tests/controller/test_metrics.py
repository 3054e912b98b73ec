"""What ``/metrics`` reports, read from a controller on a manual clock with two agents.

The exposition is parsed back with prometheus_client's parser, so each test
sees the series as Prometheus would store them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.harness import ADMIN, ANA, BOB, OPERATOR, Cluster, spec
from gpufleet.adapters.prometheus import DCGM_FIELDS, exposition, gpu_text
from gpufleet.api.agent_schemas import AgentSync, GpuReading, RunReport
from gpufleet.controller.config import config_from_dict
from gpufleet.controller.metrics import GpuView, _allocated
from gpufleet.controller.readings import NodeReadings
from gpufleet.controller.service import Controller
from gpufleet.controller.setup import setup_from_config
from gpufleet.core.model import GPU, Node
from gpufleet.core.state import Assignment, ClusterState
from store.databases import Database

CONFIG: dict[str, Any] = {
    "server": {"interval_s": 60, "heartbeat_interval_s": 30, "missed_heartbeats": 3},
    "policy": {
        "backfill": {"mode": "easy"},
        "preemption": {"enabled": True},
        "qos": [
            {"name": "normal", "priority": 10},
            {"name": "high", "priority": 100, "preempt": ["scav"]},
            {"name": "scav", "priority": 0, "preempt_mode": "requeue", "grace_s": 0},
        ],
        "partitions": [{"name": "gpu", "default_time_s": 3600}],
        "accounts": [{"name": "vision"}, {"name": "nlp"}],
    },
    "principals": [
        {"name": "ana", "accounts": ["vision"]},
        {"name": "bob", "accounts": ["nlp"]},
    ],
}

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(ctl: Controller) -> Series:
    """Every sample by (name, labels), empty labels dropped as Prometheus drops them."""
    out: Series = {}
    for family in text_string_to_metric_families(exposition(ctl).decode()):
        for s in family.samples:
            labels = frozenset((k, v) for k, v in s.labels.items() if v != "")
            out[s.name, labels] = s.value
    return out


def value(series: Series, name: str, **labels: str) -> float:
    return series[name, frozenset(labels.items())]


def named(series: Series, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in series.items() if n == name}


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    config = config_from_dict(CONFIG, "test")
    built = setup_from_config(config.build("test"), config.to_dict())
    c = Cluster(db, **{f.name: getattr(built, f.name) for f in fields(built)})
    c.register()
    yield c
    c.ctl.stop()


def test_the_queue_the_cycle_and_the_nodes(cluster: Cluster) -> None:
    ctl = cluster.ctl
    a = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, time_limit_s=3600)).job_id
    b = ctl.submit(principal=BOB, spec=spec(nodes=2, gpus_per_node=4)).job_id
    c = ctl.submit(principal=BOB, spec=spec(gpus_per_node=1, time_limit_s=600)).job_id
    ctl.submit(principal=ANA, spec=spec(hold=True))
    before = scrape(ctl)
    assert (
        value(before, "gpufleet_jobs_preempted_total", partition="gpu") == 0
    )  # there from the start
    # Not yet seen by a cycle: the reason is Slurm's "None".
    assert (
        value(
            before,
            "gpufleet_jobs_pending",
            partition="gpu",
            qos="normal",
            account="nlp",
            reason="None",
        )
        == 2
    )
    ctl.run_cycle_now()
    # a takes n1; b needs both nodes and waits for a; c, short, starts beside it
    # ahead of b: a backfilled start.
    assert {cluster.state(j) for j in (a, c)} == {"RUNNING"}
    cluster.clock.advance(100)
    got = scrape(ctl)
    assert named(got, "gpufleet_jobs_pending") == {
        frozenset(
            {("partition", "gpu"), ("qos", "normal"), ("account", "nlp"), ("reason", "Resources")}
        ): 1,
        frozenset(
            {
                ("partition", "gpu"),
                ("qos", "normal"),
                ("account", "vision"),
                ("reason", "JobHeldUser"),
            }
        ): 1,
    }
    assert (
        value(
            got, "gpufleet_jobs_pending_longest_wait_seconds", partition="gpu", reason="Resources"
        )
        == 100
    )
    assert value(got, "gpufleet_jobs_running", partition="gpu", qos="normal", account="vision") == 1
    assert value(got, "gpufleet_jobs_running", partition="gpu", qos="normal", account="nlp") == 1
    assert value(got, "gpufleet_jobs_submitted_total", partition="gpu") == 4
    assert value(got, "gpufleet_jobs_started_total", partition="gpu") == 2
    assert value(got, "gpufleet_jobs_backfilled_total") == 1
    assert value(got, "gpufleet_scheduler_cycle_duration_seconds_count") == ctl.cycles == 1
    assert 0 < value(got, "gpufleet_scheduler_cycle_duration_seconds_sum") < 60
    n1, n2 = cluster.where(a), cluster.where(c)
    assert value(got, "gpufleet_node_state", node=n1, state="allocated") == 1
    assert value(got, "gpufleet_node_state", node=n2, state="mixed") == 1
    assert value(got, "gpufleet_node_up", node=n1) == 1
    assert value(got, "gpufleet_heartbeat_interval_seconds") == 30
    # 8 GPUs, 4 + 1 taken: 3 wholly free.
    assert value(got, "gpufleet_partition_gpus", partition="gpu") == 8
    assert value(got, "gpufleet_partition_gpus_idle", partition="gpu") == 3
    held = {
        labels: v
        for labels, v in named(got, "gpufleet_gpu_allocated").items()
        if ("hpc_job", a) in labels
    }
    assert len(held) == 4 and set(held.values()) == {1.0}
    assert all({("user", "ana"), ("account", "vision"), ("Hostname", n1)} <= k for k in held)
    # Fairshare: 4 of the 5 GPU-seconds per second are vision's, against half the shares.
    ratio = value(got, "gpufleet_fairshare_usage_ratio", account="vision")
    assert ratio == pytest.approx(1.6, rel=1e-3)
    assert value(got, "gpufleet_fairshare_usage_ratio", account="nlp") == pytest.approx(0.4, 1e-3)
    assert value(got, "gpufleet_fairshare_shares_normalized", account="vision") == 0.5
    usage = "gpufleet_fairshare_usage_billable_gpu_seconds"
    nlp = value(got, usage, account="nlp")
    assert nlp > 0 and value(got, usage, account="vision") == pytest.approx(4 * nlp, rel=1e-3)
    ana = value(got, "gpufleet_fairshare_factor", account="vision", user="ana")
    bob = value(got, "gpufleet_fairshare_factor", account="nlp", user="bob")
    assert 0 <= ana < bob <= 1
    assert ("gpufleet_fairshare_factor", frozenset({("account", "vision")})) not in got
    # The node whose agent goes silent goes down; its requeueable runs go back.
    cluster.clock.advance(90)
    cluster.sync(n2)
    ctl.run_cycle_now()
    down = scrape(ctl)
    assert value(down, "gpufleet_node_up", node=n1) == 0
    assert value(down, "gpufleet_node_state", node=n1, state="down") == 1
    assert value(down, "gpufleet_node_heartbeat_age_seconds", node=n1) == 190
    assert value(down, "gpufleet_node_heartbeat_age_seconds", node=n2) == 0
    assert value(down, "gpufleet_jobs_requeued_total", partition="gpu") == 1
    assert cluster.state(a) == "PENDING"
    assert cluster.state(b) == "PENDING"  # its two nodes were never free at once


def readings(n: int, **overrides: Any) -> list[GpuReading]:
    return [
        GpuReading(
            index=i,
            uuid=f"GPU-{i}",
            model="NVIDIA A100-SXM4-80GB",
            util_pct=10.0 * i,
            mem_used_mib=1000 * i,
            mem_free_mib=80000 - 1000 * i,
            temp_c=40 + i,
            power_w=100 + i,
            **overrides,
        )
        for i in range(n)
    ]


def test_gpu_readings_under_dcgm_names_with_their_holders(cluster: Cluster) -> None:
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec(gpus_per_node=2)).job_id
    ctl.run_cycle_now()
    node = cluster.where(job)
    other = "n2" if node == "n1" else "n1"
    fault = {
        "ecc_dbe_volatile": 2,
        "xid_last": 79,
        "xid_count": 3,
        "remap_failure": True,
        "remap_uncorrectable": 1,
        "healthy": False,
        "health_reason": "xid 79 (reboot class); 2 uncorrectable ECC errors; row remap failure",
    }
    ctl.sync_agent(principal=ADMIN, node=node, body=AgentSync(gpus=readings(4)))
    ctl.sync_agent(principal=ADMIN, node=other, body=AgentSync(gpus=readings(4, **fault)))
    got = scrape(ctl)
    for name, *_ in DCGM_FIELDS:
        assert len(named(got, name)) == 8, name
    held = ctl.get_job(principal=ADMIN, job_id=job).gpu_uuids
    for i in range(4):
        labels = {
            "gpu": str(i),
            "UUID": f"GPU-{i}",
            "device": f"nvidia{i}",
            "modelName": "NVIDIA A100-SXM4-80GB",
            "Hostname": node,
        }
        mine = {"hpc_job": job, "user": "ana", "account": "vision"} if i < 2 else {}
        assert value(got, "DCGM_FI_DEV_GPU_UTIL", **labels, **mine) == 10.0 * i
        assert value(got, "DCGM_FI_DEV_FB_USED", **labels, **mine) == 1000 * i
        assert value(got, "DCGM_FI_DEV_FB_FREE", **labels, **mine) == 80000 - 1000 * i
        assert value(got, "DCGM_FI_DEV_GPU_TEMP", **labels, **mine) == 40 + i
        assert value(got, "DCGM_FI_DEV_POWER_USAGE", **labels, **mine) == 100 + i
        assert value(got, "gpufleet_gpu_healthy", **labels, **mine) == 1
        bad = {**labels, "Hostname": other}
        assert value(got, "DCGM_FI_DEV_XID_ERRORS", **bad) == 79
        assert value(got, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", **bad) == 2
        assert value(got, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", **bad) == 1
        assert value(got, "DCGM_FI_DEV_ROW_REMAP_FAILURE", **bad) == 1
        assert value(got, "gpufleet_gpu_xid_errors_total", **bad) == 3
        assert value(got, "gpufleet_gpu_healthy", **bad, reason="xid_reboot") == 0  # a code
    assert len(held) == 2  # the job's two GPUs are the two labelled with it
    # A node whose agent stops syncing stops reporting readings: no stale values.
    cluster.clock.advance(100)
    ctl.sync_agent(principal=ADMIN, node=node, body=AgentSync(gpus=readings(4)))
    ctl.run_cycle_now()
    after = scrape(ctl)
    assert {dict(k)["Hostname"] for k in named(after, "DCGM_FI_DEV_GPU_TEMP")} == {node}
    # Nor does one whose agent syncs without readings (its source has none now).
    cluster.clock.advance(100)
    ctl.sync_agent(principal=ADMIN, node=node, body=AgentSync())
    assert named(scrape(ctl), "DCGM_FI_DEV_GPU_TEMP") == {}


def test_a_utilisation_not_read_has_no_sample(cluster: Cluster) -> None:
    # NVML reads none on a MIG-partitioned GPU: 0 % would make it look idle to the
    # idle-GPU alert, and its action could requeue the job.
    ctl = cluster.ctl
    unread = [r.model_copy(update={"util_pct": None}) for r in readings(2)]
    ctl.sync_agent(principal=ADMIN, node="n1", body=AgentSync(gpus=unread))
    got = scrape(ctl)
    assert named(got, "DCGM_FI_DEV_GPU_UTIL") == {}
    assert len(named(got, "DCGM_FI_DEV_GPU_TEMP")) == 2


def test_temperature_and_power_not_read_have_no_sample(cluster: Cluster) -> None:
    # 0 C and 0 W would be invented: a dashboard would average them into the node's.
    ctl = cluster.ctl
    unread = [r.model_copy(update={"temp_c": None, "power_w": None}) for r in readings(2)]
    ctl.sync_agent(principal=ADMIN, node="n1", body=AgentSync(gpus=unread))
    got = scrape(ctl)
    assert named(got, "DCGM_FI_DEV_GPU_TEMP") == named(got, "DCGM_FI_DEV_POWER_USAGE") == {}
    assert len(named(got, "DCGM_FI_DEV_GPU_UTIL")) == 2


def test_preemption_and_requeue_are_counted(cluster: Cluster) -> None:
    ctl = cluster.ctl
    scav = [ctl.submit(principal=BOB, spec=spec(gpus_per_node=4, qos="scav")).job_id]
    scav.append(ctl.submit(principal=BOB, spec=spec(gpus_per_node=4, qos="scav")).job_id)
    ctl.run_cycle_now()
    urgent = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, qos="high")).job_id
    ctl.run_cycle_now()  # one scavenger job is the victim, killed (no grace time)
    (victim,) = [j for j in scav if cluster.state(j) == "COMPLETING"]
    cluster.sync(cluster.where(victim))  # the agent gets the kill; the victim is requeued
    ended = RunReport(job_id=victim, run=1, state="signalled", signal=15, at=0.0, cause="killed")
    cluster.sync(cluster.where(victim), [ended])
    ctl.run_cycle_now()
    assert cluster.state(urgent) == "RUNNING"
    got = scrape(ctl)
    assert value(got, "gpufleet_jobs_preempted_total", partition="gpu") == 1
    assert value(got, "gpufleet_jobs_requeued_total", partition="gpu") == 1
    # An operator's requeue counts once the run has ended on its node.
    ctl.requeue_job(principal=OPERATOR, job_id=urgent)
    node = cluster.where(urgent)
    assert value(scrape(ctl), "gpufleet_jobs_requeued_total", partition="gpu") == 1
    cluster.sync(node)  # the agent gets the kill
    report = RunReport(
        job_id=urgent, run=1, state="signalled", signal=15, at=cluster.clock.now(), cause="killed"
    )
    cluster.sync(node, [report])
    assert cluster.state(urgent) == "PENDING"
    assert value(scrape(ctl), "gpufleet_jobs_requeued_total", partition="gpu") == 2


def test_the_allocated_fraction_counts_shares_and_mig_slices() -> None:
    slices = tuple(("1g.10gb", start) for start in range(7))
    gpus = (
        GPU(0, "A100-80GB", 81920, mig=slices),
        GPU(1, "A100-80GB", 81920),
        GPU(2, "A100-80GB", 81920),
    )
    state = ClusterState([Node(name="m", cpu_milli=8000, memory_mib=65536, gpus=gpus)])
    state.allocate(Assignment(node=0, mig=(0, 1)))
    state.allocate(Assignment(node=0, gpus=(1,), gpu_milli=500))
    # 2 of GPU 0's 7 slices; half of GPU 1; GPU 2 free.
    assert _allocated(state) == [[2 / 7, 0.5, 0.0]]


def gpu_series(gpus: list[GpuView], readings: list[NodeReadings]) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(gpu_text(gpus, readings)):
        for s in family.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def test_a_gpu_without_uuid_gets_one_of_its_node_and_index() -> None:
    """Declared GPUs have no NVIDIA UUID: ``NODE/gpuINDEX``, not the bare index on every node.

    An agent without NVML registers each GPU by its index (``Inventory.gpu_ids``)."""
    gpus = [GpuView(node, 0, "0", "L4", 0.0, ()) for node in ("n1", "n2")]
    readings = [NodeReadings(node, 0.0, (GpuReading(index=0, temp_c=40),)) for node in ("n1", "n2")]
    got = gpu_series(gpus, readings)
    for name in ("gpufleet_gpu_allocated", "DCGM_FI_DEV_GPU_TEMP"):
        assert sorted(dict(k)["UUID"] for k in named(got, name)) == ["n1/gpu0", "n2/gpu0"]


def test_the_health_reason_label_is_a_code_that_stays_while_values_move() -> None:
    gpus = [GpuView("n1", 0, "GPU-0", "L4", 0.0, ())]
    labels = set()
    for temp in (95, 96, 97):
        reason = f"temperature {temp} C >= 90 C"
        reading = GpuReading(index=0, temp_c=temp, healthy=False, health_reason=reason)
        got = gpu_series(gpus, [NodeReadings("n1", 0.0, (reading,))])
        labels |= {dict(k).get("reason") for k in named(got, "gpufleet_gpu_healthy")}
    assert labels == {"temperature"}
