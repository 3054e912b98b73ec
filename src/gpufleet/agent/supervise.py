"""The supervisor of one run: ``python -m gpufleet.agent.supervise RUNDIR LOCK_FD``.

Every run the agent starts gets its own supervisor process, in a session of
its own. The supervisor starts the job's process (in a further session, so
that the job's process group holds the job and nothing else), enforces the
time limit, carries out kill requests, and writes how the run ended to a
file. Because it does not depend on the agent, the agent can stop, crash or
be upgraded without touching running jobs; a restarted agent finds its runs
again from the files below. Holding the job as a child is also the only way
to learn its exit status: a restarted agent is no longer anyone's parent.

The run directory holds:

``run.json``
    written by the agent before the start: argv, workdir, env, output paths,
    the checkpoint directory to make (as the job's user, once the workdir is
    found), time limit, kill grace, the ``--signal`` warning.
``lock``
    an ``flock`` the agent takes before starting the supervisor and hands
    over as ``LOCK_FD``, so it is held from before the supervisor exists
    until it exits: a free lock means no supervisor, with no PID reuse to
    guess about.
``proc.json``
    written by the supervisor once the job runs: its PID (also the process
    group), the job's start time, the supervisor's PID.
``kill.json``
    written by the agent to ask for a kill (signal, grace), followed by
    SIGUSR1 to the supervisor. The supervisor also reads it once after
    writing ``proc.json``, so a request made before then is not lost.
``status.json``
    written by the supervisor last: ``state`` (``exited``, ``signalled`` or
    ``failed_to_start``), ``exit_code``, ``signal``, ``at``, ``message`` and
    ``cause`` (``exited``, ``time_limit``, ``killed``, ``failed_to_start``
    or ``node_fail``: why it ended, which the exit alone does not tell when
    a job traps SIGTERM at its limit and exits 0).

Every file is replaced atomically, so a reader sees all of it or none. A
status that cannot be written (a full disk) is tried again until it can,
the lock held meanwhile; a ``proc.json`` that cannot be written ends the
job at once (no kill could reach it), as a ``node_fail``.
This module imports only the standard library: it starts once per run.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
LOCK_FILE = "lock"
PROC_FILE = "proc.json"
KILL_FILE = "kill.json"
STATUS_FILE = "status.json"
LOG_FILE = "supervise.log"
STATUS_RETRY_S = 5.0


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` atomically (write aside, fsync, rename); a failed write (a full
    disk) leaves ``path`` as it was and nothing beside it."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in ``path``, or None when there is no such file."""
    try:
        with open(path, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
    except FileNotFoundError:
        return None
    return data


def signal_number(spec: str | int) -> int:
    """A signal from ``"TERM"``, ``"SIGTERM"``, ``"15"`` or 15; ValueError if unknown."""
    text = str(spec).strip().upper()
    if text.isdigit():
        number = int(text)
        if number in {s.value for s in signal.Signals}:
            return number
        raise ValueError(f"unknown signal {spec!r}")
    name = text if text.startswith("SIG") else "SIG" + text
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {spec!r}") from None


def process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), to tell it from a later process
    that reuses the number; None when it does not exist or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces and parentheses.
    return int(stat.rpartition(")")[2].split()[19])


class StartFailure(Exception):
    """The job's process could not be started; the message says why."""


def _check_dir(what: str, path: str) -> None:
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except FileNotFoundError:
        raise StartFailure(f"{what}: directory {path} does not exist") from None
    except OSError as e:
        raise StartFailure(f"{what}: directory {path}: {e.strerror}") from None
    if not is_dir:
        raise StartFailure(f"{what}: {path} is not a directory")


def _checkpoint_dir(path: str) -> list[Path]:
    """Make the job's checkpoint directory (kept across runs), as the job's user:
    the supervisor has dropped to it, so a link the user placed leads nowhere
    the user could not write anyway. Return the directories it made, outermost first."""
    target = Path(path)
    missing = [p for p in (*reversed(target.parents), target) if not os.path.lexists(p)]
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        _remove_dirs(missing)
        raise StartFailure(f"checkpoint directory {path}: {e.strerror or e}") from None
    _check_dir(f"checkpoint directory {path}", path)
    return missing


def _remove_dirs(made: list[Path]) -> None:
    """Remove the directories a failed start made, innermost first, if still empty."""
    for path in reversed(made):
        with contextlib.suppress(OSError):
            path.rmdir()


