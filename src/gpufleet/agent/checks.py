"""Node health checks: custom scripts, shared mounts and the GPUs, with remediation.

A check script follows NHC's convention (LBNL Node Health Check): exit 0
means healthy; any other exit, a signal or running past its timeout means
unhealthy, and the last line it printed (stdout, else stderr) is the
reason. Scripts are the operator's, named on the agent's command line, and
run without a shell.

A mount check asks the file system at a path for its status in a thread, so
that a hung NFS or Lustre mount cannot hang the agent: a path that is not a
mount point, is gone, or does not answer within the timeout fails. A failed
mount is tried again with backoff (1 s, 2 s, 4 s...) before it counts, since
a busy file server often answers the second time.

GPUs whose readings are unhealthy in the reboot class (the GPU fell off the
bus, XID 79) fail the node; other unhealthy GPUs are named in the verdict
for the controller to mask, and the node keeps working. So does a fault of
the readings' source (NVML failing on a host whose driver lists GPUs).

When the node fails and a remediation command is configured, the failing
verdict goes out first (the controller drains the node), then the command
runs, once per failure (not at every check), and the checks run again at
once; that verdict says what the command did, so the controller's event
history shows each step.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpufleet.agent.health import needs_reboot
from gpufleet.api.agent_schemas import GpuReading, NodeHealth

log = logging.getLogger("gpufleet.agent")

SCRIPT_TIMEOUT_S = 60.0
MOUNT_TIMEOUT_S = 10.0
MOUNT_TRIES = 3
REASON_CHARS = 400


@dataclass(frozen=True)
class CheckSettings:
    """What to check, from the agent's command line."""

    scripts: tuple[tuple[str, ...], ...] = ()  # argv of each NHC-style script
    mounts: tuple[str, ...] = ()
    remediation: tuple[str, ...] = ()  # argv, run when the node fails
    interval_s: float = 60.0
    script_timeout_s: float = SCRIPT_TIMEOUT_S
    mount_timeout_s: float = MOUNT_TIMEOUT_S
    mount_tries: int = MOUNT_TRIES
    backoff_s: float = 1.0


def run_script(argv: Sequence[str], timeout_s: float) -> str:
    """Run one check; '' when healthy, else why not."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{argv[0]}: no answer within {timeout_s:g} s"
    except OSError as e:
        return f"{argv[0]}: {e.strerror or e}"
    if done.returncode == 0:
        return ""
    last = _last_line(done.stdout) or _last_line(done.stderr)
    how = f"exit {done.returncode}" if done.returncode > 0 else f"signal {-done.returncode}"
    return f"{argv[0]}: {last or how}"


_MOUNT_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="mount")


def check_mount(path: str, timeout_s: float) -> str:
    """'' when ``path`` is a mount point that answers within ``timeout_s``."""
    future = _MOUNT_POOL.submit(_mount_status, path)
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        return f"mount {path}: no answer within {timeout_s:g} s"


def _mount_status(path: str) -> str:
    try:
        os.statvfs(path)
    except OSError as e:
        return f"mount {path}: {e.strerror or e}"
    if not os.path.ismount(path):
        return f"mount {path}: not mounted"
    return ""


class NodeChecks:
    """Runs the checks and the remediation; ``sleep`` is the mount backoff's pause."""

    def __init__(
        self, settings: CheckSettings, sleep: Callable[[float], object] = time.sleep
    ) -> None:
        self.settings = settings
        self._sleep = sleep
        self._remediated = False  # once per failure: until a verdict passes again

    def run(self, gpus: Sequence[GpuReading], faults: Sequence[str] = ()) -> NodeHealth:
        """Check now; each of ``faults`` (found elsewhere) fails the node too."""
        problems = [*self._problems(gpus), *faults]
        if not problems:
            self._remediated = False
        return NodeHealth(
            ok=not problems,
            reason="; ".join(problems)[:REASON_CHARS],
            masked_gpus=[g.index for g in gpus if not g.healthy and not needs_reboot(g)],
            at=time.time(),
        )

    def remediate(self, health: NodeHealth) -> str:
        """Run the remediation command for a failing verdict, once per failure; what it
        did, or '' when it did not run."""
        argv = self.settings.remediation
        if health.ok or not argv or self._remediated:
            return ""
        self._remediated = True
        log.warning("node unhealthy (%s); running %s", health.reason, argv[0])
        failed = run_script(argv, self.settings.script_timeout_s * 10)
        return f"ran {argv[0]}: " + (failed.removeprefix(f"{argv[0]}: ") or "exit 0")

    def _problems(self, gpus: Sequence[GpuReading]) -> list[str]:
        s = self.settings
        found = [r for argv in s.scripts if (r := run_script(argv, s.script_timeout_s))]
        for path in s.mounts:
            reason = self._mount(path)
            if reason:
                found.append(reason)
        found += [f"gpu {g.index}: {g.health_reason}" for g in gpus if needs_reboot(g)]
        return found

    def _mount(self, path: str) -> str:
        s = self.settings
        pause = s.backoff_s
        for attempt in range(s.mount_tries):
            reason = check_mount(path, s.mount_timeout_s)
            if not reason or attempt == s.mount_tries - 1:
                return reason
            log.info("%s; trying again in %g s", reason, pause)
            self._sleep(pause)
            pause *= 2
        return ""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:REASON_CHARS] if lines else ""
