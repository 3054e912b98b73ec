"""Pool nodes still booting outlive a controller restart: the restarted controller waits
for them (asking for none again) and still gives them up in time; a node whose agent
registers is booting no more."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from controller.harness import ADMIN, Cluster, spec
from controller.test_scaling import POOL, RECORD, calls
from gpufleet.adapters.inventory import group_table
from gpufleet.api.agent_schemas import AgentRegister
from gpufleet.controller.errors import Invalid
from gpufleet.controller.scaling import LocalProvider, ProviderConfig
from gpufleet.core.job import Partition
from gpufleet.engine.fleet import boot_timeout
from gpufleet.policies.autoscale import AutoscaleArgs
from store.databases import Database

FIRST = POOL.node_name(1)


def pool_cluster(db: Database, out: Path) -> Cluster:
    """A controller with no node but the burst pool's, made by a program that records."""
    program = [sys.executable, "-c", RECORD, str(out), "0"]
    provider = ProviderConfig(
        kind="command", server="http://ctl:6817", create=program, delete=program
    )
    return Cluster(
        db,
        pools=[POOL],
        provider=provider,
        autoscale=AutoscaleArgs(pending_s=0),
        partitions={"burst": Partition("burst", pools=("burst",))},
    )


def asked(c: Cluster) -> list[str]:
    """The nodes the controller asked its provider for, in order (the audit log)."""
    page = c.ctl.list_audit(principal=ADMIN)
    return [e.target for e in reversed(page.entries) if e.action == "node.create"]


def test_a_restart_waits_for_a_booting_node_and_gives_it_up_in_time(
    db: Database, tmp_path: Path
) -> None:
    out = tmp_path / "calls.jsonl"
    c = pool_cluster(db, out)
    try:
        job = c.ctl.submit(principal=ADMIN, spec=spec())
        c.ctl.run_cycle_now()
        (made,) = calls(out, 1)
        assert made["env"]["GPUFLEET_NODE"] == FIRST  # type: ignore[index]
        c.clock.advance(POOL.boot_s)
        c.restart()
        assert c.ctl.fleet is not None and c.ctl.fleet.counts() == {"burst": (1, 0)}
        c.ctl.run_cycle_now()  # the job still waits, for the node booting: none asked again
        assert asked(c) == [FIRST]
        c.ctl.cancel_job(principal=ADMIN, job_id=job.job_id)
        # asked for at t0; given up boot_timeout after t0, not after the restart
        c.clock.advance(boot_timeout(POOL) - POOL.boot_s)
        c.ctl.run_cycle_now()
        deleted = calls(out, 2)[1]
        assert deleted["env"]["GPUFLEET_ACTION"] == "delete"  # type: ignore[index]
        assert deleted["env"]["GPUFLEET_NODE"] == FIRST  # type: ignore[index]
        c.restart()
        assert c.ctl.fleet is not None and c.ctl.fleet.counts() == {"burst": (0, 0)}
    finally:
        c.ctl.stop()


def test_a_node_whose_agent_registered_is_up_after_a_restart(db: Database, tmp_path: Path) -> None:
    out = tmp_path / "calls.jsonl"
    c = pool_cluster(db, out)
    try:
        c.ctl.submit(principal=ADMIN, spec=spec())
        c.ctl.run_cycle_now()
        calls(out, 1)
        body = AgentRegister(inventory=group_table(POOL.node(FIRST)))
        c.ctl.register_agent(principal=ADMIN, node=FIRST, body=body)
        c.restart()
        assert c.ctl.fleet is not None and c.ctl.fleet.counts() == {"burst": (0, 1)}
        c.clock.advance(boot_timeout(POOL))
        c.ctl.run_cycle_now()  # up and given the job: nothing given up, nothing asked
        assert asked(c) == [FIRST]
        assert c.ctl.fleet.counts() == {"burst": (0, 1)}
    finally:
        c.ctl.stop()


def test_a_restart_starts_the_agents_of_local_pool_nodes_again(
    db: Database, tmp_path: Path
) -> None:
    # Nothing listens at the server: the agents only retry, and stop when told.
    provider = ProviderConfig(
        kind="local", server="http://127.0.0.1:18931", state_dir=str(tmp_path / "pool")
    )
    c = Cluster(
        db,
        pools=[POOL],
        provider=provider,
        autoscale=AutoscaleArgs(pending_s=0),
        partitions={"burst": Partition("burst", pools=("burst",))},
    )
    try:
        c.ctl.submit(principal=ADMIN, spec=spec())
        c.ctl.run_cycle_now()
        assert isinstance(c.ctl.provider, LocalProvider)
        first = c.ctl.provider.agents[FIRST]
        body = AgentRegister(inventory=group_table(POOL.node(FIRST)))
        c.ctl.register_agent(principal=ADMIN, node=FIRST, body=body)
        c.restart()
        assert first.poll() is not None  # the controller stopped it (its runs go on)
        # adopted as up, and its agent started again on the same files, to re-attach
        assert c.ctl.fleet is not None and c.ctl.fleet.counts() == {"burst": (0, 1)}
        assert isinstance(c.ctl.provider, LocalProvider)
        again = c.ctl.provider.agents[FIRST]
        assert again.poll() is None and again.pid != first.pid
        assert again.args == first.args  # the same node, inventory and state directory
    finally:
        c.ctl.stop()


def test_a_request_the_pool_could_grow_to_hold_is_accepted_and_no_more(
    db: Database, tmp_path: Path
) -> None:
    # The burst pool makes up to 3 nodes of 2 L4 GPUs and 8 CPUs; none exists yet.
    c = pool_cluster(db, tmp_path / "calls.jsonl")
    try:
        whole = spec(nodes=3, gpus_per_node=2, gpu_type="L4", cpus_per_task=8, hold=True)
        assert c.ctl.submit(principal=ADMIN, spec=whole).job_id
        body = AgentRegister(inventory=group_table(POOL.node(FIRST)))
        c.ctl.register_agent(principal=ADMIN, node=FIRST, body=body)
        assert c.ctl.submit(principal=ADMIN, spec=whole).job_id  # 1 node up, room for 2
        refused = {
            "body.nodes": spec(nodes=4),
            "body.gpus_per_node": spec(gpus_per_node=3),
            "body.gpu_type": spec(gpu_type="A100-80GB"),
            "body.cpus_per_task": spec(cpus_per_task=9),
        }
        for field, bad in refused.items():
            with pytest.raises(Invalid) as e:
                c.ctl.submit(principal=ADMIN, spec=bad)
            assert e.value.field == field, e.value
        assert "(its pools' room to grow included)" in str(e.value)
    finally:
        c.ctl.stop()
