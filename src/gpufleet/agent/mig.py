"""Carrying out a MIG layout change the controller asks for (``MigChange``).

The controller re-cuts a GPU only once nothing runs on it. Here the change
becomes ``nvidia-smi`` commands, as argument lists (never a shell): destroy
the GPU's compute and GPU instances, switch MIG mode where it changes, and
create the new GPU instances at their start slots with their default
compute instances (``-cgi PROFILE:START,... -C``).

They run only where both hold: NVML works on this host (real NVIDIA
hardware) and the agent was started with ``--mig-reconfigure``. Anywhere
else the change is a dry run: the commands are logged and reported, not
run. Either way the agent's declared inventory takes the new layout, so
the scheduler goes on with it, and the controller hears what was done
(``MigDone``).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Sequence

from gpufleet.api.agent_schemas import MigChange, MigDone

log = logging.getLogger("gpufleet.agent")

COMMAND_TIMEOUT_S = 120.0
Run = Callable[[list[str]], subprocess.CompletedProcess[str]]


def commands(gpu: int, was_on: bool, layout: Sequence[str] | None) -> list[list[str]]:
    """The ``nvidia-smi`` argument lists that take GPU ``gpu`` (MIG on or off before,
    ``was_on``) to ``layout`` (``PROFILE@START`` entries; None: MIG off)."""
    index = str(gpu)
    mig = ["nvidia-smi", "mig", "-i", index]
    out: list[list[str]] = []
    if was_on:  # compute instances first: a GPU instance holding one cannot go
        out += [[*mig, "-dci"], [*mig, "-dgi"]]
    if layout is None:
        if was_on:
            out.append(["nvidia-smi", "-i", index, "-mig", "0"])
        return out
    if not was_on:
        out.append(["nvidia-smi", "-i", index, "-mig", "1"])
    if layout:
        placed = ",".join(entry.replace("@", ":") for entry in layout)
        out.append([*mig, "-cgi", placed, "-C"])
    return out


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
    )


class MigApplier:
    """Applies changes for real (``hardware`` and ``enabled``) or as a dry run.

    ``hardware``: NVML found this host's GPUs; ``enabled``: the operator's
    opt-in (``--mig-reconfigure``); ``run`` runs one argument list.
    """

    def __init__(self, *, hardware: bool, enabled: bool, run: Run = _run) -> None:
        self.live = hardware and enabled
        self._run = run

    def apply(self, change: MigChange, was_on: bool) -> MigDone:
        """Carry out ``change`` (or dry-run it); never raises for a failed command."""
        argv = commands(change.gpu, was_on, change.layout)
        if not self.live:
            for a in argv:
                log.info("MIG dry run, GPU %d: would run %s", change.gpu, " ".join(a))
            return MigDone(gpu=change.gpu, layout=change.layout, commands=argv)
        for a in argv:
            log.info("MIG change, GPU %d: %s", change.gpu, " ".join(a))
            try:
                done = self._run(a)
            except (OSError, subprocess.TimeoutExpired) as e:
                return self._failed(change, argv, a, str(e))
            if done.returncode != 0:
                why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
                return self._failed(change, argv, a, why)
        return MigDone(gpu=change.gpu, layout=change.layout, commands=argv, applied=True)

    @staticmethod
    def _failed(change: MigChange, argv: list[list[str]], at: list[str], why: str) -> MigDone:
        error = f"{' '.join(at)}: {why}"
        log.error("MIG change of GPU %d failed: %s", change.gpu, error)
        return MigDone(
            gpu=change.gpu, layout=change.layout, commands=argv, applied=True, error=error
        )
