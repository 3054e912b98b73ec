"""Job commands: ``submit`` (sbatch), ``queue`` (squeue), ``show`` (scontrol show job),
``cancel`` (scancel), ``hold``, ``release`` and ``requeue`` (scontrol)."""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from typing import Annotated, Literal

import typer

from gpufleet.adapters.client import (
    ApiError,
    Client,
    ClientConfigError,
    ClientError,
    Unreachable,
)
from gpufleet.api.schemas import MAX_SCRIPT_BYTES, TERMINAL_STATES, JobOut, JobStateName
from gpufleet.cli.output import (
    JSON_HELP,
    STATE_CODES,
    compress_hostlist,
    connect,
    duration,
    fail,
    job_id,
    print_json,
    print_table,
    reporting,
    timestamp,
)
from gpufleet.cli.sbatch import option_summary, parse_submission

Json = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
_NAMES = {code: name for name, code in STATE_CODES.items()}
ACTIVE_STATES: tuple[JobStateName, ...] = tuple(
    s for s in STATE_CODES if s not in TERMINAL_STATES  # type: ignore[misc]
)
"""What ``queue`` lists without ``--state``: jobs that have not ended, as squeue does."""


NO_NAME = "(none)"
"""What the tables show for a job submitted without a name (through the API): a
column left empty would shift the ones after it for ``awk`` and ``cut``."""


def _load_script(name: str) -> str:
    """A script's text, its line endings as written (a DOS script is refused, not
    silently converted); ``-`` is standard input. Reads one byte past the cap, to see it."""
    if name == "-":  # Python's standard input translates no line endings
        return sys.stdin.read(MAX_SCRIPT_BYTES + 1)
    with open(name, encoding="utf-8", newline="") as f:
        return f.read(MAX_SCRIPT_BYTES + 1)


def submit(
    ctx: typer.Context,
    json_out: Json = False,
    parsable: Annotated[bool, typer.Option("--parsable", help="Print only the job id.")] = False,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait", "-W", help="Return when the job has ended, with its exit code (as sbatch)."
        ),
    ] = False,
) -> None:
    with reporting("submit"):
        spec = parse_submission(
            ctx.args,
            load_script=_load_script,
            cwd=os.getcwd(),
            environ=os.environ,
            now=datetime.now().astimezone(),
        )
        if wait and spec.array:
            fail("submit", "--wait: waits for one job; an array's tasks are separate jobs")
        with connect() as client:
            submitted = client.submit(spec)
            if json_out:
                print_json(submitted)
            elif parsable:
                typer.echo(submitted.job_id)
            else:
                typer.echo(f"Submitted batch job {submitted.job_id}")
            if wait:
                raise typer.Exit(_wait_for(client, submitted.job_id))


WAIT_POLL_S = 0.5


def _wait_for(client: Client, job_id: str) -> int:
    """Poll until the job has ended; its exit code, or 1 when it ended without one and failed."""
    while True:
        job = client.job(job_id)
        if job.state in TERMINAL_STATES:
            if job.exit_code is not None:
                return job.exit_code
            return 0 if job.state == "COMPLETED" else 1
        time.sleep(WAIT_POLL_S)


SUBMIT_HELP = (
    "Submit a batch script, like sbatch: gpufleet submit [OPTIONS] SCRIPT, or --wrap CMD.\n\n"
    "The script's #SBATCH and #GPUFLEET directives are read first; options given here "
    "override them. Options (see docs/cli.md):\n\n" + option_summary().replace("\n", "\n\n")
)


def _states(text: str | None) -> tuple[JobStateName, ...]:
    """``--state``: comma-separated codes (PD,R) or names (pending), or ``all``."""
    if text is None:
        return ACTIVE_STATES
    if text.lower() == "all":
        return tuple(STATE_CODES)  # type: ignore[arg-type]
    states: list[JobStateName] = []
    for part in text.split(","):
        name = _NAMES.get(part.upper(), part.upper())
        if name not in STATE_CODES:
            fail("queue", f"--state: {part!r} is not a job state (PD, R, CG, CD, F, CA, ...)")
        states.append(name)  # type: ignore[arg-type]
    return tuple(states)


