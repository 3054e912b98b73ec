"""MIG changes on the agent: the nvidia-smi commands, run only on NVML hardware with
``--mig-reconfigure`` (here through a recording runner), a dry run everywhere else
(a real ``gpufleet agent`` process), and the declared inventory following the change."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.fake_controller import FakeController, serve
from agent.fake_nvml import FakeGpu, FakeNvml
from agent.test_daemon import eventually
from gpufleet.agent.inventory import Inventory
from gpufleet.agent.mig import MigApplier, commands
from gpufleet.agent.runner import Runner
from gpufleet.api.agent_schemas import MigChange
from gpufleet.cli.agent import node_agent
from gpufleet.core.model import GPU, Node

SEVEN_1G = ",".join(f"1g.10gb@{s}" for s in range(7))
INVENTORY = (
    '[[nodes]]\nnames = "n1"\ncpu_milli = 4000\nmemory_mib = 8192\n'
    f'gpus = {{ model = "A100-80GB", count = 2, mig = {{ all = "{SEVEN_1G}" }} }}\n'
)


@pytest.mark.parametrize(
    ("was_on", "layout", "want"),
    [
        (  # MIG on before and after: the instances go, the new ones come with compute
            True,
            ["3g.40gb@0", "3g.40gb@4"],
            [["-dci"], ["-dgi"], ["-cgi", "3g.40gb:0,3g.40gb:4", "-C"]],
        ),
        (True, None, [["-dci"], ["-dgi"], ["MODE", "0"]]),  # MIG off: the mode too
        (False, ["7g.80gb@0"], [["MODE", "1"], ["-cgi", "7g.80gb:0", "-C"]]),  # MIG on first
        (False, None, []),  # already off: nothing to do
    ],
)
def test_the_commands_of_a_change(
    was_on: bool, layout: list[str] | None, want: list[list[str]]
) -> None:
    mode, mig = ["nvidia-smi", "-i", "1", "-mig"], ["nvidia-smi", "mig", "-i", "1"]
    expanded = [[*mode, w[1]] if w[0] == "MODE" else [*mig, *w] for w in want]
    assert commands(1, was_on, layout) == expanded


class Recorder:
    """Stands in for subprocess.run: records each argument list, fails the one told to."""

    def __init__(self, fail_at: int = -1) -> None:
        self.argv: list[list[str]] = []
        self.fail_at = fail_at

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.argv.append(argv)
        code = 1 if len(self.argv) - 1 == self.fail_at else 0
        err = "Insufficient Permissions" if code else ""
        return subprocess.CompletedProcess(argv, code, "", err)


CHANGE = MigChange(gpu=0, layout=["3g.40gb@0", "3g.40gb@4"])


def test_on_hardware_with_the_opt_in_the_commands_run_in_order() -> None:
    run = Recorder()
    done = MigApplier(hardware=True, enabled=True, run=run).apply(CHANGE, was_on=True)
    assert run.argv == commands(0, True, CHANGE.layout) == done.commands
    assert (done.applied, done.error) == (True, "")


def test_a_failed_command_stops_the_change_and_is_reported() -> None:
    run = Recorder(fail_at=1)
    done = MigApplier(hardware=True, enabled=True, run=run).apply(CHANGE, was_on=True)
    assert run.argv == commands(0, True, CHANGE.layout)[:2]
    assert done.error == "nvidia-smi mig -i 0 -dgi: Insufficient Permissions"


@pytest.mark.parametrize(("hardware", "enabled"), [(False, True), (True, False), (False, False)])
def test_without_hardware_or_the_opt_in_nothing_runs(hardware: bool, enabled: bool) -> None:
    run = Recorder()
    done = MigApplier(hardware=hardware, enabled=enabled, run=run).apply(CHANGE, was_on=True)
    assert run.argv == []
    assert (done.applied, done.error) == (False, "")
    assert done.commands == commands(0, True, CHANGE.layout)


def test_the_agent_applies_only_with_nvml_and_the_flag(tmp_path: Path) -> None:
    gpus = (GPU(0, "A100-80GB", 81920, mig=()),)
    node = Node("n1", 4000, 8192, gpus)
    declared = Inventory(node=node, group={"names": "n1"}, source=tmp_path / "node.toml")
    runner = Runner(tmp_path / "state", "n1", same_user=True)
    nvml = FakeNvml([FakeGpu(uuid="GPU-0")])  # a patched pynvml: NVML hardware is there
    try:
        cases = [(nvml, True, True), (nvml, False, False), (None, True, False)]
        for nvml, flag, live in cases:
            agent = node_agent(
                declared, runner, server="http://127.0.0.1:9", token="t", nvml=nvml,
                mig_reconfigure=flag,
            )  # fmt: skip
            assert agent._mig.live is live
    finally:
        runner.close()


def test_a_real_agent_process_dry_runs_and_declares_the_new_layout(tmp_path: Path) -> None:
    inventory = tmp_path / "node.toml"
    inventory.write_text(INVENTORY)
    log = tmp_path / "agent.log"
    fake = FakeController()
    with serve(fake) as url, log.open("wb") as out:
        argv = [sys.executable, "-m", "gpufleet.cli.main", "agent", "--server", url]
        argv += ["--inventory", str(inventory), "--state-dir", str(tmp_path / "state")]
        argv += ["--same-user", "--mig-reconfigure"]  # asked for, but there is no NVML here
        env = {**os.environ, "GPUFLEET_AGENT_TOKEN": fake.token}
        agent = subprocess.Popen(argv, env=env, stdout=out, stderr=out)
        try:
            eventually(lambda: fake.registered)
            fake.recut(1, ["7g.80gb@0"])
            eventually(lambda: bool(fake.mig_done) and not fake.mig)
            fake.forget_node()  # it registers again: with the layout it now declares
            eventually(lambda: len(fake.registrations) == 2)
        finally:
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(5) == 0
    done = fake.mig_done[0]
    assert (done.gpu, done.layout, done.applied, done.error) == (1, ["7g.80gb@0"], False, "")
    assert done.commands == [
        ["nvidia-smi", "mig", "-i", "1", "-dci"],
        ["nvidia-smi", "mig", "-i", "1", "-dgi"],
        ["nvidia-smi", "mig", "-i", "1", "-cgi", "7g.80gb:0", "-C"],
    ]
    text = log.read_text()
    assert "MIG dry run, GPU 1: would run nvidia-smi mig -i 1 -cgi 7g.80gb:0 -C" in text
    declared = fake.registrations[1].inventory["gpus"]["mig"]
    assert declared == {"0": SEVEN_1G, "1": "7g.80gb@0"}
