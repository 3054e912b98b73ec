"""Node pools in the cluster file: ``[[pools]]``."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.test_inventory import GROUP, write
from gpufleet.adapters.inventory import ClusterFileError, load_cluster, load_cluster_file

POOL = """
[[pools]]
name = "burst"
min_nodes = 1
max_nodes = 12
boot_s = 240
price_gpu_hour = 2.5
partitions = ["burst"]
cpu_milli = 96000
memory_mib = 786432
labels = { cloud = "yes" }
gpus = { model = "A100-80GB", count = 8 }
"""
NODES = GROUP

def test_pool_reads_every_key(tmp_path: Path) -> None:
    nodes, pools = load_cluster_file(write(tmp_path, NODES + POOL))
    assert [n.name for n in nodes] == ["n1", "n2"]
    (p,) = pools
    assert (p.name, p.min_nodes, p.max_nodes, p.boot_s) == ("burst", 1, 12, 240)
    assert (p.price_gpu_hour, p.partitions) == (2.5, ("burst",))
    node = p.node(p.node_name(3))
    assert (node.name, node.pool, node.labels["cloud"]) == ("burst-03", "burst", "yes")
    assert len(node.gpus) == 8 and node.gpu_model == "A100-80GB"
    assert p.price_per_s() == pytest.approx(8 * 2.5 / 3600)
    assert load_cluster(write(tmp_path, NODES + POOL)) == nodes  # pools left out


def test_a_file_of_pools_only(tmp_path: Path) -> None:
    nodes, pools = load_cluster_file(write(tmp_path, POOL))
    assert nodes == [] and [p.name for p in pools] == ["burst"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (POOL.replace("max_nodes = 12", "max_nodes = 0"), "pool 1 (burst): max_nodes: must be"),
        (POOL.replace("min_nodes = 1", "min_nodes = 20"), "pool 1 (burst): max_nodes: must be"),
        (POOL.replace("boot_s = 240", "boot_s = -1"), "pool 1 (burst): boot_s: must be zero"),
        (POOL.replace("2.5", '"cheap"'), "pool 1 (burst): price_gpu_hour: must be a number"),
        (POOL.replace('["burst"]', '"burst"'), "pool 1 (burst): partitions: must be a list"),
        (POOL.replace("max_nodes = 12", ""), "pool 1 (burst): max_nodes: required"),
        (POOL + "nvme = 1\n", "pool 1 (burst): nvme: unknown key"),
        (POOL.replace('"A100-80GB"', '"A200"'), "pool 1 (burst): gpus.model:"),
        (POOL.replace('name = "burst"', 'name = "a b"'), "pool 1 (a b): name: must be letters"),
        (POOL + POOL, "pool 2 (burst): name: pool 'burst' is declared twice"),
        (
            NODES.replace("n[1-2]", "burst-01") + POOL,
            "pool 1 (burst): name: its node 'burst-01' is also declared in a [[nodes]] group",
        ),
        ("[pools]\nname = 1\n", "pools: must be an array of tables"),
        ("[[other]]\n", "other: unknown key (known: nodes, pools)"),
    ],
)
def test_bad_pools_say_where(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ClusterFileError) as e:
        load_cluster_file(write(tmp_path, text))
    assert message in str(e.value)
    assert "\n" not in str(e.value)
