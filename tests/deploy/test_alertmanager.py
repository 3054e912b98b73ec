"""deploy/alertmanager/alertmanager.yml: valid, routing action alerts to gpufleet, and a real
Alertmanager (Debian's) driving the controller's webhook to drain a node."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from api.live import serve
from controller.harness import inventory, setup
from deploy.conftest import DEPLOY
from deploy.live import free_port, process, until
from gpufleet.api.agent_schemas import AgentRegister
from gpufleet.api.app import create_app
from gpufleet.controller.service import Controller, Principal
from store.databases import database

CONFIG = DEPLOY / "alertmanager" / "alertmanager.yml"
ADMIN = Principal(user="root", role="admin")


def amtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    found = shutil.which("amtool")
    assert found, "amtool is missing: apt-get install prometheus-alertmanager (.ci/run does)"
    return subprocess.run([found, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    shutil.copy(CONFIG, tmp_path)
    (tmp_path / "gpufleet-alerts.token").write_text("gf_secret\n")  # the file it names
    return tmp_path / CONFIG.name


def test_amtool_checks_the_configuration(copied: Path) -> None:
    result = amtool("check-config", copied.name, cwd=copied.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["action=drain", "alertname=GpuXidHardwareError", "Hostname=n1"], "gpufleet,team"),
        (["action=idle-gpu", "alertname=GpufleetAllocatedGpuIdle", "hpc_job=7"], "gpufleet,team"),
        (["alertname=GpuTemperatureHigh", "Hostname=n1"], "team"),
    ],
)
def test_action_alerts_reach_gpufleet_and_all_reach_the_team(
    copied: Path, labels: list[str], receivers: str
) -> None:
    result = amtool(
        "config", "routes", "test", f"--config.file={copied.name}", *labels, cwd=copied.parent
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == receivers


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    db = next(database("sqlite", tmp_path))
    ctl = Controller(setup=setup(heartbeat_timeout_s=1e9), db_url=db.url)
    ctl.start()
    ctl.register_agent(principal=ADMIN, node="n1", body=AgentRegister(inventory=inventory("n1")))
    yield ctl
    ctl.stop()


def test_a_real_alertmanager_drains_the_node_of_a_gpu_fault(
    tmp_path: Path, controller: Controller
) -> None:
    binary = shutil.which("prometheus-alertmanager")
    assert binary, "prometheus-alertmanager is missing (.ci/run installs it)"
    token = controller.create_token(
        principal=ADMIN, name="am", user="alertmanager", role="alerts"
    ).token
    with ExitStack() as stack:
        url = stack.enter_context(serve(create_app(controller)))
        config: dict[str, Any] = yaml.safe_load(CONFIG.read_text())
        (route, _) = config["route"]["routes"]
        route.update(group_wait="0s", group_interval="1s")
        (hook,) = config["receivers"][1]["webhook_configs"]
        hook["url"] = f"{url}/api/v1/alerts/webhook"
        (tmp_path / "gpufleet-alerts.token").write_text(token)
        (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        argv = [
            binary,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # one instance, no gossip port
        ]
        stack.enter_context(process(argv, tmp_path / "alertmanager.log", {}))
        am = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10))

        def ready() -> bool:
            try:
                return am.get("/-/ready").status_code == 200
            except httpx.TransportError:
                return False

        until("Alertmanager", ready, 30)
        alert = {
            "labels": {"alertname": "GpuXidHardwareError", "action": "drain",
                       "severity": "critical", "Hostname": "n1", "gpu": "1"},
            "annotations": {"summary": "XID 79 on GPU 1 of n1"},
        }  # fmt: skip
        assert am.post("/api/v2/alerts", json=[alert]).status_code == 200

        def drained() -> bool:
            return controller.get_node(principal=ADMIN, name="n1").state == "drain"

        until("the drain", drained, 30)
    node = controller.get_node(principal=ADMIN, name="n1")
    assert node.reason == "alert GpuXidHardwareError: XID 79 on GPU 1 of n1"
    entries = controller.list_audit(principal=ADMIN).entries
    assert [(e.who, e.action, e.target) for e in entries if e.action == "node.drain"] == [
        ("alertmanager", "node.drain", "n1")
    ]
