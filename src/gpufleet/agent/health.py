"""The agent's verdict on each GPU from its readings.

XIDs are classified by the resolution buckets of NVIDIA's XID catalogue
(docs.nvidia.com/deploy/xid-errors): the reset class needs a GPU reset, so
the GPU is masked and the rest of the node keeps working; the reboot class
(the GPU fell off the bus) takes the whole node; application XIDs (a bad
kernel, a page fault, a stopped context) end only the job that caused them
and are ignored here. XIDs outside these lists are reported but do not
mask the GPU: a new driver's codes should not drain a fleet by surprise.

A GPU is also unhealthy on an uncorrectable (double-bit) ECC error, on a
row-remap failure or a remap pending (it waits for a reset), above the
temperature threshold, and when NVML has lost it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpufleet.api.agent_schemas import GpuReading

XID_RESET = frozenset({48, 61, 62, 64, 74, 95, 119, 120, 140})
"""Catalogue bucket RESET_GPU: double-bit ECC (48), micro-controller halt (61, 62),
row-remap recording failure (64), NVLink error (74), uncontained ECC (95), GSP
RPC timeout and error (119, 120), unrecovered ECC (140)."""
XID_REBOOT = frozenset({79})
"""Catalogue bucket RESTART_BM: the GPU has fallen off the bus."""
XID_APPLICATION = frozenset({13, 31, 43, 45, 68, 69, 94})
"""Catalogue bucket RESTART_APP: the job's fault (graphics engine exception, page
fault, stopped channel, preemptive clean-up, video engine errors, contained ECC)."""

XidClass = Literal["reset", "reboot", "application", "unknown"]
LOST = "fallen off the bus"


def xid_class(xid: int) -> XidClass:
    if xid in XID_REBOOT:
        return "reboot"
    if xid in XID_RESET:
        return "reset"
    if xid in XID_APPLICATION:
        return "application"
    return "unknown"


@dataclass(frozen=True)
class GpuHealthPolicy:
    """Thresholds for the built-in GPU checks."""

    max_temp_c: float = 90.0


def problems(reading: GpuReading, policy: GpuHealthPolicy) -> list[str]:
    """Why the GPU should be masked, worst first; empty when it is healthy."""
    found: list[str] = []
    if reading.health_reason == LOST:
        found.append(LOST)
    if reading.xid_last and xid_class(reading.xid_last) in ("reset", "reboot"):
        found.append(f"xid {reading.xid_last} ({xid_class(reading.xid_last)} class)")
    if reading.ecc_dbe_volatile:
        found.append(f"{reading.ecc_dbe_volatile} uncorrectable ECC errors")
    if reading.remap_failure:
        found.append("row remap failure")
    if reading.remap_pending:
        found.append("row remap pending (needs a GPU reset)")
    if reading.temp_c >= policy.max_temp_c:
        found.append(f"temperature {reading.temp_c:g} C >= {policy.max_temp_c:g} C")
    return found


def judged(reading: GpuReading, policy: GpuHealthPolicy) -> GpuReading:
    """``reading`` with ``healthy`` and ``health_reason`` set from the checks."""
    found = problems(reading, policy)
    return reading.model_copy(update={"healthy": not found, "health_reason": "; ".join(found)})


def needs_reboot(reading: GpuReading) -> bool:
    """A fault that takes the whole node (the GPU is gone from the bus)."""
    return reading.health_reason.startswith(LOST) or xid_class(reading.xid_last) == "reboot"
