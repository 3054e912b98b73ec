"""Where the agent's GPU readings come from: NVML, or the node's declared file.

``open_telemetry`` uses NVML (nvidia-ml-py) when the library and a driver
are there and see at least one GPU. Otherwise it reads the declared
telemetry file instead: a TOML file of ``[[gpus]]`` tables, each with an
``index`` and any ``GpuReading`` fields to set, re-read at every heartbeat.
Only the GPUs the file names have readings: a GPU it does not name, or a
missing file, sends none, so ``/metrics`` has no series for it rather
than made-up zeros. That file is how a node without NVIDIA hardware (a
laptop, CI) shows GPU readings, and how tests inject an XID or a
temperature.

On a host whose driver lists GPUs, NVML failing is a fault, not a choice:
the declared source then carries a ``fault`` that fails the node's health
verdict (the node drains, ``gpufleet nodes`` says why), since its XIDs and
ECC errors go unwatched.

NVML keeps each GPU's last XID for ``XID_HOLD_S`` after it was seen: NVML
reports no GPU reset, so a reset GPU comes back when its XID has aged out
(or the agent restarts).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.agent.discover import nvml_text
from gpufleet.agent.health import LOST, GpuHealthPolicy, judged
from gpufleet.agent.inventory import nvidia_gpu_count
from gpufleet.api.agent_schemas import GpuReading
from gpufleet.core.model import Node

log = logging.getLogger("gpufleet.agent")

MIB = 1 << 20
T = TypeVar("T")

XID_HOLD_S = 3600.0
"""How long NVML's last XID of a GPU stands (and masks it, for the reset class)."""


