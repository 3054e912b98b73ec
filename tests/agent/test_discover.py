"""NVML discovery (pynvml patched): the node's facts, and where a declared node differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.fake_nvml import FakeGpu, FakeNvml
from gpufleet.adapters.inventory import nodes_from_groups
from gpufleet.agent.discover import catalog_model, differences, discover
from gpufleet.agent.inventory import InventoryError, read_inventory


def four_gpus() -> FakeNvml:
    """Two NVLink pairs on two NUMA nodes; GPU 3 split into two MIG instances."""
    gpus = [
        FakeGpu("GPU-0", nvlink_peers=[1, 1], numa=0),
        FakeGpu("GPU-1", nvlink_peers=[0, 0], numa=0),
        FakeGpu("GPU-2", nvlink_peers=[3], numa=1),
        FakeGpu(
            "GPU-3",
            nvlink_peers=[2],
            numa=1,
            mig=["MIG-a", "MIG-b"],
            mig_profiles=["3g.40gb", "3g.40gb"],
        ),
    ]
    return FakeNvml(gpus, driver="550.54.15", cuda=12040)


def test_discover_reads_every_gpu_and_the_host() -> None:
    facts = discover(four_gpus())
    assert [(g.index, g.uuid, g.model, g.memory_mib, g.numa) for g in facts.gpus] == [
        (i, f"GPU-{i}", "A100-80GB", 81920, i // 2) for i in range(4)
    ]
    assert [g.nvlink_peers for g in facts.gpus] == [(1,), (0,), (3,), (2,)]
    assert [g.mig_enabled for g in facts.gpus] == [False, False, False, True]
    assert [(m.uuid, m.profile) for m in facts.gpus[3].mig] == [
        ("MIG-a", "3g.40gb"),
        ("MIG-b", "3g.40gb"),
    ]
    assert (facts.driver, facts.cuda) == ("550.54.15", "12.4")
    assert facts.cpus >= 1 and facts.memory_mib > 0 and facts.hostname and facts.kernel
    assert facts.as_json()["gpus"][3]["mig"][0] == {"uuid": "MIG-a", "profile": "3g.40gb"}


def test_an_nvswitch_makes_every_switched_gpu_a_peer() -> None:
    nvml = FakeNvml([FakeGpu(f"GPU-{i}", nvlink_peers=[-1, -1]) for i in range(3)])
    nvml.gpus.append(FakeGpu("GPU-3"))  # no NVLink at all
    assert [g.nvlink_peers for g in discover(nvml).gpus] == [(1, 2), (0, 2), (0, 1), ()]


@pytest.mark.parametrize(
    ("name", "memory_mib", "model"),
    [
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
        ("NVIDIA A100-PCIE-40GB", 40960, "A100-40GB"),
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
        ("NVIDIA H200", 143771, "H200-141GB"),
        ("NVIDIA L4", 23034, "L4"),
        ("NVIDIA L40S", 46068, "L40S"),
        ("NVIDIA A10", 23028, "A10"),
        ("Tesla T4", 15360, "T4"),
        ("Tesla V100-SXM2-32GB", 32768, "V100M32"),
        ("Tesla V100-PCIE-16GB", 16384, "V100M16"),
        ("NVIDIA GeForce RTX 4090", 24564, None),
    ],
)
def test_nvml_names_map_to_the_catalogue(name: str, memory_mib: int, model: str | None) -> None:
    assert catalog_model(name, memory_mib) == model


def node(gpus: object, cpu_milli: int = 1000, memory_mib: int = 1024) -> dict[str, object]:
    return {"names": "n1", "cpu_milli": cpu_milli, "memory_mib": memory_mib, "gpus": gpus}


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        ({"model": "A100-80GB", "count": 4, "mig": {"3": "3g.40gb,3g.40gb"}}, []),
        (
            {"model": "A100-80GB", "count": 8},
            ["declares 8 GPUs, NVML finds 4", "GPU 3: MIG is on, the inventory says otherwise"],
        ),
        (
            {"model": "H100-80GB", "count": 4, "mig": {"3": "3g.40gb,3g.40gb"}},
            [f"GPU {i}: declared H100-80GB, NVML finds NVIDIA A100-SXM4-80GB" for i in range(4)],
        ),
        (
            # No MIG layout: the file refuses one on a GPU smaller than its model.
            {"model": "A100-80GB", "count": 4, "memory_mib": 40960},
            [f"GPU {i}: declared 40960 MiB, NVML finds 81920 MiB" for i in range(4)]
            + ["GPU 3: MIG is on, the inventory says otherwise"],
        ),
    ],
)
def test_differences(declared: dict[str, object], expected: list[str]) -> None:
    (built,) = nodes_from_groups([node(declared)], "test")
    assert differences(built, discover(four_gpus())) == expected


def test_host_shortfalls_are_differences() -> None:
    facts = discover(four_gpus())
    gpus = {"model": "A100-80GB", "count": 4, "mig": {"3": "3g.40gb,3g.40gb"}}
    group = node(gpus, cpu_milli=(facts.cpus + 1) * 1000, memory_mib=facts.memory_mib + 1)
    (built,) = nodes_from_groups([group], "test")
    assert differences(built, facts) == [
        f"declares {facts.cpus + 1} CPUs, the host has {facts.cpus}",
        f"declares {facts.memory_mib + 1} MiB, the host has {facts.memory_mib} MiB",
    ]


def test_without_a_file_the_agent_registers_what_nvml_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nvml = four_gpus()
    nvml.gpus[3].mig = None
    found = read_inventory(tmp_path / "missing.toml", "n7", nvml)
    assert found.node.name == "n7" and found.differences == ()
    assert [(g.model, g.numa, g.nvlink_domain) for g in found.node.gpus] == [
        ("A100-80GB", 0, 0), ("A100-80GB", 0, 0), ("A100-80GB", 1, 2), ("A100-80GB", 1, 2),
    ]  # fmt: skip
    assert found.gpu_ids == ("GPU-0", "GPU-1", "GPU-2", "GPU-3")
    nvml.gpus[0].name = "NVIDIA GeForce RTX 4090"
    with pytest.raises(InventoryError, match="not one known model; declare the node instead"):
        read_inventory(tmp_path / "missing.toml", "n7", nvml)


def test_a_declared_node_is_compared_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        '[[nodes]]\nnames = "n1"\ncpu_milli = 1000\nmemory_mib = 1024\n'
        'gpus = { model = "A100-80GB", count = 2 }\n'
    )
    declared = read_inventory(path, None, four_gpus())
    assert declared.differences == ("declares 2 GPUs, NVML finds 4",)
    assert declared.gpu_ids == ("0", "1")  # counts differ: UUIDs cannot be matched
    assert read_inventory(path).differences == ()  # no NVML: nothing to compare


def test_gpufleet_up_writes_the_gpus_nvml_finds(tmp_path: Path) -> None:
    from gpufleet.cli.up import _discovered, _node_toml

    nvml = four_gpus()
    nvml.gpus[3].mig = None
    text, described = _node_toml(4, _discovered(nvml))
    (tmp_path / "node.toml").write_text(text)
    found = read_inventory(tmp_path / "node.toml", None, nvml)
    assert [(g.model, g.numa, g.nvlink_domain) for g in found.node.gpus] == [
        ("A100-80GB", 0, 0), ("A100-80GB", 0, 0), ("A100-80GB", 1, 2), ("A100-80GB", 1, 2),
    ]  # fmt: skip
    assert found.differences == () and described.endswith("4 A100-80GB GPUs (found through NVML)")
    assert _discovered(None) is None
    nvml.gpus[0].name = "NVIDIA GeForce RTX 4090"  # an unknown model: declare it by hand
    assert _discovered(nvml) is None
