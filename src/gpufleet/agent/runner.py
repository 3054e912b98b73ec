"""Starting runs as real processes, killing them, and learning how they ended.

``Runner`` keeps one directory per run under ``STATE_DIR/runs`` and starts
each run under its own supervisor process (``gpufleet.agent.supervise``
explains why and what the files hold). Everything the runner knows is in
those directories, so a new ``Runner`` on the same state directory (a
restarted agent) finds the runs that still run and the ends not yet
reported, and kills nothing.

Runs are keyed by ``(job_id, run)``. ``start`` ignores a key it already
holds or has reported, and a report stays in ``reports()`` until
``acknowledge``, so every call may be repeated. A ``kill`` of a key never
started here ends it unstarted (a ``failed_to_start`` report, cause
``killed``), so that a start arriving after the kill (the controller's start
and a cancel crossing on the way) never runs the job.
Acknowledged runs leave a small marker in ``STATE_DIR/done`` for a week, so
that a late duplicate of a start never runs a finished job twice.

A start waits (``start`` says False, and the controller asks again at its
next sync) while another run of the same job, or a run holding one of its
GPUs whole, still lives here: two runs of a job never overlap, even when the
controller's start of the new run comes before its kill of the old one has
taken effect (after an agent restart or a lost node).

A state directory that cannot be written (a full disk) stops nothing for
good: a launch that cannot be written down ends as a ``failed_to_start``
report with cause ``node_fail`` (not the job's doing: the controller
requeues it), a run's end that cannot be written down is reported from
memory, and ``fault`` says why until ``check_state_dir`` finds the directory
writable again.

The job's environment is the submitted one plus ``GPUFLEET_*`` variables,
their ``SLURM_*`` equivalents, and ``CUDA_VISIBLE_DEVICES`` listing the
assigned GPU (or MIG) UUIDs: empty when none are assigned, so that a CPU
job sees no GPU. When the agent runs as root, a run executes as its
submitting user (which must exist on the host), unless ``same_user`` is set.

A job gets ``GPUFLEET_CHECKPOINT_DIR`` (made by its supervisor, as the job's
user, after the working directory is found: never by root through a path
the user controls; the same directory for every run of the job) and
``GPUFLEET_CHECKPOINT_MARK``, a file in it that the job touches after each
complete checkpoint: ``checkpoints`` reports the mark's time, which the
controller's preemption cost model uses.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pwd
import re
import shutil
import signal
import sys
import threading
import time
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufleet.agent import supervise
from gpufleet.agent.supervise import read_json, signal_number, write_json
from gpufleet.api.agent_schemas import Checkpointed, JobLaunch, RunRef, RunReport

log = logging.getLogger("gpufleet.agent")

Key = tuple[str, int]

SAFE_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""Job ids that are also safe directory names ("123", "123_4")."""
DONE_TTL_S = 7 * 86400
DIR_LOCK_WAIT_S = 1.0
DEFAULT_WARN_BEFORE_S = 60  # Slurm's --signal default when no @seconds is given
_SIGNAL_SPEC = re.compile(r"(B:)?([A-Za-z0-9]+)(?:@(\d+))?")
MASTER_PORT_BASE = 20000
MASTER_PORT_SPAN = 10000  # below Linux's ephemeral ports (32768 and up)
CHECKPOINT_MARK = ".checkpointed"
"""Touched by a job after each complete checkpoint; its time is the checkpoint's."""
PROBE_FILE = "probe.json"


class LaunchError(Exception):
    """A launch that cannot become a run (the message says why)."""


class StateDirBusy(Exception):
    """Another agent holds the state directory."""


