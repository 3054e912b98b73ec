"""On a host where NVML finds a GPU: discovery and readings agree with nvidia-smi.

Read-only: it queries, and changes no MIG mode, clock or other setting.
Skipped where NVML finds no GPU (every machine without NVIDIA hardware).
"""

from __future__ import annotations

import csv
import shutil
import subprocess

import pytest

from gpufleet.agent.discover import discover
from gpufleet.agent.telemetry import NvmlTelemetry, load_nvml

FIELDS = (
    "index,uuid,name,memory.total,memory.used,temperature.gpu,driver_version,"
    "mig.mode.current,ecc.errors.uncorrected.volatile.total"
)

nvml, why = load_nvml()
pytestmark = pytest.mark.skipif(nvml is None, reason=f"no GPU here: {why}")


def smi() -> list[dict[str, str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    names = FIELDS.split(",")
    return [
        dict(zip(names, (v.strip() for v in row), strict=True))
        for row in csv.reader(out.splitlines())
    ]


def test_inventory_and_readings_match_nvidia_smi() -> None:
    assert shutil.which("nvidia-smi"), "NVML works, so the driver's nvidia-smi should be here"
    facts = discover(nvml)
    rows = smi()
    assert [(g.index, g.uuid, g.name) for g in facts.gpus] == [
        (int(r["index"]), r["uuid"], r["name"]) for r in rows
    ]
    for g, r in zip(facts.gpus, rows, strict=True):
        assert abs(g.memory_mib - int(r["memory.total"])) <= 1
        assert g.mig_enabled == (r["mig.mode.current"] == "Enabled")
        assert facts.driver == r["driver_version"]
    telemetry = NvmlTelemetry(nvml)
    readings = telemetry.readings()
    again = smi()
    for reading, r in zip(readings, again, strict=True):
        assert reading.uuid == r["uuid"]
        # Gauges move between the two reads: close, not equal.
        assert abs(reading.temp_c - float(r["temperature.gpu"])) <= 5
        assert abs(reading.mem_used_mib - int(r["memory.used"])) <= 512
        if r["ecc.errors.uncorrected.volatile.total"].isdigit():
            assert reading.ecc_dbe_volatile == int(r["ecc.errors.uncorrected.volatile.total"])
