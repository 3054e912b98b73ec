"""``gpufleet up``: a one-machine cluster that runs submitted jobs, enforces
limits and cancels through the real controller, stops cleanly, and finds its
running jobs again when started anew."""

from __future__ import annotations

import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from gpufleet.api.schemas import TERMINAL_STATES

START_S = 60.0  # the first cycle compiles the placement kernels


@contextmanager
def gpufleet_up(
    data: Path, log: Path, stop: signal.Signals = signal.SIGTERM
) -> Iterator[tuple[str, httpx.Client]]:
    """Run ``gpufleet up --data DATA``; yield its banner and an admin client.
    Stops it with ``stop`` on leaving and requires a clean, quiet stop."""
    argv = [sys.executable, "-m", "gpufleet.cli.main", "up", "--data", str(data), "--port", "0"]
    with log.open("a") as err:
        up = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    assert up.stdout is not None
    try:
        banner = ""
        deadline = time.monotonic() + START_S
        while "Stop with Ctrl-C." not in banner:
            assert time.monotonic() < deadline and up.poll() is None, banner
            banner += up.stdout.readline()
        url = re.search(r"export GPUFLEET_URL=(\S+)", banner)
        assert url is not None
        token = (data / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url[1], headers=headers) as api:
            yield banner, api
        up.send_signal(stop)
        assert up.wait(10) == 0
        assert "gpufleet stopped" in up.stdout.read()
        logged = log.read_text()
        assert "Traceback" not in logged and " ERROR " not in logged, logged
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        up.stdout.close()


def submit(api: httpx.Client, job: Mapping[str, object]) -> str:
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


def wait_file(path: Path) -> None:
    deadline = time.monotonic() + START_S
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_up_runs_jobs_and_stops_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = tmp_path / "stdout.txt"
    # Left world-readable by an older version: made private on the way up.
    data.mkdir(mode=0o755)
    (data / "gpufleet.db").touch(mode=0o644)
    with gpufleet_up(data, tmp_path / "up.log") as (banner, api):
        assert f"GPUFLEET_TOKEN=$(cat {data / 'admin.token'})" in banner
        assert "gpufleet submit --wrap 'echo hi'" in banner
        dashboard = re.search(r"open the dashboard, (\S+/ui/),", banner)
        assert dashboard is not None, banner
        assert "<title>gpufleet</title>" in httpx.get(dashboard[1]).text
        assert "2 demo L4 GPUs" in banner or "NVIDIA GPUs" in banner
        assert stat.S_IMODE((data / "admin.token").stat().st_mode) == 0o600
        job = {
            "command": ["sh", "-c", "echo hi from $GPUFLEET_JOB_ID on $GPUFLEET_NODE"],
            "workdir": str(tmp_path),
            "stdout": str(out),
        }
        job_id = submit(api, job)
        assert wait_state(api, job_id) == "COMPLETED"
        assert out.read_text() == f"hi from {job_id} on local\n"
        # The store holds job scripts and environments: only its owner reads it.
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for name in ("gpufleet.db", "gpufleet.db-wal", "gpufleet.db-shm"):
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
        # The time limit and a cancel, as the controller sees them.
        sleeper = {"command": ["sleep", "30"], "workdir": str(tmp_path)}
        timed = submit(api, {**sleeper, "time_limit_s": 1})
        marker = tmp_path / "started"
        touching = ["sh", "-c", f"touch {marker}; sleep 30"]
        cancelled = submit(api, {**sleeper, "command": touching})
        wait_file(marker)
        assert api.post(f"/v1/jobs/{cancelled}/cancel").status_code == 200
        assert wait_state(api, cancelled) == "CANCELLED"
        assert wait_state(api, timed) == "TIMEOUT"
        # Cancelled at once: pending, or between the controller's start and the
        # agent's. Either way it ends promptly, not at the backstop (60 s).
        raced = submit(api, sleeper)
        cancelling = time.monotonic()
        assert api.post(f"/v1/jobs/{raced}/cancel").status_code == 200
        assert wait_state(api, raced) == "CANCELLED"
        assert time.monotonic() - cancelling < 20


def test_a_new_up_finds_the_running_jobs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    marker = tmp_path / "started"
    job = {"command": ["sh", "-c", f"touch {marker}; sleep 30"], "workdir": str(tmp_path)}
    with gpufleet_up(data, tmp_path / "up.log") as (_, api):
        job_id = submit(api, job)
        wait_file(marker)
    token = (data / "admin.token").read_text()
    with gpufleet_up(data, tmp_path / "up.log") as (_, api):
        assert (data / "admin.token").read_text() == token  # the same directory, reused
        assert api.get(f"/v1/jobs/{job_id}").json()["state"] == "RUNNING"
        assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        assert wait_state(api, job_id) == "CANCELLED"


def test_up_stops_at_once_with_a_long_poll_parked(tmp_path: Path) -> None:
    # Ctrl-C while an agent's long poll waits: it is answered, not cancelled
    # after the grace with a traceback in the log.
    data = tmp_path / "data"
    answers: list[int] = []
    with gpufleet_up(data, tmp_path / "up.log", signal.SIGINT) as (_, api):
        token = (data / "agent.token").read_text().strip()
        sync = str(api.base_url).rstrip("/") + "/v1/agents/local/sync"
        headers = {"Authorization": f"Bearer {token}"}
        # The banner comes before up's own agent has registered the node (404 until then).
        deadline = time.monotonic() + START_S
        while httpx.post(sync, json={"wait_s": 0}, headers=headers).status_code == 404:
            assert time.monotonic() < deadline, "the node never registered"
            time.sleep(0.1)

        def poll() -> None:
            answer = httpx.post(sync, json={"wait_s": 30}, headers=headers, timeout=60)
            answers.append(answer.status_code)

        parked = threading.Thread(target=poll)
        parked.start()
        time.sleep(1)
        stopping = time.monotonic()
    parked.join()
    assert answers == [200]
    assert time.monotonic() - stopping < 5  # the grace is 2 s; a poll slice is 1 s