def job_environment(launch: JobLaunch, node: str) -> dict[str, str]:
    """The environment a run gets: the job's own, then the scheduler's variables.

    The scheduler's variables win over same-named ones in the job's environment
    (which often carries a stale ``SLURM_JOB_ID`` from the submitting shell).
    """
    env = dict(launch.env)
    ids = {
        "JOB_ID": launch.job_id,
        "NODE": node,
        "RESTART_COUNT": str(launch.run - 1),
        "JOB_NAME": launch.name,
        "JOB_NODELIST": ",".join(launch.node_list or [node]),
        "JOB_NUM_NODES": str(len(launch.node_list) or 1),
        "NODEID": str(launch.node_rank),
    }
    if launch.array_job_id is not None and launch.array_task_id is not None:
        ids["ARRAY_JOB_ID"] = launch.array_job_id
        ids["ARRAY_TASK_ID"] = str(launch.array_task_id)
    for name, value in ids.items():
        env["GPUFLEET_" + name] = value
        env["SLURM_" + name] = value
    env["SLURM_JOBID"] = launch.job_id
    env["SLURMD_NODENAME"] = node
    if launch.cpu_milli > 0:
        env["SLURM_CPUS_ON_NODE"] = str(max(1, launch.cpu_milli // 1000))
    if launch.gpu_milli > 0:
        env.update(share_environment(launch))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(launch.gpu_uuids)
    env.update(rank_environment(launch, node))
    if launch.checkpoint_dir:
        env["GPUFLEET_CHECKPOINT_DIR"] = launch.checkpoint_dir
        env["GPUFLEET_CHECKPOINT_MARK"] = str(Path(launch.checkpoint_dir) / CHECKPOINT_MARK)
    return env


def share_environment(launch: JobLaunch) -> dict[str, str]:
    """A fractional run's share of its GPU, for the job and for CUDA MPS, which enforces
    the thread percentage and the memory limit where its daemon runs (the run sees its
    one GPU as device 0)."""
    env = {
        "GPUFLEET_GPU_MILLI": str(launch.gpu_milli),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, launch.gpu_milli // 10)),
    }
    if launch.gpu_memory_mib > 0:
        env["GPUFLEET_GPU_MEMORY_MIB"] = str(launch.gpu_memory_mib)
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={launch.gpu_memory_mib}M"
    return env


def rank_environment(launch: JobLaunch, node: str) -> dict[str, str]:
    """This node's place in its run under the names torchrun and MPI programs read.

    One task per node: the rank is the node's rank, the world the run's nodes.
    The first node is the rendezvous (``MASTER_ADDR``, so node names must
    resolve), on a port every node derives alike from the job id.
    """
    nodes = launch.node_list or [node]
    rank, size = str(launch.node_rank), str(len(nodes))
    port = MASTER_PORT_BASE + zlib.crc32(launch.job_id.encode()) % MASTER_PORT_SPAN
    return {
        "RANK": rank,
        "NODE_RANK": rank,
        "GROUP_RANK": rank,
        "WORLD_SIZE": size,
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": nodes[0],
        "MASTER_PORT": str(port),
        "OMPI_COMM_WORLD_RANK": rank,
        "OMPI_COMM_WORLD_SIZE": size,
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "PMI_RANK": rank,
        "PMI_SIZE": size,
        "SLURM_PROCID": rank,
        "SLURM_NTASKS": size,
    }


def parse_signal_spec(spec: str) -> tuple[int, int, bool]:
    """``[B:]SIG[@seconds]`` as (signal, seconds before the limit, to the batch process only)."""
    match = _SIGNAL_SPEC.fullmatch(spec.strip())
    if match is None:
        raise LaunchError(f"signal: {spec!r} is not [B:]SIG[@seconds]")
    batch, name, seconds = match.groups()
    try:
        number = signal_number(name)
    except ValueError as e:
        raise LaunchError(f"signal: {e}") from None
    return number, int(seconds) if seconds else DEFAULT_WARN_BEFORE_S, batch is not None


class Runner:
    """The runs of one node, kept in ``state_dir``. Safe to call from several threads.

    ``container`` is the node's container template, as words (``apptainer exec
    --nv {image}``): a launch naming an image runs as the template followed by
    its command; without a template such a launch fails to start.
    """

    def __init__(
        self,
        state_dir: Path | str,
        node: str,
        *,
        same_user: bool = False,
        container: tuple[str, ...] = (),
    ) -> None:
        # Jobs run in their own workdir: the script, run directory and checkpoint
        # mark they are handed must not be paths relative to the agent's.
        state_dir = Path(state_dir).absolute()
        self.node = node
        self.state_dir = state_dir
        self.fault = ""  # why the state directory cannot be written, '' when it can
        self.same_user = same_user or os.geteuid() != 0
        self.container = container  # the template's words, "{image}" among them
        self._runs = Path(state_dir) / "runs"
        self._done = Path(state_dir) / "done"
        for path in (self._runs, self._done):
            path.mkdir(parents=True, exist_ok=True)
        # Two agents on one state directory would each think the other's runs lost.
        self._dir_lock = os.open(Path(state_dir) / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
        # A child forked a moment ago holds the lock too until it execs: wait that out.
        deadline = time.monotonic() + DIR_LOCK_WAIT_S
        while not _try_lock(self._dir_lock):
            if time.monotonic() > deadline:
                os.close(self._dir_lock)
                raise StateDirBusy(f"{state_dir}: another agent is using it")
            time.sleep(0.02)
        # Runs as another user need to reach their own directory inside.
        self._runs.chmod(0o711)
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()
        self._active: set[Key] = set()
        self._ended: dict[Key, RunReport] = {}
        self._children: dict[Key, int] = {}  # supervisor PIDs this object started
        self._marks: dict[Key, str] = {}  # each run's checkpoint mark ("" for none)
        self._gpus: dict[Key, tuple[frozenset[str], bool]] = {}  # GPUs held, and if shared
        self._deferred: set[Key] = set()  # starts waiting for another run to end
        self._prune_done()
        for rundir in sorted(self._runs.iterdir()):
            job_id, _, run = rundir.name.rpartition(".")
            if SAFE_JOB_ID.fullmatch(job_id) and run.isdigit():
                self._active.add((job_id, int(run)))
        self.poll()

    @property
    def job_uid(self) -> int | None:
        """The uid every run here runs as when the agent runs jobs as itself; None when
        each run runs as its submitting user. (The controller serves a job's output
        file only when this account, or else that user, owns it.)"""
        return os.geteuid() if self.same_user else None

    # -- the agent's calls -------------------------------------------------------------

    def start(self, launch: JobLaunch) -> bool:
        """Start a run; False when this ``(job_id, run)`` is already held or was reported,
        or must wait for another run here to end (the module's docstring says which).

        A run that cannot start (bad spec, workdir, output directory, missing
        executable or interpreter, unknown user) ends as a ``failed_to_start``
        report; one the node cannot start (its state directory cannot be
        written, no supervisor can be spawned) as one with cause ``node_fail``,
        its files removed. This method itself does not fail for bad launches.
        """
        key = (launch.job_id, launch.run)
        with self._lock:
            if key in self._active or key in self._ended or self._is_done(key):
                return False
            if not SAFE_JOB_ID.fullmatch(launch.job_id):
                message = f"job id {launch.job_id!r} is not a safe name"
                self._ended[key] = _failed(key, message, cause="failed_to_start")
                return True
            blocker = self._blocker(launch)
            if blocker is not None:
                if key not in self._deferred:
                    self._deferred.add(key)
                    log.info("job %s run %d waits for job %s run %d to end", *key, *blocker)
                return False
            self._deferred.discard(key)
            rundir = self._dir(key)
            try:
                rundir.mkdir(mode=0o700)
            except FileExistsError:
                return False
            except OSError as e:
                self._node_failed(key, e)
                return True
            self._active.add(key)
            self._gpus[key] = (frozenset(launch.gpu_uuids), launch.gpu_milli > 0)
            try:
                user = self._user(launch.user)
                write_json(rundir / supervise.RUN_FILE, self._plan(launch, rundir))
                if user is not None:
                    _chown_tree(rundir, user)
                if launch.checkpoint_dir and user is not None:
                    _user_storage(launch, user)
                self._children[key] = self._spawn(rundir, user)
            except LaunchError as e:
                self._end_here(key, _status_json("failed_to_start", str(e), "failed_to_start"))
            except OSError as e:
                self._node_failed(key, e)
            return True

    def kill(self, job_id: str, run: int, sig: str, grace_s: int, reason: str = "") -> bool:
        """Ask a run's supervisor to send ``sig`` to the job, then SIGKILL after ``grace_s``.

        Return whether this was a new request: False for a run that already
        ended here or for the same request again (nothing is sent twice). A
        different request is sent, but never postpones an earlier SIGKILL.
        An unknown signal name is taken as TERM. A run never started here is
        ended unstarted (``poll`` reports it) and never starts after.
        """
        key = (job_id, run)
        with self._lock:
            if key in self._ended or self._is_done(key):
                return False
            if key not in self._active:
                return self._end_unstarted(key, reason)
            rundir = self._dir(key)
            if (rundir / supervise.STATUS_FILE).exists():
                return False  # ended; the next poll reports it
            try:
                signal_number(sig)
            except ValueError:
                sig = "TERM"
            request = {"signal": sig, "grace_s": max(0, grace_s), "reason": reason}
            if read_json(rundir / supervise.KILL_FILE) == request:
                return False
            write_json(rundir / supervise.KILL_FILE, request)
            # The supervisor reads kill.json once after writing proc.json, so
            # whichever of us goes second, the request is seen.
            proc = read_json(rundir / supervise.PROC_FILE)
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc["supervisor_pid"]), signal.SIGUSR1)
            return True

    def poll(self) -> list[RunReport]:
        """Collect runs that ended since the last call and return their reports. A run
        whose files cannot be read now is looked at again at the next call."""
        new: list[RunReport] = []
        with self._lock:
            for key in sorted(self._active):
                try:
                    report = self._ended_report(key)
                except OSError as e:
                    log.warning("job %s run %d: %s", *key, e)
                    continue
                if report is not None:
                    self._active.discard(key)
                    self._gpus.pop(key, None)
                    self._ended[key] = report
                    new.append(report)
            for key, pid in list(self._children.items()):
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(pid, os.WNOHANG) == (0, 0):
                        continue  # reap our own supervisors; re-attached ones are not ours
                del self._children[key]
        return new

    def snapshot(self) -> tuple[list[RunRef], list[RunReport]]:
        """``running()`` and ``reports()`` at one instant, so that a run that ends
        meanwhile is in exactly one of them (never neither: that reads as lost)."""
        with self._lock:
            return self._running(), [self._ended[k] for k in sorted(self._ended)]

    def checkpoints(self) -> list[Checkpointed]:
        """The latest checkpoint of each run held that has made one."""
        with self._lock:
            keys = sorted(self._active)
        out = []
        for key in keys:
            mark = self._marks.get(key)
            if mark is None:
                plan = read_json(self._dir(key) / supervise.RUN_FILE) or {}
                mark = self._marks[key] = plan.get("env", {}).get("GPUFLEET_CHECKPOINT_MARK", "")
            if not mark:
                continue
            try:
                at = os.stat(mark).st_mtime
            except OSError:  # none yet, or the storage is away: nothing to report
                continue
            out.append(Checkpointed(job_id=key[0], run=key[1], at=at))
        return out

    def running(self) -> list[RunRef]:
        """The runs this node holds now."""
        with self._lock:
            return self._running()

    def reports(self) -> list[RunReport]:
        """Ends not yet acknowledged by the controller."""
        with self._lock:
            return [self._ended[k] for k in sorted(self._ended)]

    def acknowledge(self, keys: Iterable[Key]) -> None:
        """Forget reported runs (the controller has recorded them); repeats are harmless."""
        with self._lock:
            for key in keys:
                self._marks.pop(key, None)
                self._deferred.discard(key)
                if self._ended.pop(key, None) is None:
                    continue
                if SAFE_JOB_ID.fullmatch(key[0]):
                    try:
                        (self._done / self._dir(key).name).touch()
                    except OSError:
                        # The run directory, kept, stops a late start as the marker would.
                        self.check_state_dir()
                        continue
                    shutil.rmtree(self._dir(key), ignore_errors=True)

    def check_state_dir(self) -> str:
        """Whether the state directory takes a write now: '' when it does, else why not,
        which ``fault`` then says too (until a later check passes)."""
        probe = Path(self.state_dir) / PROBE_FILE
        with self._probe_lock:
            try:
                write_json(probe, {"at": time.time()})
                probe.unlink()
                fault = ""
            except OSError as e:
                fault = f"state dir {self.state_dir}: {e.strerror or e}"
            if fault != self.fault:
                if fault:
                    log.error("%s: runs here cannot start or end until it can be written", fault)
                else:
                    log.warning("state dir %s can be written again", self.state_dir)
            self.fault = fault
        return fault

    def close(self) -> None:
        """Let another Runner use the state directory (the runs go on)."""
        with self._lock:
            if self._dir_lock >= 0:
                os.close(self._dir_lock)
                self._dir_lock = -1

    # -- internals ---------------------------------------------------------------------

    def _end_unstarted(self, key: Key, reason: str) -> bool:
        """Record a run killed before it started as ended, durably (its directory
        holds only the status, which a restarted Runner finds too)."""
        message = f"killed before it started ({reason or 'on request'})"
        if not SAFE_JOB_ID.fullmatch(key[0]):
            self._ended[key] = _failed(key, message, cause="killed")
            return True
        rundir = self._dir(key)
        try:
            rundir.mkdir(mode=0o700)
        except FileExistsError:
            return False  # left by an interrupted acknowledge: it ran and ended
        except OSError:
            self.check_state_dir()
            self._ended[key] = _failed(key, message, cause="killed")
            return True
        self._active.add(key)  # ended: the next poll reports it
        self._end_here(key, _status_json("failed_to_start", message, "killed"))
        return True

    def _end_here(self, key: Key, status: dict[str, Any]) -> None:
        """Write the status of a run that never started into its directory, for the next
        poll (and a restarted Runner) to report. When that cannot be written the report
        is kept in memory and the directory removed."""
        try:
            write_json(self._dir(key) / supervise.STATUS_FILE, status)
        except OSError:
            self.check_state_dir()
            self._active.discard(key)
            self._gpus.pop(key, None)
            self._ended[key] = RunReport(job_id=key[0], run=key[1], **status)
            shutil.rmtree(self._dir(key), ignore_errors=True)

    def _node_failed(self, key: Key, error: OSError) -> None:
        """The node could not start the run (not the job's doing): end it unstarted with
        cause ``node_fail`` (the controller requeues it), leaving no files behind. A
        restarted agent that finds none is simply asked to start it again."""
        self.check_state_dir()
        self._active.discard(key)
        self._gpus.pop(key, None)
        message = f"agent: cannot start the run: {error}"
        self._ended[key] = _failed(key, message, cause="node_fail")
        shutil.rmtree(self._dir(key), ignore_errors=True)

    def _blocker(self, launch: JobLaunch) -> Key | None:
        """A run here that ``launch`` must wait for: another run of its job, or a run
        that holds one of its GPUs, unless both take only a share of it."""
        mine = frozenset(launch.gpu_uuids)
        for key in sorted(self._active):
            if key[0] == launch.job_id:
                return key
            if mine:
                gpus, shared = self._holding(key)
                if mine & gpus and not (shared and launch.gpu_milli > 0):
                    return key
        return None

    def _holding(self, key: Key) -> tuple[frozenset[str], bool]:
        """The GPUs a run holds and whether as a share; read from ``run.json`` for a run
        this Runner found rather than started."""
        if key not in self._gpus:
            try:
                env = (read_json(self._dir(key) / supervise.RUN_FILE) or {}).get("env", {})
            except (OSError, ValueError):
                env = {}
            devices = env.get("CUDA_VISIBLE_DEVICES", "")
            gpus = frozenset(d for d in devices.split(",") if d)
            self._gpus[key] = (gpus, "GPUFLEET_GPU_MILLI" in env)
        return self._gpus[key]

    def _running(self) -> list[RunRef]:
        return [RunRef(job_id=j, run=r) for j, r in sorted(self._active)]

    def _dir(self, key: Key) -> Path:
        return self._runs / f"{key[0]}.{key[1]}"

    def _is_done(self, key: Key) -> bool:
        return (self._done / self._dir(key).name).exists()

    def _prune_done(self) -> None:
        horizon = time.time() - DONE_TTL_S
        for marker in self._done.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if marker.stat().st_mtime < horizon:
                    marker.unlink()

    def _user(self, name: str) -> pwd.struct_passwd | None:
        """The account to run as, or None to run as the agent's own user."""
        if self.same_user:
            return None
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            # Never fall back to root for a user this host does not know.
            raise LaunchError(f"user {name!r} does not exist on node {self.node}") from None
        return None if account.pw_uid == os.geteuid() else account

    def _plan(self, launch: JobLaunch, rundir: Path) -> dict[str, Any]:
        """What the supervisor needs (``run.json``)."""
        if (launch.argv is None) == (launch.script is None):
            raise LaunchError("launch: give exactly one of argv and script")
        if launch.script is not None:
            script = rundir / "script"
            fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(launch.script)
            argv = [str(script)] if launch.script.startswith("#!") else ["/bin/sh", str(script)]
        elif launch.argv:
            argv = list(launch.argv)
        else:
            raise LaunchError("launch: argv is empty")
        if launch.container is not None:
            argv = self._contained(launch, rundir) + argv
        warn = parse_signal_spec(launch.signal) if launch.signal else None
        return {
            "job_id": launch.job_id,
            "run": launch.run,
            "argv": argv,
            "workdir": launch.workdir,
            "env": job_environment(launch, self.node),
            "stdout": launch.stdout_path,
            "stderr": launch.stderr_path,
            "checkpoint_dir": launch.checkpoint_dir,
            "time_limit_s": launch.time_limit_s,
            "kill_grace_s": launch.kill_grace_s,
            "warn_signal": warn[0] if warn else None,
            "warn_before_s": warn[1] if warn else 0,
            "warn_batch_only": warn[2] if warn else False,
        }

    def _contained(self, launch: JobLaunch, rundir: Path) -> list[str]:
        """The container template's words with ``{image}``, ``{workdir}`` and ``{rundir}``
        filled in, word by word: the image name never reaches a shell."""
        if not self.container or launch.container is None:
            raise LaunchError(f"container: node {self.node} runs no containers")
        values = {"{image}": launch.container, "{workdir}": launch.workdir, "{rundir}": str(rundir)}
        out = []
        for word in self.container:
            for key, value in values.items():
                word = word.replace(key, value)
            out.append(word)
        return out

    def _spawn(self, rundir: Path, user: pwd.struct_passwd | None) -> int:
        """Start the run's supervisor in a session of its own; return its PID.

        posix_spawn rather than Popen: the supervisor outlives this object by
        design, and a Popen dropped while its process runs counts as a leak.
        Only the lock is passed down (every other descriptor is non-inheritable).
        """
        lock = os.open(rundir / supervise.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Held from before the supervisor exists; it inherits the lock.
            fcntl.flock(lock, fcntl.LOCK_EX)
            os.set_inheritable(lock, True)
            args = [sys.executable, "-m", "gpufleet.agent.supervise", str(rundir), str(lock)]
            log = str(rundir / supervise.LOG_FILE)
            return os.posix_spawn(
                sys.executable,
                args + ([user.pw_name] if user else []),
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                    (os.POSIX_SPAWN_DUP2, 1, 2),
                ],
                setsid=True,
            )
        finally:
            os.close(lock)

    def _ended_report(self, key: Key) -> RunReport | None:
        """The run's report if it has ended; a run whose supervisor vanished is ended here."""
        rundir = self._dir(key)
        status = read_json(rundir / supervise.STATUS_FILE)
        if status is None:
            if _lock_held(rundir / supervise.LOCK_FILE):
                return None
            # The supervisor may have written its status just before exiting.
            status = read_json(rundir / supervise.STATUS_FILE) or self._supervisor_lost(rundir)
            try:
                write_json(rundir / supervise.STATUS_FILE, status)
            except OSError:
                # Reported all the same; a restarted Runner would find the same end.
                self.check_state_dir()
        return RunReport(job_id=key[0], run=key[1], **status)

    def _supervisor_lost(self, rundir: Path) -> dict[str, Any]:
        """End a run whose supervisor died without a status: kill what is left of the job."""
        proc = read_json(rundir / supervise.PROC_FILE)
        log = _last_line(rundir / supervise.LOG_FILE)
        if proc is None:
            message = "the run's supervisor exited before starting the job"
            message += f": {log}" if log else ""
            return _status_json("failed_to_start", message, "failed_to_start")
        pgid = int(proc["pgid"])
        # A different process under the job's old PID means the number was reused.
        now_start = supervise.process_start(pgid)
        if now_start is None or now_start == proc.get("pid_start"):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        message = "the run's supervisor died; the job was killed"
        report = _status_json("signalled", message, "killed")
        report["signal"] = int(signal.SIGKILL)
        return report


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock_held(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)  # also releases the lock if we just took it


def _last_line(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:500] if lines else ""


def _user_storage(launch: JobLaunch, user: pwd.struct_passwd) -> None:
    """Make ``DIR/USER`` of a partition's checkpoint storage ``DIR/USER/JOBID`` for a
    run as ``user``, who may not write ``DIR``; the supervisor makes the rest as the user.

    Root makes that one directory and nothing else: by ``mkdirat`` in ``DIR``,
    then ``fchown`` of what an ``O_NOFOLLOW`` open of it finds, and only if it
    made it; one that was there must be the user's own (a link or another's
    directory fails the start). A checkpoint directory under the job's
    working directory is all the user's to make.
    """
    path = Path(launch.checkpoint_dir)
    parent = path.parent
    workdir = Path(launch.workdir)
    if parent.name != launch.user or path == workdir or workdir in path.parents:
        return
    try:
        base = os.open(parent.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                os.mkdir(parent.name, 0o700, dir_fd=base)
                made = True
            except FileExistsError:
                made = False
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(parent.name, flags, dir_fd=base)
            try:
                owner = os.fstat(fd).st_uid
                if made and owner == os.geteuid():
                    os.fchown(fd, user.pw_uid, user.pw_gid)
                elif owner != user.pw_uid:
                    raise LaunchError(f"checkpoint directory {parent}: not owned by {user.pw_name}")
            finally:
                os.close(fd)
        finally:
            os.close(base)
    except OSError as e:
        raise LaunchError(f"checkpoint directory {parent}: {e.strerror or e}") from None


def _chown_tree(rundir: Path, user: pwd.struct_passwd) -> None:
    for path in (rundir, *rundir.iterdir()):
        os.chown(path, user.pw_uid, user.pw_gid)


def _status_json(state: str, message: str, cause: str) -> dict[str, Any]:
    return {
        "state": state,
        "exit_code": None,
        "signal": None,
        "at": time.time(),
        "message": message,
        "cause": cause,
    }


def _failed(key: Key, message: str, *, cause: str) -> RunReport:
    return RunReport(job_id=key[0], run=key[1], **_status_json("failed_to_start", message, cause))
