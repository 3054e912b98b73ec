"""GPU readings: the declared telemetry file, NVML (patched) and the health verdict."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import pytest

from agent.fake_controller import FakeController, serve
from agent.fake_nvml import FakeGpu, FakeNvml
from agent.test_daemon import eventually
from gpufleet.agent import inventory
from gpufleet.agent.checks import CheckSettings, NodeChecks
from gpufleet.agent.daemon import Agent
from gpufleet.agent.health import GpuHealthPolicy, reason_code, xid_class
from gpufleet.agent.inventory import read_inventory
from gpufleet.agent.runner import Runner
from gpufleet.agent.telemetry import (
    XID_HOLD_S,
    DeclaredTelemetry,
    NvmlTelemetry,
    open_telemetry,
    telemetry_path,
)
from gpufleet.core.model import GPU, Node

NODE = Node("n1", 8000, 16384, tuple(GPU(i, "L4", 23034) for i in range(2)))


def test_declared_gpus_have_readings_only_where_the_file_gives_them(tmp_path: Path) -> None:
    path = tmp_path / "node.telemetry.toml"
    source = DeclaredTelemetry(NODE, path)
    assert source.readings() == []  # no file: no readings, not made-up zeros
    # The file is read again at every reading: GPU 1 only, with an XID of the reboot class.
    path.write_text("[[gpus]]\nindex = 1\nxid_last = 79\nxid_count = 1\nutil_pct = 55.5\n")
    (gpu1,) = source.readings()
    assert (gpu1.index, gpu1.uuid, gpu1.model, gpu1.mem_free_mib) == (1, "", "L4", 23034)
    assert gpu1.util_pct == 55.5
    assert (gpu1.temp_c, gpu1.power_w) == (None, None)  # not set: not read
    assert not gpu1.healthy and gpu1.health_reason == "xid 79 (reboot class)"
    path.unlink()
    assert source.readings() == []


@pytest.mark.parametrize(
    ("values", "reason", "code"),
    [
        ("xid_last = 13", "", ""),  # an application XID: the job's fault, not the GPU's
        ("xid_last = 43", "", ""),
        ("xid_last = 94", "", ""),  # contained ECC: the job's
        ("xid_last = 48", "xid 48 (reset class)", "xid_reset"),
        ("xid_last = 95", "xid 95 (reset class)", "xid_reset"),
        ("xid_last = 79", "xid 79 (reboot class)", "xid_reboot"),
        ("xid_last = 999", "", ""),  # unknown: reported in the reading, never masks
        ("ecc_dbe_volatile = 2", "2 uncorrectable ECC errors", "ecc_dbe"),
        ("ecc_sbe_volatile = 200", "", ""),
        ("remap_pending = true", "row remap pending (needs a GPU reset)", "remap_pending"),
        ("remap_failure = true", "row remap failure", "remap_failure"),
        ("temp_c = 89.5", "", ""),
        ("temp_c = 90", "temperature 90 C >= 90 C", "temperature"),
        (
            "temp_c = 97\necc_dbe_volatile = 3",
            "3 uncorrectable ECC errors; temperature 97 C >= 90 C",
            "ecc_dbe",
        ),
        ('health_reason = "fallen off the bus"', "fallen off the bus", "lost"),
    ],
)
def test_health_verdicts(tmp_path: Path, values: str, reason: str, code: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(f"[[gpus]]\nindex = 0\n{values}\n")
    reading = DeclaredTelemetry(NODE, path, GpuHealthPolicy(max_temp_c=90)).readings()[0]
    assert (reading.healthy, reading.health_reason) == (not reason, reason)
    # The code, not the text with its values, labels the metric.
    assert (reason_code(reading.health_reason) if reason else "") == code


def test_xid_classes() -> None:
    assert [xid_class(x) for x in (79, 48, 64, 74, 95, 13, 31, 43, 94, 63, 92, 7)] == [
        "reboot", "reset", "reset", "reset", "reset",
        "application", "application", "application", "application",
        "unknown", "unknown", "unknown",
    ]  # fmt: skip


def test_a_broken_file_keeps_the_last_values_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.toml"
    path.write_text("[[gpus]]\nindex = 0\ntemp_c = 70\n")
    source = DeclaredTelemetry(NODE, path)
    assert source.readings()[0].temp_c == 70
    path.write_text("[[gpus]]\nindex = 0\ntemprature = 99\n")
    with caplog.at_level(logging.WARNING, "gpufleet.agent"):
        for _ in range(3):
            assert source.readings()[0].temp_c == 70
    assert len(caplog.records) == 1 and "temprature" in caplog.records[0].getMessage()


def test_the_telemetry_file_sits_beside_the_inventory(tmp_path: Path) -> None:
    assert telemetry_path(tmp_path / "node.toml") == tmp_path / "node.telemetry.toml"
    (tmp_path / "node.toml").write_text(
        '[[nodes]]\nnames = "n1"\ncpu_milli = 1000\nmemory_mib = 1024\n'
    )
    assert read_inventory(tmp_path / "node.toml").source == tmp_path / "node.toml"


@pytest.mark.parametrize("why", ["not-installed", "no-driver", "no-gpu"])
def test_without_nvml_one_line_then_the_declared_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, why: str
) -> None:
    fake = {
        "not-installed": None,  # import pynvml raises ImportError
        "no-driver": FakeNvml([], fail_init=True),
        "no-gpu": FakeNvml([]),
    }[why]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(inventory, "NVIDIA_PROC", tmp_path / "no-driver")
    with caplog.at_level(logging.INFO, "gpufleet.agent"):
        source = open_telemetry(NODE, tmp_path / "t.toml")
    assert isinstance(source, DeclaredTelemetry)
    assert len(caplog.records) == 1
    assert f"GPU readings come from {tmp_path / 't.toml'}" in caplog.records[0].getMessage()
    assert (source.readings(), source.fault) == ([], "")


def test_nvml_failing_on_a_gpu_host_fails_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The driver lists GPUs but NVML cannot start: a fault, not a quiet fallback."""
    proc = tmp_path / "gpus"
    for bus in ("0000:17:00.0", "0000:65:00.0"):
        (proc / bus).mkdir(parents=True)
    monkeypatch.setattr(inventory, "NVIDIA_PROC", proc)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([], fail_init=True))
    with caplog.at_level(logging.INFO, "gpufleet.agent"):
        source = open_telemetry(NODE, tmp_path / "t.toml")
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert source.fault.startswith("telemetry: NVML cannot start")
    assert source.fault.endswith("though the driver lists 2 GPUs")
    health = NodeChecks(CheckSettings()).run(source.readings(), [source.fault])
    assert (health.ok, health.reason) == (False, source.fault)


