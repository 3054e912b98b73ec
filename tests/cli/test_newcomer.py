"""A newcomer's first hour, as the commands a person types against ``gpufleet up``.

Submit (options, ``--wrap``, the example batch script), watch the queue and
a job to its end, read its output, cancel a long job, run an array with a
concurrency limit and a job that waits for another, read the GPU-hours, and
replay the exported history in the simulator. Every command is the
installed ``gpufleet`` in a subprocess, with the environment ``gpufleet
up``'s banner says to set.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.live import Up, running_up

EXAMPLE = Path(__file__).parents[2] / "examples" / "train.sbatch"
WAIT_S = 60.0


class Shell:
    """Runs ``gpufleet`` commands as the admin of a running ``gpufleet up``, in ``cwd``."""

    def __init__(self, up: Up, cwd: Path) -> None:
        self.up = up
        self.cwd = cwd

    def __call__(self, *argv: str) -> str:
        """The command's stdout; it must exit 0 and write nothing to stderr."""
        done = subprocess.run(
            ["gpufleet", *argv],
            capture_output=True,
            text=True,
            env=self.up.env("admin"),
            cwd=self.cwd,
            timeout=WAIT_S,
        )
        assert (done.returncode, done.stderr) == (0, ""), (argv, done.stdout)
        return done.stdout

    def submit(self, *argv: str) -> str:
        out = self("submit", *argv)
        found = re.fullmatch(r"Submitted batch job (\d+)\n", out)
        assert found, out
        return found[1]

    def show(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = json.loads(self("show", job_id, "--json"))
        return job

    def wait(self, job_id: str, *states: str) -> dict[str, Any]:
        """The job, from ``show --json``, once it is in one of ``states``. The API is
        polled in between: a command a poll would cost a second each."""
        deadline = time.monotonic() + WAIT_S
        with self.up.api("admin") as api:
            while (job := api.get(f"/v1/jobs/{job_id}").json())["state"] not in states:
                assert time.monotonic() < deadline, job
                time.sleep(0.1)
        return self.show(job_id)


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    """``gpufleet up`` as it comes: its own configuration, its admin token, demo GPUs."""
    base = tmp_path_factory.mktemp("newcomer")
    with running_up(base / "data") as up:
        work = base / "work"
        work.mkdir()
        yield Shell(up, work)


def test_first_jobs_run_and_leave_their_output(shell: Shell) -> None:
    script = shutil.copy(EXAMPLE, shell.cwd / "train.sbatch")
    trained = shell.submit(str(script))
    wrapped = shell.submit("--wrap", "echo hello from $GPUFLEET_JOB_ID")
    # Options on the command line override the script's directives.
    short = shell.submit("--job-name=short", "--time=1", "--gpus=2", str(script))
    queue = shell("queue", "--state", "all")
    assert queue.split()[:9] == [
        "JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "START", "NODELIST(REASON)"
    ]  # fmt: skip
    listed = {line.split()[0]: line.split() for line in queue.splitlines()[1:]}
    assert [listed[j][2] for j in (trained, wrapped, short)] == ["train", "wrap", "short"]
    job = shell.wait(trained, "COMPLETED")
    assert (job["exit_code"], job["gpus_per_node"], job["node_list"]) == (0, 1, ["local"])
    assert job["stdout_path"] == f"{shell.cwd}/train-{trained}.out"
    lines = Path(job["stdout_path"]).read_text().splitlines()
    assert lines[0] == f"job {trained} on local"
    devices = lines[1].removeprefix("CUDA_VISIBLE_DEVICES=")
    assert devices and "," not in devices  # one GPU: the demo node's made-up id
    assert lines[2:] == ["done"]
    job = shell.wait(wrapped, "COMPLETED")
    assert Path(job["stdout_path"]).read_text() == f"hello from {wrapped}\n"
    job = shell.wait(short, "COMPLETED")
    assert (job["name"], job["time_limit_s"], job["gpus_per_node"]) == ("short", 60, 2)
    devices = (shell.cwd / f"short-{short}.out").read_text().splitlines()[1]
    assert devices.count(",") == 1  # two GPUs


def test_a_long_job_is_cancelled(shell: Shell) -> None:
    long = shell.submit("--wrap", "sleep 600", "--job-name", "long")
    shell.wait(long, "RUNNING")
    assert "long" in shell("queue", "--state", "R")
    assert shell("cancel", long) == ""
    assert shell.wait(long, "CANCELLED", "COMPLETED", "FAILED")["state"] == "CANCELLED"
    assert long not in shell("queue").split()


def test_an_array_runs_at_most_limit_tasks_at_once(shell: Shell) -> None:
    array = shell.submit(
        "--array=0-3%2", "--output=arr-%A_%a.out", "--wrap", "sleep 1; echo $SLURM_ARRAY_TASK_ID"
    )
    tasks = [shell.wait(f"{array}_{k}", "COMPLETED", "FAILED") for k in range(4)]
    assert [t["state"] for t in tasks] == ["COMPLETED"] * 4
    for k in range(4):
        assert (shell.cwd / f"arr-{array}_{k}.out").read_text() == f"{k}\n"
    # At each task's start, fewer than two others had started and not yet ended.
    for t in tasks:
        running = [
            o for o in tasks if o is not t and o["start_time"] <= t["start_time"] < o["end_time"]
        ]
        assert len(running) < 2, tasks


def test_a_dependent_job_starts_after_its_dependency_succeeds(shell: Shell) -> None:
    first = shell.submit("--wrap", "sleep 1; echo made > made.txt")
    then = shell.submit(f"--dependency=afterok:{first}", "--wrap", "cat made.txt")
    assert shell.show(then)["reason"] in ("Dependency", "")  # "" if it already started
    done = shell.wait(then, "COMPLETED", "FAILED")
    before = shell.show(first)
    assert done["state"] == "COMPLETED"
    assert done["start_time"] >= before["end_time"]
    assert Path(done["stdout_path"]).read_text() == "made\n"
    failing = shell.submit("--wrap", "exit 3")
    never = shell.submit(f"--dependency=afterok:{failing}", "--wrap", "true")
    assert shell.wait(failing, "FAILED")["exit_code"] == 3
    job = shell.show(never)
    assert (job["state"], job["reason"]) == ("PENDING", "DependencyNeverSatisfied")
    shell("cancel", never)


def test_usage_and_its_export_replay_in_the_simulator(shell: Shell) -> None:
    ran = shell.submit("--gpus=1", "--wrap", "sleep 1")
    shell.wait(ran, "COMPLETED")
    table = shell("usage").splitlines()
    assert table[0].split() == ["USER", "GPU-HOURS", "JOBS", "RUNS"]
    assert [row.split()[0] for row in table[1:]] == ["admin"]
    (row,) = json.loads(shell("usage", "--json"))
    assert row["key"] == "admin" and row["gpu_hours"] > 1 / 3600  # a GPU for over a second
    history = shell.cwd / "history.jsonl"
    said = shell("usage", "--export", str(history))
    jobs = [json.loads(line) for line in history.read_text().splitlines()]
    assert said == f"{len(jobs)} finished jobs written to {history}\n"
    assert ran in {job["id"] for job in jobs}
    # Replayed on the same machine's node file, under the default policy.
    cluster = shell.up.data / "node.toml"
    trace = f"history:{history}"
    replay = shell("sim", "run", "--cluster", str(cluster), "--trace", trace, "--json")
    summary = json.loads(replay.splitlines()[-1])
    assert summary["jobs"] == len(jobs)
