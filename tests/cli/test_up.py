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

START_S = 60.0  # the first cycle compiles the placement kernels


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
            created = api.post("/v1/jobs", json=job)
            assert created.status_code == 201, created.text
            job_id = created.json()["job_id"]
            state = ""
            deadline = time.monotonic() + START_S
            while state != "COMPLETED":
                assert time.monotonic() < deadline, state
                time.sleep(0.1)
                state = api.get(f"/v1/jobs/{job_id}").json()["state"]
        assert out.read_text() == f"hi from {job_id} on local\n"
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
