"""``gpufleet agent``: run a node's agent until SIGTERM or Ctrl-C.

Stopping the agent leaves its jobs running (each has its own supervisor);
the next agent on the same ``--state-dir`` re-attaches to them. Heavy
imports wait until the command runs, so the rest of the command line
starts fast.
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from gpufleet.agent.checks import CheckSettings
    from gpufleet.agent.daemon import Agent
    from gpufleet.agent.inventory import Inventory
    from gpufleet.agent.runner import Runner

DEFAULT_INVENTORY = Path("/etc/gpufleet/node.toml")
DEFAULT_STATE_DIR = Path("/var/lib/gpufleet/agent")
STOP_WAIT_S = 2.0


def _fail(message: str) -> NoReturn:
    typer.echo("error: " + message.replace("\n", " "), err=True)
    raise typer.Exit(2)


def node_agent(
    declared: Inventory,
    runner: Runner,
    *,
    server: str,
    token: str,
    telemetry: Path | None = None,
    nvml: Any = None,
    checks: CheckSettings | None = None,
    mig_reconfigure: bool = False,
) -> Agent:
    """The agent of the declared node: it registers the node's group table and GPU UUIDs
    and sends GPU readings from NVML (``nvml`` when loaded already), else from
    ``telemetry`` (by default the ``.telemetry.toml`` file beside the inventory). MIG
    changes run ``nvidia-smi`` only with NVML and ``mig_reconfigure``, else dry-run."""
    from gpufleet.agent.checks import CheckSettings, NodeChecks
    from gpufleet.agent.daemon import Agent
    from gpufleet.agent.mig import MigApplier
    from gpufleet.agent.telemetry import open_telemetry, telemetry_path

    return Agent(
        server=server,
        token=token,
        node=declared.node.name,
        inventory=declared.group,
        gpu_uuids=declared.gpu_ids,
        telemetry=open_telemetry(
            declared.node, telemetry or telemetry_path(declared.source), nvml=nvml
        ),
        facts=declared.facts.as_json() if declared.facts else {},
        differences=declared.differences,
        checks=NodeChecks(checks or CheckSettings()),
        mig=MigApplier(hardware=nvml is not None, enabled=mig_reconfigure),
        runner=runner,
    )


def agent(
    server: Annotated[
        str, typer.Option("--server", envvar="GPUFLEET_URL", help="the controller's URL")
    ],
    token: Annotated[
        str,
        typer.Option(
            "--token",
            envvar="GPUFLEET_AGENT_TOKEN",
            help="this node's token (gpufleet token create --role node --node NAME)",
        ),
    ],
    inventory: Annotated[
        Path, typer.Option("--inventory", help="a cluster file declaring this node")
    ] = DEFAULT_INVENTORY,
    node: Annotated[
        str | None,
        typer.Option("--node", help="this node's name in the inventory (default: the host name)"),
    ] = None,
    state_dir: Annotated[
        Path, typer.Option("--state-dir", help="where the agent keeps its runs' state")
    ] = DEFAULT_STATE_DIR,
    telemetry: Annotated[
        Path | None,
        typer.Option(
            "--telemetry",
            help="GPU readings for a node without NVML (default: NAME.telemetry.toml beside "
            "the inventory NAME.toml)",
        ),
    ] = None,
    check: Annotated[
        list[str] | None,
        typer.Option(
            "--check",
            help="a health check command (NHC exit codes: 0 healthy); repeatable; "
            "split like a shell would, never run by one",
        ),
    ] = None,
    check_mount: Annotated[
        list[str] | None,
        typer.Option("--check-mount", help="a mount point that must answer; repeatable"),
    ] = None,
    remediate: Annotated[
        str | None,
        typer.Option("--remediate", help="a command to run when the node fails its checks"),
    ] = None,
    check_interval: Annotated[
        float, typer.Option("--check-interval", min=1.0, help="seconds between health checks")
    ] = 60.0,
    container: Annotated[
        str | None,
        typer.Option(
            "--container",
            help="the command that runs a job in its image, e.g. "
            "'apptainer exec --nv --bind {workdir} {image}' ({image}, {workdir}, {rundir})",
        ),
    ] = None,
    same_user: Annotated[
        bool,
        typer.Option(
            "--same-user",
            help="run every job as the agent's own user (by default, an agent run as root "
            "runs each job as its submitting user)",
        ),
    ] = False,
    mig_reconfigure: Annotated[
        bool,
        typer.Option(
            "--mig-reconfigure",
            help="re-cut MIG GPUs with nvidia-smi when the controller asks (only where NVML "
            "works); without it, or without NVML, a change is a dry run that logs the commands",
        ),
    ] = False,
) -> None:
    """Run this node's agent: register its inventory, then run the jobs the controller starts."""
    from gpufleet.adapters.client import ClientConfigError, check_token, check_url
    from gpufleet.agent.checks import CheckSettings
    from gpufleet.agent.daemon import Refused
    from gpufleet.agent.inventory import InventoryError, read_inventory
    from gpufleet.agent.runner import Runner, StateDirBusy
    from gpufleet.agent.telemetry import load_nvml

    # As the other commands do: found now, not as a traceback at the first request.
    try:
        check_url("--server", server)
        check_token("--token", token)
    except ClientConfigError as e:
        _fail(str(e))
    try:
        settings = CheckSettings(
            scripts=tuple(tuple(shlex.split(c)) for c in check or ()),
            mounts=tuple(check_mount or ()),
            remediation=tuple(shlex.split(remediate or "")),
            interval_s=check_interval,
        )
    except ValueError as e:
        _fail(f"--check/--remediate: {e}")
    try:
        template = tuple(shlex.split(container or ""))
    except ValueError as e:
        _fail(f"--container: {e}")
    if template and not any("{image}" in word for word in template):
        _fail("--container: the template must name {image}")
    if any(not argv for argv in settings.scripts):
        _fail("--check: an empty command")

    nvml, _ = load_nvml()
    try:
        declared = read_inventory(inventory, node, nvml)
    except InventoryError as e:
        _fail(f"--inventory: {e}")
    try:
        runner = Runner(
            state_dir,
            declared.node.name,
            same_user=same_user,
            container=template,
        )
    except OSError as e:
        _fail(f"--state-dir: {state_dir}: {e.strerror or e}")
    except StateDirBusy as e:
        _fail(f"--state-dir: {e}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per sync
    log = logging.getLogger("gpufleet.agent")
    for difference in declared.differences:
        log.warning("inventory %s differs from NVML: %s", inventory, difference)
    daemon = node_agent(
        declared,
        runner,
        server=server,
        token=token,
        telemetry=telemetry,
        nvml=nvml,
        checks=settings,
        mig_reconfigure=mig_reconfigure,
    )
    failure: list[Refused] = []
    stopping = threading.Event()

    def work() -> None:
        try:
            daemon.run()
        except Refused as e:
            failure.append(e)

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stopping.set()
        daemon.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    # The loop runs in a thread so that a signal stops the agent at once: a
    # long poll in flight is simply dropped (the jobs do not depend on it).
    thread = threading.Thread(target=work, name="agent", daemon=True)
    thread.start()
    try:
        while thread.is_alive() and not stopping.is_set():
            thread.join(0.5)
        thread.join(STOP_WAIT_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failure:
        where = {401: "--token", 403: "--token", 422: "--inventory"}.get(failure[0].status)
        _fail(f"{where or '--server'}: the controller refused the agent: {failure[0]}")
    log.info("stopped; jobs keep running")
