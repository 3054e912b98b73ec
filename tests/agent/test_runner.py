"""The runner: real processes, their environment, output, ends, limits and kills."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from agent.support import Launches, wait_ended, wait_for
from gpufleet.agent.runner import Runner


def test_argv_runs_without_a_shell_and_writes_stdout(runner: Runner, launch: Launches) -> None:
    # A shell would expand $HOME and split on ';'; exec'd directly, echo prints them as given.
    assert runner.start(launch("1", argv=["echo", "$HOME;", "*"]))
    report = wait_ended(runner)["1"]
    assert (report.state, report.exit_code, report.signal) == ("exited", 0, None)
    assert report.cause == "exited"
    assert launch.output("1") == "$HOME; *\n"


def test_exit_code_and_separate_stderr(runner: Runner, launch: Launches, tmp_path: Path) -> None:
    err = tmp_path / "err.txt"
    argv = ["sh", "-c", "echo out; echo err >&2; exit 3"]
    runner.start(launch("2", argv=argv, stderr_path=str(err)))
    report = wait_ended(runner)["2"]
    assert (report.state, report.exit_code) == ("exited", 3)
    assert launch.output("2") == "out\n"
    assert err.read_text() == "err\n"


@pytest.mark.parametrize(
    "script",
    ["#!/bin/sh\necho shebang $0\n", "echo plain $0\n"],
    ids=["shebang", "no-shebang-runs-under-sh"],
)
def test_script_is_written_0700_and_executed(runner: Runner, launch: Launches, script: str) -> None:
    runner.start(launch("3", script=script))
    assert wait_ended(runner)["3"].exit_code == 0
    word, path = launch.output("3").split()
    assert word in ("shebang", "plain")
    # The script was a file of its own (not sh -c), with mode 0700.
    assert path.endswith("/script")


def test_environment(runner: Runner, launch: Launches) -> None:
    env = {"MINE": "kept", "SLURM_JOB_ID": "stale"}
    names = "MINE GPUFLEET_JOB_ID GPUFLEET_ARRAY_JOB_ID GPUFLEET_ARRAY_TASK_ID GPUFLEET_NODE "
    names += "GPUFLEET_RESTART_COUNT SLURM_JOB_ID SLURM_ARRAY_TASK_ID CUDA_VISIBLE_DEVICES"
    argv = ["sh", "-c", f'for v in {names}; do eval "echo $v=\\${{$v-unset}}"; done']
    runner.start(
        launch(
            "12_3",
            run=3,
            argv=argv,
            env=env,
            array_job_id="12",
            array_task_id=3,
            gpu_uuids=["GPU-aaaa", "MIG-bbbb"],
        )
    )
    wait_ended(runner)
    assert launch.output("12_3").splitlines() == [
        "MINE=kept",
        "GPUFLEET_JOB_ID=12_3",
        "GPUFLEET_ARRAY_JOB_ID=12",
        "GPUFLEET_ARRAY_TASK_ID=3",
        "GPUFLEET_NODE=n1",
        "GPUFLEET_RESTART_COUNT=2",  # run 3 is the second restart
        "SLURM_JOB_ID=12_3",  # the scheduler's value wins over the submitted one
        "SLURM_ARRAY_TASK_ID=3",
        "CUDA_VISIBLE_DEVICES=GPU-aaaa,MIG-bbbb",
    ]


def test_cpu_job_sees_no_gpu(runner: Runner, launch: Launches) -> None:
    # Set but empty: CUDA then shows no device, where unset would show them all.
    argv = ["sh", "-c", 'echo "[${CUDA_VISIBLE_DEVICES-unset}]"']
    runner.start(launch("4", argv=argv, env={"CUDA_VISIBLE_DEVICES": "0"}))
    wait_ended(runner)
    assert launch.output("4") == "[]\n"


def test_death_by_signal(runner: Runner, launch: Launches) -> None:
    runner.start(launch("5", argv=["sh", "-c", "kill -KILL $$"]))
    report = wait_ended(runner)["5"]
    assert (report.state, report.exit_code, report.signal) == ("signalled", None, 9)


def test_time_limit_sends_term_then_kill(runner: Runner, launch: Launches, tmp_path: Path) -> None:
    script = "#!/bin/sh\ntrap 'echo got TERM' TERM\necho ready\nwhile :; do sleep 0.05; done\n"
    started = time.monotonic()
    runner.start(launch("6", script=script, time_limit_s=1, kill_grace_s=1))
    report = wait_ended(runner)["6"]
    elapsed = time.monotonic() - started
    assert (report.state, report.signal, report.cause) == ("signalled", 9, "time_limit")
    assert report.message.startswith("time limit reached")
    assert "got TERM" in launch.output("6")
    assert 1.9 < elapsed < 5  # 1 s limit + 1 s grace


def test_a_job_that_exits_0_on_its_limits_term_ended_by_the_limit(
    runner: Runner, launch: Launches
) -> None:
    # The exit alone reads as a success; the cause says the limit ended it.
    script = "trap 'exit 0' TERM\nwhile :; do sleep 0.05; done\n"
    runner.start(launch("6b", script=script, time_limit_s=1, kill_grace_s=5))
    report = wait_ended(runner)["6b"]
    assert (report.state, report.exit_code, report.cause) == ("exited", 0, "time_limit")


def test_signal_warning_before_the_limit(runner: Runner, launch: Launches) -> None:
    script = "trap 'echo warned; exit 0' USR1\nwhile :; do sleep 0.05; done\n"
    started = time.monotonic()
    runner.start(launch("7", script=script, time_limit_s=30, signal="USR1@29"))
    report = wait_ended(runner)["7"]
    assert (report.state, report.exit_code) == ("exited", 0)
    # The whole group got USR1: the shell's `sleep` died of it, the trap ran.
    assert launch.output("7").endswith("warned\n")
    assert time.monotonic() - started < 5


def test_cancel_signals_the_whole_group_then_kills(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    script = (
        "trap 'echo got INT' INT\n(trap '' INT; sleep 30) &\necho $! > child.pid\n"
        "while :; do sleep 0.05; done\n"
    )
    runner.start(launch("8", script=script))
    wait_for(tmp_path / "child.pid")
    asked = time.time()
    assert runner.kill("8", 1, "INT", 1)
    assert runner.kill("8", 1, "SIGINT", 5)  # a repeat does not postpone the SIGKILL
    report = wait_ended(runner)["8"]
    assert (report.state, report.signal, report.cause) == ("signalled", 9, "killed")
    # Killed after the first kill's 1 s of grace, well before the repeat's 5 s.
    assert report.at - asked < 4
    assert "got INT" in launch.output("8")
    # The background child ignored INT; it went with the group's SIGKILL.
    assert not _alive(int((tmp_path / "child.pid").read_text()))


def test_leftover_processes_end_with_the_job(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    runner.start(launch("9", script="sleep 30 &\necho $! > bg.pid\n"))
    assert wait_ended(runner)["9"].exit_code == 0
    assert not _alive(int((tmp_path / "bg.pid").read_text()))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"argv": ["true"], "workdir": "/nonexistent/dir"}, "directory /nonexistent/dir does not"),
        ({"script": "#!/nonexistent/python3\nprint(1)\n"}, "interpreter /nonexistent/python3 not"),
        ({"argv": ["no-such-command-xyz"]}, "no-such-command-xyz: command not found"),
        ({"argv": ["true"], "stdout_path": "/nonexistent/o.txt"}, "directory /nonexistent does"),
        ({"argv": ["true"], "signal": "NOPE@10"}, "signal: unknown signal 'NOPE'"),
        ({"argv": None}, "give exactly one of argv and script"),
        ({"job_id": "../x", "argv": ["true"]}, "job id '../x' is not a safe name"),
    ],
    ids=["workdir", "interpreter", "command", "output-dir", "signal-spec", "no-argv", "job-id"],
)
def test_failure_to_start_is_a_report(
    runner: Runner, launch: Launches, fields: dict[str, object], message: str
) -> None:
    spec = launch("10", **fields)
    runner.start(spec)
    report = wait_ended(runner)[spec.job_id]
    assert (report.state, report.cause) == ("failed_to_start", "failed_to_start")
    assert message in report.message


def test_a_relative_state_dir_still_runs_scripts(
    launch: Launches, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job runs in its workdir, elsewhere: its script's path must not be relative.
    monkeypatch.chdir(tmp_path)
    workdir = tmp_path / "work"
    workdir.mkdir()
    runner = Runner("state", "n1", same_user=True)
    try:
        runner.start(launch("13", script="#!/bin/sh\necho ran\n", workdir=str(workdir)))
        report = wait_ended(runner)["13"]
        assert (report.state, report.exit_code) == ("exited", 0), report.message
        assert launch.output("13") == "ran\n"
    finally:
        runner.close()


@pytest.mark.parametrize(
    ("program", "message"),
    [
        # Beside the agent, but not in the job's workdir, where the job looks it up.
        ("./beside-the-agent", "./beside-the-agent: no such file"),
        # In the workdir, with a #! interpreter that does not exist.
        ("./in-the-workdir", "./in-the-workdir: interpreter /nonexistent/python3 not found"),
    ],
)
def test_a_missing_program_is_told_from_a_missing_interpreter(
    runner: Runner,
    launch: Launches,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    program: str,
    message: str,
) -> None:
    agent_dir, workdir = tmp_path / "agent", tmp_path / "work"
    for folder, name in ((agent_dir, "beside-the-agent"), (workdir, "in-the-workdir")):
        folder.mkdir()
        (folder / name).write_text("#!/nonexistent/python3\nprint(1)\n")
        (folder / name).chmod(0o755)
    monkeypatch.chdir(agent_dir)
    runner.start(launch("14", argv=[program], workdir=str(workdir)))
    report = wait_ended(runner)["14"]
    assert report.state == "failed_to_start"
    assert report.message.endswith(message), report.message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs jobs as other users")
def test_root_agent_refuses_an_unknown_user(tmp_path: Path, launch: Launches) -> None:
    runner = Runner(tmp_path / "state", "n1")
    runner.start(launch("11", argv=["true"], user="no-such-user-xyz"))
    report = wait_ended(runner)["11"]
    assert report.state == "failed_to_start"
    assert "user 'no-such-user-xyz' does not exist" in report.message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs jobs as other users")
def test_root_agent_runs_the_job_as_its_user(launch: Launches) -> None:
    # The user must be able to reach the state directory; pytest's own are 0700.
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        base = Path(tmp)
        base.chmod(0o711)
        runner = Runner(base / "state", "n1")
        out = base / "out"
        out.mkdir()
        out.chmod(0o777)
        spec = launch("12", argv=["id", "-un"], user="nobody", workdir=str(out))
        paths = {"stdout_path": str(out / "o"), "stderr_path": str(out / "o")}
        runner.start(spec.model_copy(update=paths))
        assert wait_ended(runner)["12"].exit_code == 0
        assert (out / "o").read_text() == "nobody\n"


def test_starts_and_kills_are_idempotent(runner: Runner, launch: Launches) -> None:
    spec = launch("13", argv=["sleep", "30"])
    assert runner.start(spec)
    assert not runner.start(spec)  # a retried start while it runs
    assert [(r.job_id, r.run) for r in runner.running()] == [("13", 1)]
    assert runner.kill("13", 1, "TERM", 0)
    assert not runner.kill("13", 1, "TERM", 0)  # the same request again: nothing new
    wait_ended(runner)
    assert not runner.kill("13", 1, "KILL", 0)  # ended: nothing to kill
    assert not runner.start(spec)  # ended, not yet acknowledged
    runner.acknowledge([("13", 1)])
    runner.acknowledge([("13", 1)])
    assert runner.reports() == []
    assert not runner.start(spec)  # a late duplicate never reruns a finished run
    assert not runner.kill("13", 1, "KILL", 0)
    assert runner.start(launch("13", run=2, argv=["true"]))  # a requeued run does start


def test_a_kill_before_the_start_ends_the_run_unstarted_for_good(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    # A cancel that overtook its start: the start, when it comes, never runs.
    marker = tmp_path / "ran"
    spec = launch("14", argv=["touch", str(marker)])
    assert runner.kill("14", 1, "TERM", 5, "cancel")
    assert not runner.kill("14", 1, "TERM", 5, "cancel")  # repeated: nothing new
    report = wait_ended(runner)["14"]
    assert (report.state, report.cause) == ("failed_to_start", "killed")
    assert report.message == "killed before it started (cancel)"
    assert not runner.start(spec)
    runner.close()
    again = Runner(tmp_path / "state", "n1", same_user=True)  # a restarted agent
    try:
        assert [(r.job_id, r.cause) for r in again.reports()] == [("14", "killed")]
        assert not again.start(spec)
        again.acknowledge([("14", 1)])
        assert not again.start(spec)
    finally:
        again.close()
    assert not marker.exists()


def _alive(pid: int) -> bool:
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.02)
    return True
