"""``gpufleet up``: a whole cluster of one machine, controller and agent in one process.

Everything lives in the data directory, created on the first run and
reused after (delete it to start over):

``controller.toml``
    the controller's configuration: one admin principal, defaults elsewhere.
``node.toml``
    this machine as the cluster's one node, ``local``: its CPUs and memory,
    and its GPUs as NVML finds them (one known model). A machine without
    NVIDIA GPUs gets two *demo* L4 GPUs (labelled ``demo = "true"``): they
    do not exist, but they let queues, GPU requests and preemption be tried
    on a laptop; a job on them sees made-up UUIDs in
    ``CUDA_VISIBLE_DEVICES``. A machine whose GPUs NVML cannot read, or of
    mixed or unknown models, gets a CPU-only node and a line asking to
    declare its GPUs in this file.
``gpufleet.db``, ``admin.token`` (mode 0600), ``agent.token``, ``agent/``
    the store, the tokens, and the agent's runs.

Jobs run as the user running ``gpufleet up``. Stopping (Ctrl-C or SIGTERM)
stops the API, the agent and the scheduling loop; running jobs go on under
their supervisors and the next ``gpufleet up`` on the same directory finds
them again.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from gpufleet.cli.agent import node_agent
from gpufleet.cli.output import fail
from gpufleet.cli.server import DEFAULT_PORT, exit_quietly, listen

NODE = "local"
DEMO_GPUS = '{ model = "L4", count = 2, nvlink = "none" }'
STOP_GRACE_S = 2

CONTROLLER_TOML = """\
# The controller's configuration for `gpufleet up` (docs/configuration.md).
# Edit freely: it is read at every start.

[server]
heartbeat_interval_s = 5

# Backfill, as Slurm's default sched/backfill: a short job may start ahead
# of a waiting one when it does not delay that job's planned start.
[policy.backfill]
mode = "easy"