def _open_output(stream: str, path: str) -> int:
    # Like Slurm, the directory must exist: creating it would hide a typo.
    _check_dir(f"{stream} {path}", os.path.dirname(path) or ".")
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StartFailure(f"{stream} {path}: {e.strerror}") from None


def _interpreter(path: str) -> str:
    try:
        with open(path, "rb") as f:
            first = f.readline(4096)
    except OSError:
        return ""
    return first[2:].decode(errors="replace").strip() if first.startswith(b"#!") else ""


def _not_found(program: str, workdir: str, env: Mapping[str, str]) -> str:
    """Why exec said ENOENT: no such program, or (for a file that exists) no such #!
    interpreter. Looked up as the child does: a path from the workdir, a name on PATH."""
    if "/" in program:
        path: str | None = os.path.join(workdir, program)
    else:
        path = shutil.which(program, path=env.get("PATH", os.defpath))
    if path is None:
        return f"{program}: command not found"
    if not os.path.exists(path):
        return f"{program}: no such file"
    return f"{program}: interpreter {_interpreter(path) or '?'} not found"


def _spawn(plan: Mapping[str, Any]) -> subprocess.Popen[bytes]:
    """Start the job's process in its own session; raise StartFailure with the reason.

    The checkpoint directory is made last, so that a start that fails makes none
    (one it made is removed again: a job that never ran leaves no directory behind).
    """
    workdir: str = plan["workdir"]
    _check_dir("workdir", workdir)
    out = _open_output("stdout", plan["stdout"])
    err = out
    made: list[Path] = []
    try:
        if plan["stderr"] != plan["stdout"]:
            err = _open_output("stderr", plan["stderr"])
        if plan.get("checkpoint_dir"):
            made = _checkpoint_dir(plan["checkpoint_dir"])
        return _popen(plan["argv"], workdir, plan["env"], out, err)
    except StartFailure:
        _remove_dirs(made)
        raise
    finally:
        os.close(out)
        if err != out:
            os.close(err)