def _split(text: str | None) -> set[str]:
    return {part for part in (text or "").split(",") if part}


def _elapsed(job: JobOut, now: float) -> float:
    if job.start_time is None:
        return 0
    return (job.end_time or now) - job.start_time


def _where(job: JobOut) -> str:
    """NODELIST(REASON): the nodes of a job that has run, else its reason in brackets."""
    if job.node_list:
        return compress_hostlist(job.node_list)
    return f"({job.reason or 'None'})"


def _start(job: JobOut) -> str:
    return timestamp(job.expected_start if job.state == "PENDING" else job.start_time)


def queue(
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Users, comma-separated.")
    ] = None,
    state: Annotated[
        str | None,
        typer.Option("--state", "-t", help="States: PD,R,CG,... or names; 'all' for every job."),
    ] = None,
    partition: Annotated[
        str | None, typer.Option("--partition", "-p", help="Partitions, comma-separated.")
    ] = None,
    me: Annotated[bool, typer.Option("--me", help="Only the jobs of the token's user.")] = False,
    json_out: Json = False,
) -> None:
    """List jobs like squeue: pending and running ones unless --state says otherwise.

    START is backfill's expected start for a pending job and the start of
    one that has run; NODELIST(REASON) shows a pending job's reason.
    """
    states = _states(state)
    partitions = _split(partition)
    with reporting("queue"), connect() as client:
        # The token says who is asking: its user need not be the login name.
        users = {client.whoami().user} if me else _split(user)
        # One value is filtered by the controller; several are filtered here.
        jobs = [
            job
            for job in client.jobs(
                user=next(iter(users)) if len(users) == 1 else None,
                partition=next(iter(partitions)) if len(partitions) == 1 else None,
                states=states,
            )
            if (not users or job.user in users) and (not partitions or job.partition in partitions)
        ]
    order = {name: k for k, name in enumerate(("RUNNING", "COMPLETING", "PENDING"))}
    jobs.sort(key=lambda j: (order.get(j.state, 3), _sort_key(j.job_id)))
    if json_out:
        print_json(jobs)
        return
    now = time.time()
    print_table(
        ("JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES", "START", "NODELIST(REASON)"),
        (
            (
                j.job_id,
                j.partition,
                j.name or NO_NAME,
                j.user,
                STATE_CODES[j.state],
                duration(_elapsed(j, now)),
                j.nodes,
                _start(j),
                _where(j),
            )
            for j in jobs
        ),
    )


def _sort_key(text: str) -> tuple[int, int]:
    array, _, task = text.partition("_")
    return int(array), int(task or -1)


def show(
    job: Annotated[str, typer.Argument(help="A job id, or an array task as 42_3.")],
    json_out: Json = False,
) -> None:
    """Show one job, like scontrol show job."""
    with reporting("show"), connect() as client:
        found = client.job(job_id("show", job))
    if json_out:
        print_json(found)
        return
    gpus = (
        f"{found.gpus_per_node} per node"
        if found.gpus_per_node
        else f"{found.gpu_milli} milli-GPU"
        if found.gpu_milli
        else f"MIG {found.mig_profile}"
        if found.mig_profile
        else "none"
    )
    rows = [
        ("JobId", found.job_id),
        ("JobName", found.name or NO_NAME),
        ("User", found.user),
        ("Account", found.account),
        ("Partition", found.partition),
        ("QOS", found.qos),
        # A server older than hold kinds says only held: its holds are all user holds.
        ("JobState", found.state + (f" ({found.hold or 'user'} hold)" if found.held else "")),
        ("Reason", found.reason or "None"),
        ("Priority", "N/A" if found.priority is None else f"{found.priority:g}"),
        ("Nodes", found.nodes),
        ("GPUs", gpus),
        ("CPUsPerNode", found.cpus_per_task),
        ("MemoryMiB", found.mem_mib or "default"),
        ("TimeLimit", duration(found.time_limit_s or None)),
        ("SubmitTime", timestamp(found.submit_time)),
        ("StartTime", timestamp(found.start_time)),
        ("ExpectedStart", timestamp(found.expected_start)),
        ("EndTime", timestamp(found.end_time)),
        ("NodeList", compress_hostlist(found.node_list) or "None"),
        # As Slurm's EXIT:SIGNAL: 0:9 for a run SIGKILL ended, 0:0 where nothing ended yet.
        ("ExitCode", f"{found.exit_code or 0}:{found.signal or 0}"),
        ("Restarts", found.restart_count),
        ("WorkDir", found.workdir),
        ("StdOut", found.stdout_path),
        ("StdErr", found.stderr_path),
    ]
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        typer.echo(f"{key.ljust(width)}  {value}")


