"""The controller keeps each node's latest GPU readings from its agent's syncs."""

from __future__ import annotations

from controller.harness import ADMIN, Cluster, inventory
from gpufleet.api.agent_schemas import AgentRegister, AgentSync, GpuReading


def test_latest_readings_per_node(cluster: Cluster) -> None:
    assert cluster.ctl.gpu_readings() == {}
    hot = [GpuReading(index=0, uuid="GPU-0", temp_c=91, healthy=False, health_reason="hot")]
    at = cluster.clock.advance(5)
    cluster.ctl.sync_agent(principal=ADMIN, node="n1", body=AgentSync(gpus=hot))
    readings = cluster.ctl.gpu_readings()
    assert list(readings) == ["n1"]
    assert (readings["n1"].node, readings["n1"].at, readings["n1"].gpus) == ("n1", at, tuple(hot))
    # A sync without readings (a report flush, an older agent) keeps the last ones.
    cluster.clock.advance(5)
    cluster.ctl.sync_agent(principal=ADMIN, node="n1", body=AgentSync())
    assert cluster.ctl.gpu_readings()["n1"].at == at
    cool = [GpuReading(index=0, uuid="GPU-0", temp_c=40)]
    cluster.ctl.sync_agent(principal=ADMIN, node="n1", body=AgentSync(gpus=cool))
    assert cluster.ctl.gpu_readings()["n1"].gpus == tuple(cool)
    assert cluster.ctl.gpu_readings()["n1"].at == at + 5


def test_inventory_differences_go_to_the_node_history(cluster: Cluster) -> None:
    body = AgentRegister(
        inventory=inventory("n1"),
        facts={"driver": "550.54.15", "cuda": "12.4"},
        differences=["declares 4 GPUs, NVML finds 3"],
    )
    cluster.ctl.register_agent(principal=ADMIN, node="n1", body=body)
    entries = cluster.ctl.list_audit(principal=ADMIN).entries
    mine = [(e.action, e.target, e.detail) for e in entries if e.action == "node.inventory"]
    assert mine == [("node.inventory", "n1", {"differences": ["declares 4 GPUs, NVML finds 3"]})]


def test_driver_drift_across_a_partition_is_reported(cluster: Cluster) -> None:
    def register(node: str, driver: str) -> None:
        body = AgentRegister(inventory=inventory(node), facts={"driver": driver, "cuda": "12.4"})
        cluster.ctl.register_agent(principal=ADMIN, node=node, body=body)

    register("n1", "550.54.15")
    register("n2", "550.54.15")
    register("n3", "535.104.05")  # left behind by an upgrade
    register("n1", "550.54.15")  # agrees with most: nothing to report
    entries = cluster.ctl.list_audit(principal=ADMIN).entries
    drifts = [(e.target, e.detail) for e in entries if e.action == "node.drift"]
    assert drifts == [
        ("n3", {"drift": "partition gpu: driver 535.104.05, most of its nodes have 550.54.15"})
    ]