def _popen(
    argv: list[str], workdir: str, env: Mapping[str, str], out: int, err: int
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    except FileNotFoundError as e:
        if e.filename not in (argv[0], None):  # the workdir, gone since it was checked
            raise StartFailure(f"{e.filename}: {e.strerror}") from None
        raise StartFailure(_not_found(argv[0], workdir, env)) from None
    except OSError as e:
        raise StartFailure(f"{argv[0]}: {e.strerror}") from None
    except ValueError as e:  # a NUL byte in an argument or the environment
        raise StartFailure(f"{argv[0]}: {e}") from None


class Supervisor:
    """Runs one job to its end and says how it ended (``run`` returns the status)."""

    def __init__(self, rundir: Path, plan: Mapping[str, Any]) -> None:
        self.rundir = rundir
        self.plan = plan
        self.message = ""
        self.cause = "exited"  # until the supervisor itself stops the job
        self.kill_at: float | None = None
        self.pid = 0

    def run(self) -> dict[str, Any]:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        # A handler (not SIG_IGN) so that the job, after exec, gets default dispositions.
        for sig in (signal.SIGCHLD, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _s, _f: None)
        try:
            proc = _spawn(self.plan)
        except StartFailure as e:
            return _status("failed_to_start", message=str(e), cause="failed_to_start")
        self.pid = proc.pid
        started = time.time()
        try:
            write_json(
                self.rundir / PROC_FILE,
                {
                    "pid": proc.pid,
                    "pgid": proc.pid,
                    "pid_start": process_start(proc.pid),
                    "started_at": started,
                    "supervisor_pid": os.getpid(),
                },
            )
        except OSError as e:
            # Without proc.json no kill could reach the job: stop it before it does anything.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            message = f"cannot record the job's start in {self.rundir}: {e.strerror or e}"
            return _status("failed_to_start", message=message, cause="node_fail")
        self._read_kill_request()
        self._wait(wake_r, time.monotonic())
        # The job's leader is a zombie now, so its group id cannot be reused:
        # end whatever it left behind, as Slurm ends a job's whole cgroup.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
        if code < 0:
            return _status("signalled", signal=-code, message=self.message, cause=self.cause)
        return _status("exited", exit_code=code, message=self.message, cause=self.cause)

    def _wait(self, wake_r: int, t0: float) -> None:
        """Return once the job's process has exited (without reaping it)."""
        limit = int(self.plan.get("time_limit_s") or 0)
        limit_at = t0 + limit if limit > 0 else None
        warn_sig = int(self.plan.get("warn_signal") or 0)
        warn_at = (
            max(t0, limit_at - int(self.plan.get("warn_before_s", 0)))
            if warn_sig and limit_at is not None
            else None
        )
        while not self._exited():
            now = time.monotonic()
            if limit_at is not None and now >= limit_at:
                limit_at = None
                reason = f"time limit reached ({limit} s)"
                self._kill(signal.SIGTERM, self.plan["kill_grace_s"], reason, "time_limit")
            if warn_at is not None and now >= warn_at:
                warn_at = None
                self._warn(warn_sig)
            if self.kill_at is not None and now >= self.kill_at:
                self.kill_at = None
                self._signal(signal.SIGKILL)
            deadlines = [d for d in (limit_at, warn_at, self.kill_at) if d is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready, _, _ = select.select([wake_r], [], [], timeout)
            if ready:
                for sig in os.read(wake_r, 512):
                    if sig == signal.SIGUSR1:
                        self._read_kill_request()
                    elif sig in (signal.SIGTERM, signal.SIGINT):
                        grace = self.plan["kill_grace_s"]
                        self._kill(signal.SIGTERM, grace, "supervisor stopped", "killed")

    def _exited(self) -> bool:
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, self.pid, flags) is not None

    def _read_kill_request(self) -> None:
        request = read_json(self.rundir / KILL_FILE)
        if request is not None:
            reason = request.get("reason") or "killed on request"
            try:
                sig = signal_number(request["signal"])
            except ValueError:
                sig = signal.SIGTERM  # the agent checks names; never ignore a kill
            self._kill(sig, int(request["grace_s"]), reason, "killed")

    def _kill(self, sig: int, grace_s: int, reason: str, cause: str) -> None:
        """Send ``sig`` to the job's group now and SIGKILL after ``grace_s``;
        a second request never postpones the first one's SIGKILL. The first
        request's ``reason`` and ``cause`` are the run's."""
        if self.cause == "exited":
            self.message, self.cause = reason, cause
        self._signal(sig)
        deadline = time.monotonic() + max(0, grace_s)
        if sig != signal.SIGKILL and (self.kill_at is None or deadline < self.kill_at):
            self.kill_at = deadline

    def _warn(self, sig: int) -> None:
        if self.plan.get("warn_batch_only"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
        else:
            self._signal(sig)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)


def _status(
    state: str,
    *,
    exit_code: int | None = None,
    signal: int | None = None,
    message: str = "",
    cause: str = "exited",
) -> dict[str, Any]:
    return {
        "state": state,
        "exit_code": exit_code,
        "signal": signal,
        "at": time.time(),
        "message": message,
        "cause": cause,
    }


def _become(user: str) -> None:
    """Drop from root to ``user`` (groups, then group, then user: the order matters)."""
    account = pwd.getpwnam(user)
    os.setgroups(os.getgrouplist(account.pw_name, account.pw_gid))
    os.setgid(account.pw_gid)
    os.setuid(account.pw_uid)


def main(argv: list[str]) -> int:
    """Supervise the run in ``argv[0]`` while holding the lock ``argv[1]`` (a file
    descriptor), as the user ``argv[2]`` when given (the agent runs as root then)."""
    if len(argv) not in (2, 3) or not argv[1].isdigit():
        print("usage: python -m gpufleet.agent.supervise RUNDIR LOCK_FD [USER]", file=sys.stderr)
        return 2
    rundir = Path(argv[0])
    _lock_fd = int(argv[1])  # held open, never closed: the lock lives as long as we do
    if len(argv) > 2:
        _become(argv[2])
    plan = read_json(rundir / RUN_FILE)
    if plan is None:
        message = f"{rundir / RUN_FILE}: missing"
        status = _status("failed_to_start", message=message, cause="failed_to_start")
    else:
        status = Supervisor(rundir, plan).run()
    write_status(rundir, status)
    return 0


def write_status(
    rundir: Path, status: Mapping[str, Any], sleep: Callable[[float], object] = time.sleep
) -> None:
    """Write the run's status, again every ``STATUS_RETRY_S`` while the state directory
    cannot take it (a full disk): the lock, held meanwhile, shows the run as ending
    to the agent, which reports how it really ended once the status is written."""
    while True:
        try:
            write_json(rundir / STATUS_FILE, status)
            return
        except OSError:
            if not rundir.is_dir():
                raise  # the run directory is gone: no one would read it
            sleep(STATUS_RETRY_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
