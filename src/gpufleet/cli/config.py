"""``gpufleet config``: the controller's configuration file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

config = typer.Typer(help="Check the controller's configuration file.", no_args_is_help=True)


@config.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="The TOML file (see docs/configuration.md).")],
) -> None:
    """Check FILE and print a one-line summary; exit 2 with one line per problem."""
    # Imported here: the policy module loads numba and scipy, which the rest of
    # the command line need not pay for.
    from gpufleet.controller.config import ConfigError, load_config

    try:
        built = load_config(file).build(str(file))
    except ConfigError as e:
        for problem in e.problems:
            typer.echo(f"error: {file}: {problem}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{file}: ok ({built.summary()})")
