"""The ``gpufleet`` command line.

Bad input ends with one line on stderr, ``error: <where>: <what>``, and exit
status 2, never a traceback: the commands report their own input errors that
way, and ``main`` turns option-parsing errors into the same shape.
``-h`` is ``--help`` on every command, and a bare group (``gpufleet``,
``gpufleet sim``) prints its help and exits 0.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import Annotated, Any, Protocol, cast

import typer
from typer.core import TyperOption

from gpufleet.cli import accounting, agent, cluster, jobs, predict, server, token, up
from gpufleet.cli.config import config
from gpufleet.cli.lazy import LazyGroup
from gpufleet.cli.output import command_name

app = typer.Typer(
    name="gpufleet",
    help="GPU cluster scheduler: a controller, node agents, Slurm-style commands and a simulator.",
    no_args_is_help=True,
    add_completion=False,
    cls=LazyGroup,  # loads `sim` (numba, matplotlib) only when it is run
    # Subcommands inherit the help option names from the root context.
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpufleet {version('gpufleet')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """GPU cluster scheduler: a controller, node agents, Slurm-style commands and a simulator."""


_display_type_rich = getattr(TyperOption, "display_type_rich", None)


def _flag_takes_no_value(self: TyperOption, ctx: Any) -> str | None:
    # typer labels every option with its type, so a flag read `--json <bool>`
    # although it takes no value. (ctx is typer's vendored click Context.)
    assert _display_type_rich is not None
    return None if self.is_flag else _display_type_rich(self, ctx)


# Only where typer has this hook: help text is cosmetic, never a reason not to start.
if _display_type_rich is not None:
    TyperOption.display_type_rich = _flag_takes_no_value  # type: ignore[method-assign]

app.add_typer(config, name="config")
app.add_typer(token.token, name="token")
app.add_typer(predict.predict, name="predict")
app.command("server")(server.server)
app.command("agent")(agent.agent)
app.command("up")(up.up)
for module in (jobs, cluster, accounting):
    module.register(app)


class _Context(Protocol):
    command_path: str


class _ClickError(Protocol):
    exit_code: int
    ctx: _Context | None

    def format_message(self) -> str: ...


def _where(error: _ClickError) -> str:
    """The command a usage error is about, as the commands name themselves in
    their own errors: ``queue``, ``predict report``; ``gpufleet`` for the root."""
    return command_name(error.ctx.command_path if error.ctx is not None else "")


# Option-parsing errors are click's UsageError, which recent typer releases
# raise from their own copy of click; BadParameter is exported either way.
_UsageError = cast(
    type[Exception], next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    command = typer.main.get_command(app)
    try:
        status = command.main(args=argv, prog_name="gpufleet", standalone_mode=False)
    except _UsageError as e:
        error = cast(_ClickError, e)
        # A bare group raises NoArgsIsHelpError after printing its help: the
        # help was asked for, so that is success.
        if type(e).__name__ == "NoArgsIsHelpError":
            return 0
        line = f"error: {_where(error)}: {error.format_message()}"
        print(line.replace("\n", " "), file=sys.stderr)
        return error.exit_code
    except typer.Abort:
        return 130
    # Without standalone mode click returns the command's value on success
    # and the code of a typer.Exit otherwise.
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