def _act(action: str, jobs: list[str], reason: str = "") -> None:
    """Apply ``action`` to each job; report each failure and exit with the worst status."""
    worst = 0
    ids = [job_id(action, j) for j in jobs]
    with reporting(action), connect() as client:
        for job in ids:
            try:
                client.job_action(job, action, reason)  # type: ignore[arg-type]
            except (Unreachable, ClientConfigError):
                raise  # the same for every job: say it once
            except ClientError as e:
                typer.echo(f"error: {action} {job}: {e}", err=True)
                worst = max(worst, e.exit_code)
    if worst:
        raise typer.Exit(worst)


Jobs = Annotated[list[str], typer.Argument(help="Job ids; an array job id means every task.")]


def cancel(
    jobs: Jobs,
    reason: Annotated[str, typer.Option("--reason", help="Recorded in the job's history.")] = "",
) -> None:
    """Cancel jobs, like scancel: pending ones never start, running ones are killed."""
    _act("cancel", jobs, reason)


def hold(jobs: Jobs) -> None:
    """Keep pending jobs from starting, like scontrol hold."""
    _act("hold", jobs)


def release(jobs: Jobs) -> None:
    """Let held jobs be scheduled again, like scontrol release."""
    _act("release", jobs)


def requeue(jobs: Jobs) -> None:
    """Stop running jobs (or take finished ones) and queue them again, like scontrol requeue."""
    _act("requeue", jobs)


FOLLOW_POLL_S = 1.0


def logs(
    job: Annotated[str, typer.Argument(help="A job id, or an array task as 42_3.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing as the job writes, until it ends.")
    ] = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="The job's stderr file.")] = False,
) -> None:
    """Print a job's output, read through the controller with the API's permissions.

    The controller reads the job's file where the job wrote it (a shared file
    system); with --follow, a job that has not started yet is waited for.
    """
    stream: Literal["stdout", "stderr"] = "stderr" if stderr else "stdout"
    offset = 0
    with reporting("logs"), connect() as client:
        wanted = job_id("logs", job)
        while True:
            try:
                chunk = client.output(wanted, stream, offset)
            except ApiError as e:
                # No file yet: the job waits to start (or the file is not visible here).
                if not follow or e.status != 404 or client.job(wanted).state in TERMINAL_STATES:
                    raise
                time.sleep(FOLLOW_POLL_S)
                continue
            sys.stdout.write(chunk.data)
            sys.stdout.flush()
            offset = chunk.next_offset
            if not follow or chunk.eof:
                return
            if chunk.next_offset == chunk.offset:
                time.sleep(FOLLOW_POLL_S)


def register(app: typer.Typer) -> None:
    """Add the job commands to ``app``."""
    app.command(
        "submit",
        help=SUBMIT_HELP,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )(submit)
    for command in (queue, show, logs, cancel, hold, release, requeue):
        app.command()(command)
