"""Two runs never overlap on a node: a new run of a job, or a run on a GPU another run
still holds whole, waits for that run to end."""

from __future__ import annotations

from pathlib import Path

from agent.fake_controller import FakeController, serve
from agent.support import Launches, wait_ended, wait_for
from agent.test_daemon import eventually, running_agent
from gpufleet.agent.runner import Runner


def test_a_new_run_of_a_job_waits_for_its_old_run(runner: Runner, launch: Launches) -> None:
    assert runner.start(launch("32", argv=["sleep", "30"]))
    assert not runner.start(launch("32", run=2, argv=["true"]))
    assert [(r.job_id, r.run) for r in runner.running()] == [("32", 1)]
    assert runner.kill("32", 1, "KILL", 0, "not expected")
    assert wait_ended(runner)["32"].run == 1
    assert runner.start(launch("32", run=2, argv=["true"]))
    assert [(r.job_id, r.run) for r in runner.running()] == [("32", 2)]


def test_a_run_waits_for_its_gpus_unless_both_runs_share_them(
    runner: Runner, launch: Launches, tmp_path: Path
) -> None:
    assert runner.start(launch("40", argv=["sleep", "30"], gpu_uuids=["GPU-a", "GPU-b"]))
    assert not runner.start(launch("41", argv=["true"], gpu_uuids=["GPU-b"]))
    assert runner.start(launch("42", argv=["sleep", "30"], gpu_uuids=["GPU-c"], gpu_milli=500))
    assert runner.start(launch("43", argv=["sleep", "30"], gpu_uuids=["GPU-c"], gpu_milli=500))
    assert not runner.start(launch("44", argv=["true"], gpu_uuids=["GPU-c"]))
    # A restarted agent knows the GPUs of the runs it finds from their files.
    runner.close()
    again = Runner(tmp_path / "state", "n1", same_user=True)
    try:
        assert not again.start(launch("41", argv=["true"], gpu_uuids=["GPU-b"]))
        for job in ("40", "42", "43"):
            again.kill(job, 1, "KILL", 0)
        wait_ended(again, 3)
        assert again.start(launch("41", argv=["true"], gpu_uuids=["GPU-b"]))
    finally:
        again.close()


def test_the_old_run_ends_before_the_new_one_starts(tmp_path: Path, launch: Launches) -> None:
    # As after an agent restart: one reply asks for run 2 and kills run 1, which takes
    # a while to end after its SIGTERM.
    log = tmp_path / "log"
    old = (
        f"echo 1 start >> {log}; trap 'sleep 0.5; echo 1 end >> {log}; exit 0' TERM; "
        "while true; do sleep 0.05; done"
    )
    fake = FakeController()
    with serve(fake) as url, running_agent(url, tmp_path / "state") as agent:
        fake.want(launch("32", argv=["sh", "-c", old]))
        eventually(lambda: [r.job_id for r in agent.runner.running()] == ["32"])
        wait_for(log)
        with fake._news:
            del fake.wanted[("32", 1)]
            fake.kill("32", 1, "TERM", 5)
            fake.want(launch("32", run=2, argv=["sh", "-c", f"echo 2 start >> {log}"]))
        ended = [("32", 1), ("32", 2)]  # a report may come twice
        eventually(lambda: sorted({(r.job_id, r.run) for r in fake.reports}) == ended)
    assert log.read_text().splitlines() == ["1 start", "1 end", "2 start"]
