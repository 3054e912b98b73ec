"""A stand-in for the ``pynvml`` module on machines without NVIDIA GPUs.

It answers the calls the agent makes, with the same names, constants and
error classes as nvidia-ml-py, from a list of ``FakeGpu``. Errors are
raised as pynvml raises them: ``NVMLError_NotSupported`` for a feature a
GPU lacks, ``NVMLError_GpuIsLost`` for a GPU that fell off the bus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1 << 20


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_mib: int = 81920
    used_mib: int = 0
    util: int | None = 0  # None: not supported (a MIG-partitioned GPU)
    temp: int | None = 40  # None: no sensor NVML can read
    power_mw: int | None = 60000  # None: no power reading (NVML's NOT_SUPPORTED)
    throttle: int = 0
    ecc: tuple[int, int] | None = (0, 0)  # corrected, uncorrected; None: no ECC
    remap: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    lost: bool = False
    mig: list[str] | None = None  # MIG instance UUIDs when MIG is on
    mig_profiles: list[str] = field(default_factory=list)
    nvlink_peers: list[int] = field(default_factory=list)  # per link, the far GPU; -1: a switch
    numa: int = 0


class FakeNvml:
    """Use as ``monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([...]))``."""

    NVMLError = pynvml.NVMLError
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_MEMORY_ERROR_TYPE_CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver: str = "550.54.15",
        cuda: int = 12040,
        fail_init: bool = False,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.fail_init = fail_init
        self.xids: list[tuple[int, int]] = []  # (gpu index, xid) waiting in the event set
        self.initialised = False

    def _gpu(self, handle: int) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    # -- system
    def nvmlInit(self) -> None:
        if self.fail_init:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    # -- identity and readings
    def nvmlDeviceGetUUID(self, h: int | tuple[int, int]) -> str:
        if isinstance(h, tuple):  # a MIG instance
            return (self.gpus[h[0]].mig or [])[h[1]]
        return self.gpus[h].uuid

    def nvmlDeviceGetName(self, h: int | tuple[int, int]) -> str:
        if isinstance(h, tuple):
            return f"{self.gpus[h[0]].name} MIG {self.gpus[h[0]].mig_profiles[h[1]]}"
        return self.gpus[h].name

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        g = self._gpu(h)
        return SimpleNamespace(
            total=g.memory_mib * MIB, used=g.used_mib * MIB, free=(g.memory_mib - g.used_mib) * MIB
        )

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        g = self._gpu(h)
        if g.util is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=g.util, memory=0)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return _supported(self._gpu(h).temp)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return _supported(self._gpu(h).power_mw)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return self._gpu(h).throttle

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        g = self._gpu(h)
        if g.ecc is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.ecc[0 if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else 1]

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        g = self._gpu(h)
        if g.remap is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g.remap

    # -- XID events
    def nvmlEventSetCreate(self) -> str:
        return "events"

    def nvmlDeviceRegisterEvents(self, h: int, kinds: int, events: str) -> None:
        pass

    def nvmlEventSetFree(self, events: str) -> None:
        pass

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:
        if not self.xids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = self.xids.pop(0)
        return SimpleNamespace(device=index, eventData=xid)

    # -- inventory
    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        g = self.gpus[h]
        on = pynvml.NVML_DEVICE_MIG_ENABLE if g.mig is not None else 0
        return on, on

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, i: int) -> tuple[int, int]:
        mig = self.gpus[h].mig or []
        if i >= len(mig):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return (h, i)

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        peers = self.gpus[h].nvlink_peers
        if link >= len(peers):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        peer = self.gpus[h].nvlink_peers[link]  # -1: an NVSwitch
        return SimpleNamespace(busId=_bus(peer) if peer >= 0 else "00000000:C0:00.0")

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=_bus(h))

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return self.gpus[h].numa


def _bus(index: int) -> str:
    return f"00000000:{0x10 + index:02X}:00.0"


def _supported(value: int | None) -> int:
    if value is None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    return value
