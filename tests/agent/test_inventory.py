"""The agent's inventory: this node picked out of a cluster file."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpufleet.agent import inventory
from gpufleet.agent.inventory import InventoryError, read_inventory

GROUPS = """
[[nodes]]
names = "gpu[1-2]"
pool = "train"
cpu_milli = 32000
memory_mib = 262144
gpus = { model = "L4", count = 2, nvlink = "none" }

[[nodes]]
names = "cpu1"
cpu_milli = 8000
memory_mib = 16384
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_the_only_node_is_this_node_whatever_the_host_name(tmp_path: Path) -> None:
    path = write(tmp_path, '[[nodes]]\nnames = "box"\ncpu_milli = 4000\nmemory_mib = 8192\n')
    found = read_inventory(path)
    assert found.node.name == "box"
    assert found.group == {"names": "box", "cpu_milli": 4000, "memory_mib": 8192}


def test_node_of_a_group_is_narrowed_to_itself(tmp_path: Path) -> None:
    found = read_inventory(write(tmp_path, GROUPS), "gpu2")
    assert found.node.name == "gpu2"
    assert [g.model for g in found.node.gpus] == ["L4", "L4"]
    assert found.group["names"] == "gpu2"
    assert found.group["pool"] == "train"
    assert found.group["gpus"] == {"model": "L4", "count": 2, "nvlink": "none"}
    assert found.gpu_ids == ("0", "1")  # CUDA_VISIBLE_DEVICES takes indices too


def test_the_host_name_picks_among_several(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "cpu1.example.org")
    assert read_inventory(write(tmp_path, GROUPS)).node.name == "cpu1"
    monkeypatch.setattr(socket, "gethostname", lambda: "elsewhere")
    with pytest.raises(InventoryError, match="declares gpu1, gpu2, cpu1, not elsewhere; pick"):
        read_inventory(write(tmp_path, GROUPS))


def test_unknown_node(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="does not declare node 'gpu9'"):
        read_inventory(write(tmp_path, GROUPS), "gpu9")


def test_cluster_file_errors_pass_through(tmp_path: Path) -> None:
    path = write(tmp_path, '[[nodes]]\nnames = "a"\ncpu_milli = 1\nmemory_mib = 1\nnvme = 1\n')
    with pytest.raises(InventoryError, match=r"group 1 \(a\): nvme: unknown key"):
        read_inventory(path)


def test_missing_file_says_whether_there_are_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "none.toml"
    monkeypatch.setattr(inventory, "NVIDIA_PROC", tmp_path / "no-driver")
    with pytest.raises(InventoryError, match="no such file; no GPU was found on this host"):
        read_inventory(missing)
    driver = tmp_path / "driver"
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (driver / bus).mkdir(parents=True)
    monkeypatch.setattr(inventory, "NVIDIA_PROC", driver)
    with pytest.raises(
        InventoryError, match="this host has 2 NVIDIA GPUs, but NVML cannot read them"
    ):
        read_inventory(missing)
