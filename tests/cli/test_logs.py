"""gpufleet logs: a job's output through the controller, followed to its end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli.live import Up


def gpufleet(live: Up, who: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *argv],
        env=live.env(who),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_follow_prints_the_output_as_it_comes_until_the_end(live: Up, tmp_path: Path) -> None:
    script = "echo first; sleep 2; echo second >&2; echo last"
    job = gpufleet(live, "ada", "submit", "--parsable", f"--wrap={script}", cwd=tmp_path)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip()
    # Started before the job may have: it waits for the file, then follows it to the end.
    followed = gpufleet(live, "ada", "logs", "--follow", job_id, cwd=tmp_path)
    assert (followed.returncode, followed.stdout) == (0, "first\nsecond\nlast\n")
    only_err = tmp_path / "err"
    job = gpufleet(
        live, "ada", "submit", "--parsable", f"--error={only_err}", f"--wrap={script}",
        cwd=tmp_path,
    )  # fmt: skip
    job_id = job.stdout.strip()
    live.wait_final(job_id)
    err = gpufleet(live, "ada", "logs", "--stderr", job_id, cwd=tmp_path)
    assert (err.returncode, err.stdout) == (0, "second\n")
    # Another user's job is not found to bob, as in the API.
    denied = gpufleet(live, "bob", "logs", job_id, cwd=tmp_path)
    assert (denied.returncode, denied.stderr) == (
        2,
        f"error: logs: not found: job {job_id}: no such job\n",
    )
