"""What NVML and the host say this node is: its GPUs and the machine around them.

``discover`` reads, per GPU, its index, UUID, model, memory, MIG mode and
instances (UUID and profile), NVLink peers and NUMA node; per node, the
driver and CUDA versions, CPUs, memory, host name, kernel and OS. It only
reads: nothing here changes MIG, clocks or any other setting.

``differences`` compares a declared node with what was found, in words an
operator can act on; ``discovered_group`` turns the facts into a cluster
file group for a node whose inventory file is missing.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpufleet.core.catalog import GPU_MEMORY_MIB
from gpufleet.core.model import Node

MIB = 1 << 20
MEMORY_TOLERANCE = 0.03
"""GPU memory within 3% of the declared size matches (NVML reports a little less or more
than the marketing size: an H200 shows 143,771 MiB for 141 GiB)."""
SYSFS_PCI = Path("/sys/bus/pci/devices")


@dataclass(frozen=True)
class MigFacts:
    uuid: str
    profile: str  # "1g.10gb", as nvidia-smi names it


@dataclass(frozen=True)
class GpuFacts:
    index: int
    uuid: str
    name: str  # NVML's name, "NVIDIA H100 80GB HBM3"
    model: str | None  # the catalogue's model, None when unknown
    memory_mib: int
    bus_id: str
    mig_enabled: bool
    mig: tuple[MigFacts, ...]
    nvlink_peers: tuple[int, ...]  # GPU indices reached over an active NVLink
    numa: int | None


@dataclass(frozen=True)
class NodeFacts:
    hostname: str
    kernel: str
    os: str
    cpus: int
    memory_mib: int
    driver: str
    cuda: str
    gpus: tuple[GpuFacts, ...]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def catalog_model(name: str, memory_mib: int) -> str | None:
    """The catalogue model an NVML name stands for: the family named in it ("A100" in
    "NVIDIA A100-SXM4-80GB") whose memory is nearest. None when no family matches."""
    tokens = set(name.replace("-", " ").split())
    best: tuple[int, str] | None = None
    for model, size in GPU_MEMORY_MIB.items():
        family = model.split("-")[0].removesuffix("M16").removesuffix("M32")
        if family in tokens:
            gap = abs(size - memory_mib)
            if best is None or gap < best[0]:
                best = (gap, model)
    return best[1] if best else None


def discover(nvml: Any) -> NodeFacts:
    """Read this host through an initialised ``pynvml``."""
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    buses = [nvml_text(nvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
    links = [_nvlinks(nvml, h, buses) for h in handles]
    switched = {i for i, (_, to_switch) in enumerate(links) if to_switch}
    gpus = []
    for i, h in enumerate(handles):
        name = nvml_text(nvml.nvmlDeviceGetName(h))
        memory = int(nvml.nvmlDeviceGetMemoryInfo(h).total) // MIB
        mig_on = _mig_enabled(nvml, h)
        gpus.append(
            GpuFacts(
                index=i,
                uuid=nvml_text(nvml.nvmlDeviceGetUUID(h)),
                name=name,
                model=catalog_model(name, memory),
                memory_mib=memory,
                bus_id=buses[i],
                mig_enabled=mig_on,
                mig=_mig_instances(nvml, h) if mig_on else (),
                # A link to an NVSwitch reaches every GPU that also has one.
                nvlink_peers=tuple(
                    sorted((links[i][0] | (switched if i in switched else set())) - {i})
                ),
                numa=_numa(nvml, h, buses[i]),
            )
        )
    cuda = int(nvml.nvmlSystemGetCudaDriverVersion_v2())
    return NodeFacts(
        hostname=socket.gethostname(),
        kernel=platform.release(),
        os=_os_name(),
        cpus=os.cpu_count() or 1,
        memory_mib=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB,
        driver=nvml_text(nvml.nvmlSystemGetDriverVersion()),
        cuda=f"{cuda // 1000}.{cuda % 1000 // 10}",
        gpus=tuple(gpus),
    )


def differences(declared: Node, facts: NodeFacts) -> list[str]:
    """Where the declared node and the discovered one disagree (empty: they agree)."""
    out: list[str] = []
    if len(declared.gpus) != len(facts.gpus):
        out.append(f"declares {len(declared.gpus)} GPUs, NVML finds {len(facts.gpus)}")
    for gpu, found in zip(declared.gpus, facts.gpus, strict=False):
        where = f"GPU {gpu.index}"
        if found.model != gpu.model:
            out.append(f"{where}: declared {gpu.model}, NVML finds {found.name}")
        elif abs(found.memory_mib - gpu.memory_mib) > MEMORY_TOLERANCE * gpu.memory_mib:
            out.append(f"{where}: declared {gpu.memory_mib} MiB, NVML finds {found.memory_mib} MiB")
        if (gpu.mig is not None) != found.mig_enabled:
            state = "on" if found.mig_enabled else "off"
            out.append(f"{where}: MIG is {state}, the inventory says otherwise")
    if declared.cpu_milli > facts.cpus * 1000:
        out.append(f"declares {declared.cpu_milli / 1000:g} CPUs, the host has {facts.cpus}")
    if declared.memory_mib > facts.memory_mib:
        out.append(f"declares {declared.memory_mib} MiB, the host has {facts.memory_mib} MiB")
    return out


def discovered_group(facts: NodeFacts, name: str) -> dict[str, Any]:
    """A cluster file group for this node from its facts; ValueError when its GPUs
    are not all one known model (declare the node in a file then)."""
    group: dict[str, Any] = {
        "names": name,
        "cpu_milli": facts.cpus * 1000,
        "memory_mib": facts.memory_mib,
    }
    if not facts.gpus:
        return group
    models = {g.model for g in facts.gpus}
    if len(models) != 1 or None in models:
        found = ", ".join(sorted({g.name for g in facts.gpus}))
        raise ValueError(f"NVML finds {found}: not one known model; declare the node instead")
    # NVLink domains: GPUs joined by active links share one (a switch board is one domain).
    domain = list(range(len(facts.gpus)))
    for g in facts.gpus:
        for peer in g.nvlink_peers:
            low, high = sorted((domain[g.index], domain[peer]))
            domain = [low if d == high else d for d in domain]
    return {
        **group,
        "gpus": {
            "model": models.pop(),
            "count": len(facts.gpus),
            "memory_mib": min(g.memory_mib for g in facts.gpus),
            "numa": [g.numa or 0 for g in facts.gpus],
            "nvlink": domain,
        },
    }


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:  # a GPU without MIG
        return False
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def _mig_instances(nvml: Any, handle: Any) -> tuple[MigFacts, ...]:
    out = []
    for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
        except nvml.NVMLError:  # a free slot
            continue
        name = nvml_text(nvml.nvmlDeviceGetName(mig))  # "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
        out.append(MigFacts(uuid=nvml_text(nvml.nvmlDeviceGetUUID(mig)), profile=name.split()[-1]))
    return tuple(out)


def _nvlinks(nvml: Any, handle: Any, buses: list[str]) -> tuple[set[int], bool]:
    """The GPUs at the far end of this GPU's active links, and whether one goes to a
    switch (its far end is no GPU)."""
    peers: set[int] = set()
    to_switch = False
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
            remote = nvml_text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).lower()
        except nvml.NVMLError:  # no such link, or no NVLink at all
            continue
        if remote in buses:
            peers.add(buses.index(remote))
        else:
            to_switch = True
    return peers, to_switch


def _numa(nvml: Any, handle: Any, bus_id: str) -> int | None:
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
        return node if node >= 0 else None  # -1: the platform has no NUMA affinity
    except (nvml.NVMLError, AttributeError):  # older drivers and bindings: ask sysfs
        pass
    short = bus_id[-12:]  # NVML's 8-digit PCI domain, sysfs's 4
    try:
        value = int((SYSFS_PCI / short / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _os_name() -> str:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME", platform.system())
    except OSError:
        return platform.system()


def nvml_text(value: str | bytes) -> str:
    """NVML's strings: bytes from older bindings, str from newer ones."""
    return value.decode() if isinstance(value, bytes) else value
