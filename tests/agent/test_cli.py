"""``gpufleet agent``: input errors in one line, and a real agent process that
stops on SIGTERM, leaves its job running, and re-attaches when started again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent.fake_controller import FakeController, serve
from agent.support import Launches
from agent.test_daemon import eventually
from gpufleet.cli.main import main

INVENTORY = '[[nodes]]\nnames = "n1"\ncpu_milli = 4000\nmemory_mib = 8192\n'


def test_missing_inventory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.toml"
    argv = ["agent", "--server", "http://127.0.0.1:9", "--token", "t", "--inventory", str(missing)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --inventory: {missing}: no such file;")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("server", "token", "message"),
    [
        ("http://[::1", "t", "error: --server: 'http://[::1' is not a valid URL: Invalid port"),
        ("http://127.0.0.1:9", "gf_\u00fc", "error: --token: the token must be printable ASCII"),
        ("http://127.0.0.1:9", "gf_a\nb", "error: --token: the token must be printable ASCII"),
    ],
)
def test_a_server_or_token_no_request_could_carry_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: str, token: str, message: str
) -> None:
    inventory = tmp_path / "node.toml"
    inventory.write_text(INVENTORY)
    argv = ["agent", "--server", server, "--token", token, "--inventory", str(inventory)]
    assert main([*argv, "--state-dir", str(tmp_path / "state"), "--same-user"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert err.count("\n") == 1


def test_refused_token_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "node.toml"
    inventory.write_text(INVENTORY)
    with serve(FakeController()) as url:
        argv = ["agent", "--server", url, "--token", "wrong", "--inventory", str(inventory)]
        code = main([*argv, "--state-dir", str(tmp_path / "state"), "--same-user"])
    assert code == 2
    assert capsys.readouterr().err == (
        "error: --token: the controller refused the agent: register: 401 bad token\n"
    )


def test_agent_process_restarts_without_touching_its_job(tmp_path: Path, launch: Launches) -> None:
    inventory = tmp_path / "node.toml"
    inventory.write_text(INVENTORY)
    fake = FakeController()
    pid_file = tmp_path / "job.pid"
    with serve(fake) as url:
        argv = [sys.executable, "-m", "gpufleet.cli.main", "agent", "--server", url]
        argv += ["--inventory", str(inventory), "--state-dir", str(tmp_path / "state")]
        argv += ["--same-user"]
        env = {**os.environ, "GPUFLEET_AGENT_TOKEN": fake.token}
        first = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        try:
            fake.want(launch("1", script=f"echo $$ > {pid_file}\nexec sleep 30\n"))
            eventually(lambda: pid_file.exists() and bool(pid_file.read_text()))
            eventually(lambda: bool(fake.syncs) and bool(fake.syncs[-1].running))
            first.send_signal(signal.SIGTERM)
            assert first.wait(5) == 0
        finally:
            first.kill()
            first.wait()
        job = int(pid_file.read_text())
        os.kill(job, 0)  # still running without an agent
        second = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        try:
            eventually(lambda: len(fake.registrations) == 2)
            assert [(r.job_id, r.run) for r in fake.registrations[1].running] == [("1", 1)]
            fake.kill("1", 1, "TERM", 1)
            eventually(lambda: bool(fake.reports))
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(5) == 0
    assert (fake.reports[0].state, fake.reports[0].signal) == ("signalled", signal.SIGTERM)
