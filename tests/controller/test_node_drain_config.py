"""What the node list shows for drained nodes without a live agent, and the
configuration's version before anything is stored."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.harness import ADMIN, OPERATOR, Cluster, inventory
from gpufleet.adapters.inventory import nodes_from_groups
from store.databases import Database


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    c = Cluster(db, nodes=nodes_from_groups([inventory("n3")], "test"))
    c.register("n1")
    yield c
    c.ctl.stop()


def state(cluster: Cluster, name: str) -> str:
    return cluster.ctl.get_node(principal=OPERATOR, name=name).state


def test_a_drain_shows_on_a_node_without_an_agent(cluster: Cluster) -> None:
    assert state(cluster, "n3") == "unknown"
    drained = cluster.ctl.drain_node(principal=OPERATOR, name="n3", reason="rma")
    assert (drained.state, drained.reason) == ("drain", "rma")
    assert [(n.name, n.state) for n in cluster.ctl.list_nodes(principal=OPERATOR)] == [
        ("n1", "idle"),
        ("n3", "drain"),
    ]
    assert cluster.ctl.resume_node(principal=OPERATOR, name="n3").state == "unknown"


def test_a_drain_shows_on_a_node_whose_agent_went_silent(cluster: Cluster) -> None:
    cluster.ctl.drain_node(principal=OPERATOR, name="n1", reason="rma")
    cluster.clock.advance(cluster.setup.heartbeat_timeout_s + 1)
    cluster.ctl.run_cycle_now()
    assert state(cluster, "n1") == "drain"
    cluster.ctl.resume_node(principal=OPERATOR, name="n1")
    assert state(cluster, "n1") == "down"


def test_config_is_version_0_until_one_is_stored(cluster: Cluster) -> None:
    empty = cluster.ctl.get_config(principal=ADMIN)
    assert (empty.version, empty.config) == (0, {})
    patched = cluster.ctl.patch_config(principal=ADMIN, patch={"note": "x"}, version=0)
    assert patched.version == 1
    assert cluster.ctl.get_config(principal=ADMIN).version == 1