def test_nvml_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(
        [
            FakeGpu("GPU-a", used_mib=1024, util=80, temp=65, power_mw=250500, throttle=4),
            # No ECC, no row remapping, no utilisation (as under MIG), no sensors.
            FakeGpu("GPU-b", ecc=None, remap=None, util=None, temp=None, power_mw=None),
            FakeGpu("GPU-c", ecc=(3, 1), remap=(2, 1, 1, 0)),
        ]
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    source = open_telemetry(NODE, Path("/nonexistent"))
    assert isinstance(source, NvmlTelemetry)
    a, b, c = source.readings()
    assert (a.uuid, a.model, a.util_pct, a.mem_used_mib, a.mem_free_mib) == (
        "GPU-a", "NVIDIA A100-SXM4-80GB", 80.0, 1024, 80896,
    )  # fmt: skip
    assert (a.temp_c, a.power_w, a.throttle_reasons, a.healthy) == (65.0, 250.5, 4, True)
    assert (b.ecc_dbe_volatile, b.remap_pending, b.healthy) == (0, False, True)
    assert (b.util_pct, b.temp_c, b.power_w) == (None, None, None)  # unread, not idle or cold
    assert (c.ecc_sbe_volatile, c.ecc_dbe_volatile) == (3, 1)
    assert (c.remap_correctable, c.remap_uncorrectable, c.remap_pending) == (2, 1, True)
    assert c.health_reason == "1 uncorrectable ECC errors; row remap pending (needs a GPU reset)"
    # XIDs arrive as NVML events between readings; the last one and the count are kept.
    nvml.xids += [(1, 13), (1, 74)]
    assert (source.readings()[1].xid_last, source.readings()[1].xid_count) == (74, 2)
    assert source.readings()[1].health_reason == "xid 74 (reset class)"
    nvml.gpus[0].lost = True
    lost = source.readings()[0]
    assert (lost.healthy, lost.health_reason, lost.uuid) == (False, "fallen off the bus", "GPU-a")
    source.close()
    assert not nvml.initialised


def test_nvml_forgets_an_xid_after_the_hold_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML reports no GPU reset: a last XID ages out, and the GPU it masked comes back."""
    nvml = FakeNvml([FakeGpu("GPU-a"), FakeGpu("GPU-b")])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    now = [1000.0]
    source = NvmlTelemetry(nvml, clock=lambda: now[0])
    nvml.xids.append((1, 48))
    gpu = source.readings()[1]
    assert (gpu.xid_last, gpu.xid_count, gpu.healthy) == (48, 1, False)
    now[0] += XID_HOLD_S - 1
    assert source.readings()[1].xid_last == 48
    now[0] += 1
    gpu = source.readings()[1]
    assert (gpu.xid_last, gpu.xid_count, gpu.healthy) == (0, 1, True)  # the count stays
    nvml.xids.append((1, 79))  # a new XID stands its own hold time
    assert source.readings()[1].xid_last == 79


def test_every_heartbeat_carries_the_file_as_it_is_now(tmp_path: Path) -> None:
    fake = FakeController()
    fake.max_wait_s = 0.2
    path = tmp_path / "t.toml"
    runner = Runner(tmp_path / "state", "n1", same_user=True)
    with serve(fake) as url:
        agent = Agent(
            server=url,
            token="gf_node",
            node="n1",
            inventory={"names": "n1", "cpu_milli": 8000, "memory_mib": 16384},
            runner=runner,
            telemetry=DeclaredTelemetry(NODE, path),
            max_wait_s=0.2,
        )
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        try:
            eventually(lambda: len(fake.syncs) > 1)
            assert fake.syncs[-1].gpus == []  # no file yet: no readings
            path.write_text("[[gpus]]\nindex = 1\ntemp_c = 95\n")
            eventually(lambda: fake.syncs[-1].gpus and not fake.syncs[-1].gpus[0].healthy)
            (gpu,) = fake.syncs[-1].gpus
            assert (gpu.index, gpu.health_reason) == (1, "temperature 95 C >= 90 C")
        finally:
            agent.stop()
            thread.join(5)
            runner.close()
