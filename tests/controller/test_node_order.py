"""Node order, which decides placement ties, is the same before and after a restart:
declared nodes in the configuration's order, then registered nodes as they joined."""

from __future__ import annotations

from controller.harness import ANA, Cluster, inventory, spec
from gpufleet.adapters.inventory import nodes_from_groups
from store.databases import Database


def order(cluster: Cluster) -> list[str]:
    return [n.name for n in cluster.ctl.book.state.nodes]


def first_placement(cluster: Cluster) -> str:
    """Where a 1-GPU job goes on an idle cluster (a tie between equal nodes)."""
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    cluster.exit(node, job, 1)
    return node


def test_registered_nodes_keep_their_joining_order_across_a_restart(db: Database) -> None:
    c = Cluster(db)
    try:
        c.register("n2", "n1")
        assert order(c) == ["n2", "n1"]
        assert first_placement(c) == "n2"
        c.restart()
        c.register("n1", "n2")  # agents re-register in any order: nothing moves
        assert order(c) == ["n2", "n1"]
        assert first_placement(c) == "n2"
    finally:
        c.ctl.stop()


def test_declared_nodes_come_first_in_the_configuration_s_order(db: Database) -> None:
    declared = nodes_from_groups([inventory("n2"), inventory("n1")], source="test")
    c = Cluster(db, nodes=declared)
    try:
        c.register("n0", "n2", "n1")
        assert order(c) == ["n2", "n1", "n0"]
        c.restart()
        assert order(c) == ["n2", "n1", "n0"]
    finally:
        c.ctl.stop()
