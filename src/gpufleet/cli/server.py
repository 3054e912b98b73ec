"""``gpufleet server``: run the controller and its HTTP API in one process.

The store (SQLite in the data directory unless ``--db`` names another) is
migrated on start. SIGTERM or SIGINT stops accepting connections, lets
requests in flight finish (long polls are cut after a few seconds: agents
retry), then stops the scheduling loop after its last commit. Heavy imports
wait until the command runs, so the rest of the command line starts fast.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from gpufleet.controller.config import Built
    from gpufleet.controller.setup import ControllerSetup

DEFAULT_PORT = 6817  # slurmctld's port: a scheduler's controller, where admins look first
SHUTDOWN_GRACE_S = 5


def _fail(message: str) -> NoReturn:
    typer.echo("error: " + message.replace("\n", " "), err=True)
    raise typer.Exit(2)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound here so a busy port is one clear line."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        _fail(f"--host/--port: cannot listen on {host}:{port}: {e.strerror or e}")
    sock.listen(2048)
    return sock


def _check_document(document: dict[str, Any]) -> None:
    """Refuse a configuration document that would not load, naming its first bad key."""
    from gpufleet.controller.config import ConfigError, config_from_dict
    from gpufleet.controller.errors import Invalid

    try:
        config_from_dict(document, "config").build("config")
    except ConfigError as e:
        key, _, message = e.problems[0].partition(": ")
        raise Invalid(f"body.patch.{key}", message or key) from None


def controller_setup(built: Built) -> ControllerSetup:
    """The controller's settings from a checked configuration."""
    from gpufleet.controller.setup import ControllerSetup, PrincipalSpec

    server = built.server
    return ControllerSetup(
        profile_factory=built.profile,
        nodes=built.nodes,
        qos=built.qos,
        partitions=built.partitions,
        accounts=built.accounts,
        reservations=built.reservations,
        principals=[
            PrincipalSpec(name=p.name, role=p.role, account=p.default_account or "")
            for p in built.principals.values()
        ],
        default_partition=built.default_partition,
        default_qos=built.default_qos,
        interval_s=server.interval_s,
        heartbeat_interval_s=server.heartbeat_interval_s,
        heartbeat_timeout_s=server.heartbeat_timeout_s,
        kill_grace_s=server.kill_grace_s,
        validate_config=_check_document,
    )


def server(
    config: Annotated[
        Path, typer.Option("--config", help="the controller's TOML configuration file")
    ],
    data: Annotated[Path, typer.Option("--data", help="the data directory (created if needed)")],
    db: Annotated[
        str | None,
        typer.Option("--db", help="a store URL, e.g. postgresql+psycopg://...; default SQLite"),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="the address to listen on")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="the port to listen on")
    ] = DEFAULT_PORT,
) -> None:
    """Run the controller: scheduling loop, store and HTTP API, until SIGTERM or Ctrl-C."""
    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from gpufleet.adapters.store.store import sqlite_url
    from gpufleet.api.app import create_app
    from gpufleet.controller.config import ConfigError, load_config
    from gpufleet.controller.service import Controller

    try:
        built = load_config(config).build(str(config))
    except ConfigError as e:
        _fail(str(e))
    try:
        data.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _fail(f"--data: {data}: {e.strerror or e}")
    sock = _listen(host, port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    controller = Controller(setup=controller_setup(built), db_url=db or sqlite_url(data))
    try:
        controller.start()
    except SQLAlchemyError as e:
        sock.close()
        _fail(f"{'--db' if db else '--data'}: cannot open the store: {str(e).splitlines()[0]}")
    try:
        app = create_app(controller, max_body_bytes=built.server.max_payload_bytes)
        bound_host, bound_port = sock.getsockname()[:2]
        logging.getLogger("gpufleet.server").info(
            "listening on http://%s:%d (%s)", bound_host, bound_port, built.summary()
        )
        uvicorn.Server(
            uvicorn.Config(
                app,
                lifespan="off",
                log_level="warning",
                timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            )
        ).run(sockets=[sock])
    finally:
        controller.stop()
        sock.close()
