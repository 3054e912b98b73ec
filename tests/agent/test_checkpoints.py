"""The checkpoint contract on the node: the directory, the mark and its reports."""

from __future__ import annotations

import os
from pathlib import Path

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
    assert ckpt.is_dir() and (ckpt.stat().st_mode & 0o777) == 0o700
    wait_for(ckpt / ".checkpointed")
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
