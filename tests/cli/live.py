"""``gpufleet up`` as a subprocess: the real controller, API and agent on 127.0.0.1.

``running_up`` starts ``gpufleet up`` on a fresh data directory and a free
port, waits for its banner, and stops it with SIGTERM (it must exit 0).
``SITE`` is a controller configuration with an operator, two users and two
partitions; written into the data directory first, ``gpufleet up`` uses it
instead of its own one-admin default. Tokens for the extra principals are
made through the API with the admin token ``gpufleet up`` writes.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gpufleet.api.schemas import TERMINAL_STATES

START_S = 60.0  # the first cycle compiles the placement kernels
STOP_S = 15.0

SITE = """\
[server]
interval_s = 1
heartbeat_interval_s = 5
kill_grace_s = 1

[[policy.partitions]]
name = "gpu"
nodes = ["local"]

[[policy.partitions]]
name = "debug"
nodes = ["local"]
default_time_s = 300
max_time_s = 600

[[policy.accounts]]
name = "lab"

[[principals]]
name = "admin"
role = "admin"

[[principals]]
name = "ops"
role = "operator"

[[principals]]
name = "ada"
accounts = ["lab"]

[[principals]]
name = "bob"
accounts = ["lab"]
"""

PRINCIPALS = {"ops": "operator", "ada": "user", "bob": "user"}


def gpufleet_env(**extra: str) -> dict[str, str]:
    """This environment with the interpreter's ``bin`` first on PATH, so ``gpufleet`` is
    the installed command of the Python running the tests."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, **extra}


def run_bash(script: str, cwd: Path, timeout_s: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``script`` under bash in ``cwd``, with
    ``gpufleet_env()``, in a process group of its own that is killed afterwards, so
    nothing it started (servers, agents, jobs) outlives it, whether it failed or not."""
    shell = subprocess.Popen(
        ["bash", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=gpufleet_env(),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = shell.communicate(timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.communicate()
    return shell.returncode, out, err


@dataclass
class Up:
    """A running ``gpufleet up``: its URL, data directory and a token per user."""

    url: str
    data: Path
    tokens: dict[str, str] = field(default_factory=dict)

    def api(self, who: str = "admin") -> httpx.Client:
        """An HTTP client for the API with ``who``'s token."""
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def env(self, who: str = "admin") -> dict[str, str]:
        """An environment for the ``gpufleet`` commands as ``who``."""
        return gpufleet_env(
            GPUFLEET_URL=self.url,
            GPUFLEET_TOKEN=self.tokens[who],
            XDG_CONFIG_HOME=str(self.data / "no-client-config"),
        )

    def wait_final(self, job_id: str, who: str = "admin", timeout_s: float = START_S) -> str:
        """The job's state once it has ended."""
        deadline = time.monotonic() + timeout_s
        with self.api(who) as api:
            while True:
                job = api.get(f"/v1/jobs/{job_id}").json()
                if job["state"] in TERMINAL_STATES:
                    return str(job["state"])
                assert time.monotonic() < deadline, (job_id, job["state"], job["reason"])
                time.sleep(0.1)


@contextmanager
def running_up(data: Path, config: str | None = None) -> Iterator[Up]:
    """``gpufleet up --data DATA --port 0`` until the block ends; ``config``, when given,
    is written as ``DATA/controller.toml`` first and its principals get tokens."""
    data.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (data / "controller.toml").write_text(config)
    log = (data.parent / f"{data.name}-up.log").open("w")
    argv = ["gpufleet", "up", "--data", str(data), "--port", "0"]
    up = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=log, text=True, env=gpufleet_env(), cwd=data
    )
    try:
        assert up.stdout is not None
        banner = ""
        deadline = time.monotonic() + START_S
        while "Stop with Ctrl-C." not in banner:
            assert time.monotonic() < deadline and up.poll() is None, banner
            banner += up.stdout.readline()
        url = re.search(r"export GPUFLEET_URL=(\S+)", banner)
        assert url is not None, banner
        running = Up(url[1], data, {"admin": (data / "admin.token").read_text().strip()})
        if config is not None:
            running.tokens |= make_tokens(running, PRINCIPALS)
        yield running
        up.send_signal(signal.SIGTERM)
        assert up.wait(STOP_S) == 0
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        up.stdout.close()  # type: ignore[union-attr]
        log.close()


def make_tokens(up: Up, roles: Mapping[str, str]) -> dict[str, str]:
    """A new token for each user in ``roles`` (user -> role), made by the admin."""
    tokens = {}
    with up.api("admin") as api:
        for user, role in roles.items():
            made = api.post("/v1/tokens", json={"name": f"test-{user}", "user": user, "role": role})
            assert made.status_code == 201, made.text
            tokens[user] = made.json()["token"]
    return tokens
