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

Each problem has a stable code (``REASON_CODES``) beside its text: the text
carries live values for people (``gpufleet nodes``), the code is what
``/metrics`` labels ``gpufleet_gpu_healthy`` with, so a changing value does
not make a new series. The alert rules' XID lists are checked against these
sets (tests/deploy/test_prometheus_rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

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
# Not listed, so reported but never masking: 63 (a row remap recorded: the
# remap pending check masks the GPU until its reset) and 92 (a high
# single-bit ECC rate: corrected, worth watching, not a fault).

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


REASON_CODES = (
    "lost",
    "xid_reboot",
    "xid_reset",
    "ecc_dbe",
    "remap_failure",
    "remap_pending",
    "temperature",
)
"""The codes of the checks' problems, worst first."""


class Problem(NamedTuple):
    """Why a GPU is unhealthy: a stable ``code`` (one of ``REASON_CODES``) and a ``text``
    for people, with the values measured."""

    code: str
    text: str


@dataclass(frozen=True)
class GpuHealthPolicy:
    """Thresholds for the built-in GPU checks."""

    max_temp_c: float = 90.0


def problems(reading: GpuReading, policy: GpuHealthPolicy) -> list[Problem]:
    """Why the GPU should be masked, worst first; empty when it is healthy."""
    found: list[Problem] = []
    if reading.health_reason == LOST:
        found.append(Problem("lost", LOST))
    kind = xid_class(reading.xid_last) if reading.xid_last else "unknown"
    if kind in ("reset", "reboot"):
        found.append(Problem(f"xid_{kind}", f"xid {reading.xid_last} ({kind} class)"))
    if reading.ecc_dbe_volatile:
        found.append(Problem("ecc_dbe", f"{reading.ecc_dbe_volatile} uncorrectable ECC errors"))
    if reading.remap_failure:
        found.append(Problem("remap_failure", "row remap failure"))
    if reading.remap_pending:
        found.append(Problem("remap_pending", "row remap pending (needs a GPU reset)"))
    if reading.temp_c is not None and reading.temp_c >= policy.max_temp_c:
        found.append(
            Problem("temperature", f"temperature {reading.temp_c:g} C >= {policy.max_temp_c:g} C")
        )
    return found


def judged(reading: GpuReading, policy: GpuHealthPolicy) -> GpuReading:
    """``reading`` with ``healthy`` and ``health_reason`` set from the checks."""
    found = problems(reading, policy)
    reason = "; ".join(p.text for p in found)
    return reading.model_copy(update={"healthy": not found, "health_reason": reason})


_TEXT_CODES = (
    (LOST, "lost"),
    ("(reboot class)", "xid_reboot"),
    ("(reset class)", "xid_reset"),
    ("uncorrectable ECC errors", "ecc_dbe"),
    ("row remap failure", "remap_failure"),
    ("row remap pending", "remap_pending"),
    ("temperature ", "temperature"),
)


def reason_code(health_reason: str) -> str:
    """The code of a verdict's worst problem, from the text ``judged`` wrote (the
    controller has the text only); ``other`` for a text the checks do not write."""
    worst = health_reason.split("; ", 1)[0]
    return next((code for mark, code in _TEXT_CODES if mark in worst), "other")


def needs_reboot(reading: GpuReading) -> bool:
    """A fault that takes the whole node (the GPU is gone from the bus)."""
    return reading.health_reason.startswith(LOST) or xid_class(reading.xid_last) == "reboot"
