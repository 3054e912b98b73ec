"""A state directory that cannot be written (a full disk): nothing stops for good.

A full disk is simulated by making the state directory's writes fail with ENOSPC
(a tmpfs cannot be mounted portably in a test); the runs are real processes.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.fake_controller import FakeController, serve
from agent.support import Launches, wait_ended, wait_for
from agent.test_daemon import eventually, running_agent
from gpufleet.agent import runner as runner_module
from gpufleet.agent import supervise
from gpufleet.agent.daemon import Agent
from gpufleet.agent.runner import Runner
from gpufleet.agent.supervise import read_json, write_json

FULL = "No space left on device"


class Disk:
    """The state directory's disk, as the runner writes it: ``full`` makes writes fail."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        monkeypatch.setattr(runner_module, "write_json", self._write)

    def _write(self, path: Path, data: Any) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path) + ".tmp")
        write_json(path, data)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


def test_a_launch_the_state_dir_cannot_take_is_a_node_failure(
    runner: Runner, launch: Launches, disk: Disk, tmp_path: Path
) -> None:
    disk.full = True
    assert runner.start(launch("33", argv=["true"]))
    (report,) = runner.reports()
    assert (report.job_id, report.state, report.cause) == ("33", "failed_to_start", "node_fail")
    assert FULL in report.message
    assert runner.running() == []
    assert list((tmp_path / "state" / "runs").iterdir()) == []  # nothing left behind
    assert runner.fault == f"state dir {tmp_path / 'state'}: {FULL}"
    assert not runner.start(launch("33", argv=["true"]))  # reported: never started after
    disk.full = False
    assert runner.check_state_dir() == "" and runner.fault == ""
    runner.acknowledge([("33", 1)])
    assert runner.start(launch("34", argv=["true"]))
    assert wait_ended(runner)["34"].exit_code == 0


def test_a_kill_before_the_start_on_a_full_disk_still_ends_the_run(
    runner: Runner, launch: Launches, disk: Disk
) -> None:
    disk.full = True
    assert runner.kill("35", 1, "TERM", 1, "cancel")
    (report,) = runner.reports()
    assert (report.job_id, report.cause) == ("35", "killed")
    assert not runner.start(launch("35", argv=["true"]))


def test_an_end_that_cannot_be_written_is_reported_all_the_same(
    runner: Runner, launch: Launches, disk: Disk, tmp_path: Path
) -> None:
    runner.start(launch("36", argv=["sleep", "30"]))
    rundir = tmp_path / "state" / "runs" / "36.1"
    wait_for(rundir / supervise.PROC_FILE)
    proc = read_json(rundir / supervise.PROC_FILE)
    assert proc is not None
    disk.full = True
    os.kill(proc["supervisor_pid"], signal.SIGKILL)  # its end is the agent's to write
    report = wait_ended(runner)["36"]
    assert (report.state, report.cause) == ("signalled", "killed")
    assert runner.running() == []
    assert not (rundir / "status.json.tmp").exists()


def test_a_failed_atomic_write_leaves_nothing_beside_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "status.json"
    write_json(path, {"state": "before"})

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(supervise.os, "fsync", full)
    with pytest.raises(OSError, match=FULL):
        write_json(path, {"state": "after"})
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]
    assert read_json(path) == {"state": "before"}


def test_the_supervisor_writes_its_status_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = [OSError(errno.ENOSPC, FULL), OSError(errno.ENOSPC, FULL)]

    def write(path: Path, data: Any) -> None:
        if failures:
            raise failures.pop()
        write_json(path, data)

    monkeypatch.setattr(supervise, "write_json", write)
    pauses: list[float] = []
    supervise.write_status(tmp_path, {"state": "exited"}, sleep=pauses.append)
    assert pauses == [supervise.STATUS_RETRY_S] * 2
    assert read_json(tmp_path / supervise.STATUS_FILE) == {"state": "exited"}


SUPERVISE_WITHOUT_ROOM_FOR_PROC = """
import errno, os, sys
from gpufleet.agent import supervise
write = supervise.write_json
def full(path, data):
    if path.name == supervise.PROC_FILE:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    write(path, data)
supervise.write_json = full
sys.exit(supervise.main(sys.argv[1:]))
"""


def test_a_job_whose_start_cannot_be_recorded_is_stopped_at_once(tmp_path: Path) -> None:
    # No kill could reach a job without proc.json: its supervisor ends it rather than
    # leave it running unwatched.
    rundir = tmp_path / "run"
    rundir.mkdir()
    plan = {
        "argv": ["sleep", "30"],
        "workdir": str(tmp_path),
        "env": {"PATH": os.environ["PATH"]},
        "stdout": str(tmp_path / "out"),
        "stderr": str(tmp_path / "out"),
        "time_limit_s": 60,
        "kill_grace_s": 1,
    }
    write_json(rundir / supervise.RUN_FILE, plan)
    lock = os.open(rundir / supervise.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        argv = [sys.executable, "-c", SUPERVISE_WITHOUT_ROOM_FOR_PROC, str(rundir), str(lock)]
        subprocess.run(argv, pass_fds=(lock,), timeout=20, check=True)
    finally:
        os.close(lock)
    status = read_json(rundir / supervise.STATUS_FILE)
    assert status is not None
    assert (status["state"], status["cause"]) == ("failed_to_start", "node_fail")
    assert status["message"].endswith(FULL)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[FakeController, Agent]]:
    fake = FakeController()
    with serve(fake) as url, running_agent(url, tmp_path / "state") as daemon:
        yield fake, daemon


def test_a_full_disk_drains_the_node_and_requeues_the_launch_until_it_has_room(
    agent: tuple[FakeController, Agent], launch: Launches, disk: Disk, tmp_path: Path
) -> None:
    fake, _ = agent
    eventually(lambda: fake.registered)
    disk.full = True
    fake.want(launch("33", argv=["true"]))
    eventually(lambda: len(fake.reports) == 1)
    (report,) = fake.reports
    assert (report.job_id, report.cause) == ("33", "node_fail")
    # The sync that carried the report drained the node, naming the state directory.
    (carrier,) = [s for s in fake.syncs if s.reports]
    assert carrier.health is not None and not carrier.health.ok
    assert carrier.health.reason == f"state dir {tmp_path / 'state'}: {FULL}"
    disk.full = False
    eventually(lambda: fake.syncs[-1].health is not None and fake.syncs[-1].health.ok)
    fake.want(launch("34", argv=["true"]))
    eventually(lambda: len(fake.reports) == 2)
    assert (fake.reports[1].job_id, fake.reports[1].exit_code) == ("34", 0)


def test_the_monitor_outlives_a_failure_to_look_at_the_runs(
    agent: tuple[FakeController, Agent], launch: Launches, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, daemon = agent
    eventually(lambda: fake.registered)
    poll = daemon.runner.poll
    failures = [OSError(errno.ENOSPC, FULL)] * 3

    def flaky() -> list[Any]:
        if failures:
            raise failures.pop()
        return poll()

    monkeypatch.setattr(daemon.runner, "poll", flaky)
    fake.want(launch("37", argv=["true"]))
    eventually(lambda: len(fake.reports) == 1)
    assert not failures and fake.reports[0].exit_code == 0