[[principals]]
name = "admin"
role = "admin"
"""


def _node_toml(gpus_found: int, found: dict[str, Any] | None = None) -> tuple[str, str]:
    """This machine's inventory file, and a line describing it; ``found`` is the node
    NVML discovered (``agent.discover.discovered_group``), when it could."""
    cpus = os.cpu_count() or 1
    memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    lines = [
        "# This machine as the one node of `gpufleet up` (docs/cluster-file.md).",
        "[[nodes]]",
        f'names = "{NODE}"',
        f"cpu_milli = {cpus * 1000}",
        f"memory_mib = {memory_mib}",
    ]
    what = f"{cpus} CPUs, {memory_mib // 1024} GiB"
    if found is not None and "gpus" in found:
        g = found["gpus"]
        lines.insert(1, "# GPUs as NVML found them.")
        lines.append(
            f'gpus = {{ model = "{g["model"]}", count = {g["count"]}, '
            f"memory_mib = {g['memory_mib']}, numa = {g['numa']}, nvlink = {g['nvlink']} }}"
        )
        what += f", {g['count']} {g['model']} GPUs (found through NVML)"
    elif gpus_found:
        lines.insert(1, f"# This host has {gpus_found} NVIDIA GPUs: declare them (gpus = ...).")
        what += f"; declare its {gpus_found} NVIDIA GPUs in node.toml, then run up again"
    else:
        lines.insert(1, "# DEMO GPUs: this host has none; these two do not exist.")
        lines += ['labels = { demo = "true" }', f"gpus = {DEMO_GPUS}"]
        what += ", 2 demo L4 GPUs (no GPU found: they do not exist)"
    return "\n".join(lines) + "\n", what


def _discovered(nvml: Any) -> dict[str, Any] | None:
    """This machine as NVML sees it, or None (no NVML, or GPUs of mixed or unknown models)."""
    if nvml is None:
        return None
    from gpufleet.agent.discover import discover, discovered_group

    try:
        return discovered_group(discover(nvml), NODE)
    except ValueError:
        return None


def _secret_file(path: Path, make: Callable[[], str]) -> str:
    """The token in ``path``, or a new one from ``make()`` written there (mode 0600)."""
    if path.exists():
        return path.read_text().strip()
    secret = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    return secret


def up(
    data: Annotated[
        Path, typer.Option("--data", help="the data directory (created if needed)")
    ] = Path("gpufleet-data"),
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="the API's port (0: any free one)")
    ] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="the address to listen on")] = "127.0.0.1",
) -> None:
    """Run a one-machine cluster: the controller, its API and this machine's agent."""
    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from gpufleet.adapters.store import Store, sqlite_url
    from gpufleet.adapters.store.store import private_dir
    from gpufleet.agent.daemon import Refused
    from gpufleet.agent.inventory import InventoryError, nvidia_gpu_count, read_inventory
    from gpufleet.agent.runner import Runner, StateDirBusy
    from gpufleet.agent.telemetry import load_nvml
    from gpufleet.api.app import create_app
    from gpufleet.api.routers.agents import stop_long_polls
    from gpufleet.controller.config import ConfigError, load_config
    from gpufleet.controller.scaling import served_at
    from gpufleet.controller.service import Controller
    from gpufleet.controller.setup import setup_from_config
    from gpufleet.controller.tokens import issue_token

    try:
        private_dir(data)  # mode 0700: the store and the token files
        data = data.resolve()
        config = data / "controller.toml"
        if not config.exists():
            config.write_text(CONTROLLER_TOML)
        inventory = data / "node.toml"
        described = ""
        nvml, _ = load_nvml()
        if not inventory.exists():
            text, described = _node_toml(nvidia_gpu_count(), _discovered(nvml))
            inventory.write_text(text)
    except OSError as e:
        fail("--data", f"{data}: {e.strerror or e}")
    try:
        loaded = load_config(config)
        built = loaded.build(str(config))
    except ConfigError as e:
        fail(str(config), "; ".join(e.problems))
    try:
        declared = read_inventory(inventory, nvml=nvml)
    except InventoryError as e:
        fail("", str(e))
    try:
        runner = Runner(data / "agent", declared.node.name, same_user=True)
    except StateDirBusy:
        fail("--data", f"{data}: another gpufleet up is using it")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per sync
    url = sqlite_url(data)
    try:
        store = Store(url)
        try:
            store.migrate()
            _secret_file(
                data / "admin.token",
                lambda: (
                    issue_token(
                        store, name="up", user="admin", role="admin", node=None, now=time.time()
                    ).token
                ),
            )
            node_token = _secret_file(
                data / "agent.token",
                lambda: (
                    issue_token(
                        store,
                        name="up-agent",
                        user=f"node-{declared.node.name}",
                        role="node",
                        node=declared.node.name,
                        now=time.time(),
                    ).token
                ),
            )
        finally:
            store.close()
    except (SQLAlchemyError, OSError) as e:
        fail("--data", f"cannot prepare the store: {str(e).splitlines()[0]}", 1)
    sock = listen(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    api = f"http://{bound_host}:{bound_port}"
    setup = served_at(setup_from_config(built, loaded.to_dict()), api)
    controller = Controller(setup=setup, db_url=url)
    try:
        controller.start()
    except SQLAlchemyError as e:
        sock.close()
        fail("--data", f"cannot open the store: {str(e).splitlines()[0]}", 1)
    agent = node_agent(declared, runner, server=api, token=node_token, nvml=nvml)
    refused: list[Refused] = []

    def run_agent() -> None:
        try:
            agent.run()
        except Refused as e:
            refused.append(e)
            logging.getLogger("gpufleet.agent").error("the controller refused the agent: %s", e)

    thread = threading.Thread(target=run_agent, name="agent", daemon=True)
    try:
        app = create_app(controller, max_body_bytes=built.server.max_payload_bytes)

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: FrameType | None) -> None:
                agent.stop()  # so that it does not sync again once answered
                # Parked long polls (this agent's and any other's) answer within
                # a second, inside the grace, instead of being cancelled.
                stop_long_polls(app)
                super().handle_exit(sig, frame)

        thread.start()
        _welcome(api, data, declared.node.name, described or f"as declared in {inventory}")
        # uvicorn re-raises the signal it stopped on under the handler found
        # before it: this one unwinds through the finally below and exits 0.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, exit_quietly)
        Server(
            uvicorn.Config(
                app, lifespan="off", log_level="warning", timeout_graceful_shutdown=STOP_GRACE_S
            )
        ).run(sockets=[sock])
    except SystemExit:
        pass  # the signal handler's way out of uvicorn: a normal stop
    finally:
        agent.stop()
        thread.join(STOP_GRACE_S)
        controller.stop()
        sock.close()
    typer.echo("gpufleet stopped; running jobs go on, and the next gpufleet up finds them")


def _welcome(api: str, data: Path, node: str, described: str) -> None:
    typer.echo(
        f"gpufleet is up: the API is at {api}, the data in {data}\n"
        f"  node {node}: {described}\n"
        "Submit from another shell:\n"
        f"  export GPUFLEET_URL={api}\n"
        f"  export GPUFLEET_TOKEN=$(cat {data / 'admin.token'})\n"
        "  gpufleet submit --wrap 'echo hi'\n"
        "  gpufleet queue\n"
        f"Or open the dashboard, {api}/ui/, and paste the admin token.\n"
        "Stop with Ctrl-C."
    )
