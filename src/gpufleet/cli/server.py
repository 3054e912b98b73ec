"""``gpufleet server``: run the controller and its HTTP API in one process.

The store (SQLite in the data directory unless ``--db`` names another) is
migrated on start. SIGTERM or SIGINT stops accepting connections, lets
requests in flight finish (agents' long polls answer within a second),
then stops the scheduling loop after its last commit. Heavy imports
wait until the command runs, so the rest of the command line starts fast.
"""

from __future__ import annotations

import logging
import signal
import socket
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from gpufleet.cli.output import fail

DEFAULT_PORT = 6817  # slurmctld's port: a scheduler's controller, where admins look first
SHUTDOWN_GRACE_S = 5


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` for uvicorn's ``sockets=``.

    Bound here, before the controller starts, so that a busy port or an
    unknown host is one line naming ``--port`` or ``--host`` (exit 2)
    instead of a traceback from the server. ``gpufleet up`` uses it too.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        fail("--host", f"cannot listen on {host}: {e.strerror or e}")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        fail("--port", f"cannot listen on {host}:{port}: {e.strerror or e}")
    return sock


def exit_quietly(signum: int, _frame: object) -> None:
    """A signal handler that raises ``SystemExit(0)``: install it before uvicorn runs.

    uvicorn shuts down gracefully on SIGTERM or SIGINT, then raises the signal
    again under the handler found before it started: this one, so the process
    unwinds through its ``finally`` (stopping the controller) and exits 0
    instead of dying of the signal.
    """
    raise SystemExit(0)


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

    from gpufleet.adapters.store.store import private_dir, sqlite_url
    from gpufleet.api.app import create_app
    from gpufleet.api.routers.agents import stop_long_polls
    from gpufleet.controller.config import ConfigError, load_config
    from gpufleet.controller.scaling import served_at
    from gpufleet.controller.service import Controller
    from gpufleet.controller.setup import setup_from_config

    try:
        loaded = load_config(config)
        built = loaded.build(str(config))
    except ConfigError as e:
        for problem in e.problems:
            typer.echo(f"error: {config}: {problem}", err=True)
        raise typer.Exit(2) from None
    try:
        private_dir(data)  # mode 0700: the store and the token files
    except OSError as e:
        fail("--data", f"{data}: {e.strerror or e}")
    sock = listen(host, port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    bound_host, bound_port = sock.getsockname()[:2]
    url = f"http://{bound_host}:{bound_port}"
    setup = served_at(setup_from_config(built, loaded.to_dict()), url)
    controller = Controller(setup=setup, db_url=db or sqlite_url(data))
    try:
        controller.start()
    except SQLAlchemyError as e:
        sock.close()
        fail("--db" if db else "--data", f"cannot open the store: {str(e).splitlines()[0]}", 1)
    try:
        app = create_app(controller, max_body_bytes=built.server.max_payload_bytes)
        logging.getLogger("gpufleet.server").info("listening on %s (%s)", url, built.summary())

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: FrameType | None) -> None:
                stop_long_polls(app)
                super().handle_exit(sig, frame)

        signal.signal(signal.SIGTERM, exit_quietly)
        Server(
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
