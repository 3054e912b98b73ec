"""Helpers for agent tests: launches in a temporary directory and waits for run ends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpufleet.agent.runner import Runner
from gpufleet.api.agent_schemas import JobLaunch, RunReport

WAIT_S = 8.0


class Launches:
    """``launches("7", argv=[...])``: a JobLaunch whose files live in ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def __call__(self, job_id: str, /, **fields: Any) -> JobLaunch:
        spec: dict[str, Any] = {
            "job_id": job_id,
            "run": 1,
            "user": "nobody",
            "workdir": str(self.tmp),
            "stdout_path": str(self.tmp / f"{job_id}.out"),
            "stderr_path": str(self.tmp / f"{job_id}.out"),
            "time_limit_s": 60,
            "kill_grace_s": 1,
        }
        spec.update(fields)
        return JobLaunch(**spec)

    def output(self, job_id: str) -> str:
        return (self.tmp / f"{job_id}.out").read_text()


def wait_ended(runner: Runner, count: int = 1, timeout: float = WAIT_S) -> dict[str, RunReport]:
    """Poll until ``count`` runs have reports; return them by job id."""
    deadline = time.monotonic() + timeout
    while len(runner.reports()) < count:
        assert time.monotonic() < deadline, f"runs still going: {runner.running()}"
        runner.poll()
        time.sleep(0.02)
    return {r.job_id: r for r in runner.reports()}


def wait_for(path: Path, timeout: float = WAIT_S) -> None:
    """Wait until ``path`` exists (a job signals that it got somewhere)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
