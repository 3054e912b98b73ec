"""``gpufleet up``: a one-machine cluster that runs a submitted job and stops cleanly."""

from __future__ import annotations

import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gpufleet.api.schemas import TERMINAL_STATES

START_S = 60.0  # the first cycle compiles the placement kernels


def submit(api: httpx.Client, job: dict[str, object]) -> str:
    created = api.post("/v1/jobs", json=job)
    assert created.status_code == 201, created.text
    job_id: str = created.json()["job_id"]
    return job_id


def wait_state(api: httpx.Client, job_id: str) -> str:
    """The job's state once it is final."""
    deadline = time.monotonic() + START_S
    while True:
        job = api.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in TERMINAL_STATES:
            return str(job["state"])
        assert time.monotonic() < deadline, (job["job_id"], job["state"], job["reason"])
        time.sleep(0.1)


def test_up_runs_a_job_and_stops_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = tmp_path / "stdout.txt"
    log = (tmp_path / "up.log").open("w")
    argv = [sys.executable, "-m", "gpufleet.cli.main", "up", "--data", str(data), "--port", "0"]
    up = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert up.stdout is not None
        banner = ""
        deadline = time.monotonic() + START_S
        while "Stop with Ctrl-C." not in banner:
            assert time.monotonic() < deadline and up.poll() is None, banner
            banner += up.stdout.readline()
        url = re.search(r"export GPUFLEET_URL=(\S+)", banner)
        assert url is not None
        assert f"GPUFLEET_TOKEN=$(cat {data / 'admin.token'})" in banner
        assert "2 demo L4 GPUs" in banner or "NVIDIA GPUs" in banner
        assert stat.S_IMODE((data / "admin.token").stat().st_mode) == 0o600
        token = (data / "admin.token").read_text().strip()
        with httpx.Client(base_url=url[1], headers={"Authorization": f"Bearer {token}"}) as api:
            job = {
                "command": ["sh", "-c", "echo hi from $GPUFLEET_JOB_ID on $GPUFLEET_NODE"],
                "workdir": str(tmp_path),
                "stdout": str(out),
            }
            job_id = submit(api, job)
            assert wait_state(api, job_id) == "COMPLETED"
            assert out.read_text() == f"hi from {job_id} on local\n"
            # The time limit and a cancel, as the controller sees them.
            sleeper = {"command": ["sleep", "30"], "workdir": str(tmp_path)}
            timed = submit(api, {**sleeper, "time_limit_s": 1})
            marker = tmp_path / "started"
            touching = ["sh", "-c", f"touch {marker}; sleep 30"]
            cancelled = submit(api, {**sleeper, "command": touching})
            # Cancel once the agent runs it (a cancel between the controller's
            # start and the agent's is the controller's backstop to resolve).
            while not marker.exists():
                time.sleep(0.1)
            assert api.post(f"/v1/jobs/{cancelled}/cancel").status_code == 200
            assert wait_state(api, cancelled) == "CANCELLED"
            assert wait_state(api, timed) == "TIMEOUT"
        up.send_signal(signal.SIGTERM)
        assert up.wait(10) == 0
        assert "gpufleet stopped" in up.stdout.read()
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        if up.stdout is not None:
            up.stdout.close()
        log.close()
