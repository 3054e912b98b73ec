"""The checkpoint contract on the node: the directory, the mark and its reports."""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

import pytest

from agent.support import Launches, wait_ended, wait_for
from gpufleet.agent.runner import Runner


def test_a_run_gets_its_directory_and_reports_each_checkpoint(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt" / "alice" / "7"
    go = tmp_path / "go"
    script = (
        'echo "$GPUFLEET_CHECKPOINT_DIR $GPUFLEET_RESTART_COUNT"\n'
        'echo step > "$GPUFLEET_CHECKPOINT_DIR/state"; touch "$GPUFLEET_CHECKPOINT_MARK"\n'
        f"while [ ! -e {go} ]; do sleep 0.02; done\n"
    )
    assert runner.start(launch("7", run=3, script=script, checkpoint_dir=str(ckpt)))
    wait_for(ckpt / ".checkpointed")
    assert ckpt.is_dir() and (ckpt.stat().st_mode & 0o777) == 0o700
    (mark,) = runner.checkpoints()
    assert (mark.job_id, mark.run) == ("7", 3)
    assert mark.at == os.stat(ckpt / ".checkpointed").st_mtime
    # A new Runner on the same state (a restarted agent) finds the mark too.
    runner.close()
    again = Runner(runner._runs.parent, "n1", same_user=True)
    try:
        assert [(c.job_id, c.at) for c in again.checkpoints()] == [("7", mark.at)]
        go.touch()
        wait_ended(again)
        assert launch.output("7") == f"{ckpt} 2\n"
        assert (ckpt / "state").read_text() == "step\n"  # kept for the next run
    finally:
        again.close()


def test_no_mark_no_report_and_a_bad_directory_fails_the_start(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    runner.start(launch("1", argv=["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"]))
    assert runner.checkpoints() == []
    blocker = tmp_path / "file"
    blocker.write_text("")
    runner.start(launch("2", argv=["true"], checkpoint_dir=str(blocker / "sub")))
    report = wait_ended(runner)["2"]
    assert report.state == "failed_to_start"
    assert report.message.startswith(f"checkpoint directory {blocker / 'sub'}: ")
    go.touch()
    wait_ended(runner, 2)


def test_a_missing_workdir_fails_the_start_and_nothing_is_made(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    workdir = tmp_path / "relative" / "nonexist"
    ckpt = workdir / ".gpufleet" / "checkpoints" / "3"
    runner.start(launch("3", argv=["true"], workdir=str(workdir), checkpoint_dir=str(ckpt)))
    report = wait_ended(runner)["3"]
    assert report.state == "failed_to_start"
    assert report.message == f"workdir: directory {workdir} does not exist"
    assert not (tmp_path / "relative").exists()


def test_a_start_that_fails_leaves_no_checkpoint_directory(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    ckpts = tmp_path / "ckpt"
    refused = launch("4", argv=["true"], stdout_path=str(tmp_path / "nodir" / "4.out"))
    runner.start(refused.model_copy(update={"checkpoint_dir": str(ckpts / "alice" / "4")}))
    missing = launch("5", argv=["no-such-program-gpufleet"], checkpoint_dir=str(ckpts / "5"))
    runner.start(missing)
    reports = wait_ended(runner, 2)
    nodir = tmp_path / "nodir"
    assert reports["4"].message == f"stdout {nodir / '4.out'}: directory {nodir} does not exist"
    assert reports["5"].message == "no-such-program-gpufleet: command not found"
    assert not ckpts.exists()
    # A requeued job's directory, made by an earlier run, is kept whatever this start does.
    (ckpts / "6").mkdir(parents=True)
    (ckpts / "6" / "state").write_text("step")
    runner.start(launch("6", argv=["no-such-program-gpufleet"], checkpoint_dir=str(ckpts / "6")))
    assert wait_ended(runner, 3)["6"].state == "failed_to_start"
    assert (ckpts / "6" / "state").read_text() == "step"


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root agent runs jobs as other users")
def test_a_root_agent_never_chowns_through_a_users_link(launch: Launches) -> None:
    nobody = pwd.getpwnam("nobody")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        base = Path(tmp)
        base.chmod(0o711)
        runner = Runner(base / "state", "n1")
        try:
            victim = base / "victim"  # a root-owned directory, /etc say
            victim.mkdir(mode=0o755)
            work = base / "work"
            (work / ".gpufleet" / "checkpoints").mkdir(parents=True)
            for d in (work, work / ".gpufleet", work / ".gpufleet" / "checkpoints"):
                os.chown(d, nobody.pw_uid, nobody.pw_gid)
            link = work / ".gpufleet" / "checkpoints" / "21"
            link.symlink_to(victim)
            os.lchown(link, nobody.pw_uid, nobody.pw_gid)
            out = {"stdout_path": str(work / "o"), "stderr_path": str(work / "o")}
            spec = launch("21", argv=["true"], workdir=str(work), checkpoint_dir=str(link))
            runner.start(spec.model_copy(update=out))
            wait_ended(runner)
            assert (victim.stat().st_uid, victim.stat().st_mode & 0o777) == (0, 0o755)
            # A partition's storage: root makes DIR/USER for the user, and only that.
            storage = base / "storage"
            storage.mkdir(mode=0o755)
            ckpt = storage / "nobody" / "22"
            spec = launch("22", argv=["true"], workdir=str(work), checkpoint_dir=str(ckpt))
            runner.start(spec.model_copy(update=out))
            assert wait_ended(runner, 2)["22"].exit_code == 0
            assert ckpt.stat().st_uid == ckpt.parent.stat().st_uid == nobody.pw_uid
            # ... and refuses a link put there in its place.
            other = base / "other"
            other.mkdir(mode=0o1777)
            (other / "nobody").symlink_to(victim)
            ckpt = other / "nobody" / "23"
            spec = launch("23", argv=["true"], workdir=str(work), checkpoint_dir=str(ckpt))
            runner.start(spec.model_copy(update=out))
            report = wait_ended(runner, 3)["23"]
            assert report.state == "failed_to_start"
            assert report.message.startswith(f"checkpoint directory {other / 'nobody'}: ")
        finally:
            runner.close()
        assert victim.stat().st_uid == 0