class Telemetry(Protocol):
    """A source of the node's GPU readings, judged by the health checks."""

    description: str
    fault: str
    """Why this source is not what the host should have ('' when it is): fails the node."""

    def readings(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


def telemetry_path(inventory: Path) -> Path:
    """The declared telemetry file beside an inventory: ``node.toml`` -> ``node.telemetry.toml``."""
    return inventory.with_name(inventory.stem + ".telemetry.toml")


class DeclaredTelemetry:
    """Readings of the declared GPUs, with the values the telemetry file sets."""

    def __init__(
        self, node: Node, path: Path, policy: GpuHealthPolicy | None = None, fault: str = ""
    ) -> None:
        self.node = node
        self.path = path
        self.policy = policy or GpuHealthPolicy()
        self.description = f"declared telemetry file {path}"
        self.fault = fault
        self._values: dict[int, dict[str, Any]] = {}
        self._complaint = ""

    def readings(self) -> list[GpuReading]:
        """The GPUs the file names; ``uuid`` stays empty unless declared (``/metrics``
        makes one from the node and index)."""
        self._reload()
        out = []
        for gpu in self.node.gpus:
            if gpu.index not in self._values:
                continue
            base: dict[str, Any] = {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "mem_free_mib": gpu.memory_mib,
            }
            base.update(self._values[gpu.index])
            out.append(judged(GpuReading.model_validate(base), self.policy))
        return out

    def close(self) -> None:
        pass

    def _reload(self) -> None:
        """Read the file again; a missing file means no values, a broken one keeps the last."""
        if not self.path.exists():
            self._values = {}
            return
        try:
            doc = read_toml(self.path)
            tables = doc.get("gpus", [])
            if not isinstance(tables, list):
                raise ValueError("gpus: must be a list of tables")
            values: dict[int, dict[str, Any]] = {}
            for table in tables:
                reading = GpuReading.model_validate(table)  # checks names and types
                values[reading.index] = dict(table)
        except (UnreadableToml, ValueError, ValidationError) as e:
            message = f"{self.path}: {e}".replace("\n", " ")
            if message != self._complaint:  # once per distinct problem, not per heartbeat
                log.warning("ignoring the telemetry file: %s", message)
                self._complaint = message
            return
        self._complaint = ""
        self._values = values


class NvmlTelemetry:
    """Readings from NVML. XIDs come from an NVML event set, polled at each reading."""

    def __init__(
        self,
        nvml: Any,
        policy: GpuHealthPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml = nvml
        self.policy = policy or GpuHealthPolicy()
        self.description = "NVML"
        self.fault = ""
        self._clock = clock
        count = nvml.nvmlDeviceGetCount()
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._uuids = [nvml_text(nvml.nvmlDeviceGetUUID(h)) for h in self._handles]
        self._models = [nvml_text(nvml.nvmlDeviceGetName(h)) for h in self._handles]
        self._xid_last = [0] * count
        self._xid_seen = [0.0] * count
        self._xid_count = [0] * count
        self._events = None
        try:
            events = nvml.nvmlEventSetCreate()
            for h in self._handles:
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, events)
            self._events = events
        except nvml.NVMLError as e:
            log.info("NVML XID events unavailable (%s); XIDs are not watched", e)

    def readings(self) -> list[GpuReading]:
        self._drain_xids()
        return [judged(self._read(i), self.policy) for i in range(len(self._handles))]

    def close(self) -> None:
        try:
            if self._events is not None:
                self.nvml.nvmlEventSetFree(self._events)
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def _drain_xids(self) -> None:
        """Take the XID events waiting; forget a last XID older than ``XID_HOLD_S``."""
        if self._events is None:
            return
        by_handle = {id(h): i for i, h in enumerate(self._handles)}
        while True:
            try:
                event = self.nvml.nvmlEventSetWait_v2(self._events, 0)
            except self.nvml.NVMLError:  # NVML_ERROR_TIMEOUT: no event waiting
                break
            i = by_handle.get(id(event.device))
            if i is None:
                i = next(
                    (
                        k
                        for k, u in enumerate(self._uuids)
                        if u == nvml_text(self.nvml.nvmlDeviceGetUUID(event.device))
                    ),
                    None,
                )
            if i is not None and event.eventData:
                self._xid_last[i] = int(event.eventData)
                self._xid_seen[i] = self._clock()
                self._xid_count[i] += 1
        now = self._clock()
        for i, seen in enumerate(self._xid_seen):
            if self._xid_last[i] and now - seen >= XID_HOLD_S:
                self._xid_last[i] = 0

    def _read(self, i: int) -> GpuReading:
        nvml, h = self.nvml, self._handles[i]
        base = GpuReading(
            index=i,
            uuid=self._uuids[i],
            model=self._models[i],
            xid_last=self._xid_last[i],
            xid_count=self._xid_count[i],
        )
        try:
            return base.model_copy(update=self._values(h))
        except nvml.NVMLError_GpuIsLost:
            return base.model_copy(update={"healthy": False, "health_reason": LOST})

    def _values(self, h: Any) -> dict[str, Any]:
        nvml = self.nvml
        memory = nvml.nvmlDeviceGetMemoryInfo(h)
        remap = _maybe(nvml, lambda: nvml.nvmlDeviceGetRemappedRows(h), (0, 0, 0, 0))
        return {
            "util_pct": _maybe(
                nvml, lambda: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu), None
            ),
            "mem_used_mib": int(memory.used) // MIB,
            "mem_free_mib": int(memory.free) // MIB,
            "temp_c": _maybe(
                nvml,
                lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                None,
            ),
            "power_w": _maybe(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, None),
            "throttle_reasons": int(
                _maybe(nvml, lambda: nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h), 0)
            ),
            "ecc_sbe_volatile": _ecc(nvml, h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            "ecc_dbe_volatile": _ecc(nvml, h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            "remap_correctable": int(remap[0]),
            "remap_uncorrectable": int(remap[1]),
            "remap_pending": bool(remap[2]),
            "remap_failure": bool(remap[3]),
        }


def _ecc(nvml: Any, handle: Any, kind: int) -> int:
    return int(
        _maybe(
            nvml, lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, kind, nvml.NVML_VOLATILE_ECC), 0
        )
    )


def _maybe(nvml: Any, read: Callable[[], T], default: T) -> T:
    """``read()``, or ``default`` where the GPU does not support it (a GeForce has no ECC)."""
    try:
        return read()
    except nvml.NVMLError as e:
        if isinstance(e, nvml.NVMLError_GpuIsLost):
            raise
        return default


def load_nvml() -> tuple[Any, str]:
    """The initialised ``pynvml`` module when it sees a GPU, else None and why not."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as e:
        return None, f"NVML cannot start: {e}"
    if not count:
        pynvml.nvmlShutdown()
        return None, "NVML sees no GPU"
    return pynvml, ""


def open_telemetry(
    node: Node, declared: Path, policy: GpuHealthPolicy | None = None, nvml: Any = None
) -> Telemetry:
    """NVML (``nvml``, an initialised ``pynvml``, else loaded here) when it sees GPUs;
    else the declared file, saying why in one line: a warning, and a ``fault`` that
    fails the node, where the driver lists GPUs that NVML should have seen."""
    why = ""
    if nvml is None:
        nvml, why = load_nvml()
    if nvml is not None:
        return NvmlTelemetry(nvml, policy)
    listed = nvidia_gpu_count()
    if not listed:
        log.info("%s; GPU readings come from %s", why, declared)
        return DeclaredTelemetry(node, declared, policy)
    fault = f"telemetry: {why} though the driver lists {listed} GPUs"
    log.warning("%s; GPU readings come from %s", fault, declared)
    return DeclaredTelemetry(node, declared, policy, fault=fault)
