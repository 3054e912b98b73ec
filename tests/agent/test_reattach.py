"""A restarted agent finds the runs it started: it re-attaches, and kills nothing."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from agent.support import Launches, wait_ended
from gpufleet.agent.runner import Runner, StateDirBusy


def test_a_new_runner_reattaches_to_a_running_job(tmp_path: Path, launch: Launches) -> None:
    first = Runner(tmp_path / "state", "n1", same_user=True)
    first.start(launch("1", argv=["sleep", "30"]))
    first.close()  # the agent stops; the job must not notice
    second = Runner(tmp_path / "state", "n1", same_user=True)
    assert [(r.job_id, r.run) for r in second.running()] == [("1", 1)]
    time.sleep(0.2)
    assert second.poll() == []
    assert second.kill("1", 1, "TERM", 1)
    report = wait_ended(second)["1"]
    assert (report.state, report.signal) == ("signalled", signal.SIGTERM)


def test_one_agent_per_state_directory(tmp_path: Path) -> None:
    first = Runner(tmp_path / "state", "n1", same_user=True)
    with pytest.raises(StateDirBusy, match="another agent is using it"):
        Runner(tmp_path / "state", "n1", same_user=True)
    first.close()
    Runner(tmp_path / "state", "n1", same_user=True).close()


def test_an_end_while_no_agent_ran_is_reported_after(tmp_path: Path, launch: Launches) -> None:
    first = Runner(tmp_path / "state", "n1", same_user=True)
    first.start(launch("2", argv=["sh", "-c", "sleep 0.2; exit 4"]))
    wait_ended(first)  # let it end, but never acknowledge it
    first.close()
    second = Runner(tmp_path / "state", "n1", same_user=True)
    assert second.running() == []
    [report] = second.reports()
    assert (report.job_id, report.state, report.exit_code) == ("2", "exited", 4)


def test_time_limit_holds_across_an_agent_restart(tmp_path: Path, launch: Launches) -> None:
    first = Runner(tmp_path / "state", "n1", same_user=True)
    first.start(launch("3", argv=["sleep", "30"], time_limit_s=1))
    first.close()
    second = Runner(tmp_path / "state", "n1", same_user=True)
    report = wait_ended(second)["3"]
    assert (report.state, report.signal) == ("signalled", signal.SIGTERM)
    assert report.message == "time limit reached (1 s)"


def test_a_dead_supervisor_ends_its_run(tmp_path: Path, launch: Launches) -> None:
    runner = Runner(tmp_path / "state", "n1", same_user=True)
    runner.start(launch("4", argv=["sleep", "30"]))
    proc_file = tmp_path / "state" / "runs" / "4.1" / "proc.json"
    deadline = time.monotonic() + 5
    while not proc_file.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc = json.loads(proc_file.read_text())
    os.kill(proc["supervisor_pid"], signal.SIGKILL)
    report = wait_ended(runner)["4"]
    assert (report.state, report.signal) == ("signalled", signal.SIGKILL)
    assert "supervisor died" in report.message
    # The orphaned job was killed rather than left running unsupervised.
    deadline = time.monotonic() + 2
    while _exists(proc["pid"]):
        assert time.monotonic() < deadline, "the job outlived its supervisor"
        time.sleep(0.02)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
