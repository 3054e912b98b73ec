"""A command group that imports some sub-apps only when they are run.

``gpufleet sim`` pulls in numba, scipy and matplotlib (seconds of start-up);
the controller commands need none of them, so ``sim`` is loaded the first
time a command line names it (or lists every command, as ``--help`` does).
"""

from __future__ import annotations

import importlib

import typer
from typer.core import TyperGroup

LAZY_APPS = {"sim": ("gpufleet.cli.sim", "sim"), "import": ("gpufleet.cli.importer", "importer")}
"""Command name -> (module, the typer.Typer in it)."""


class LazyGroup(TyperGroup):
    """A TyperGroup that adds the apps of ``LAZY_APPS`` on first use."""

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        lazy = [name for name in LAZY_APPS if name not in self.commands]
        return [*lazy, *super().list_commands(ctx)]

    def get_command(  # type: ignore[override]
        self, ctx: typer.Context, cmd_name: str
    ) -> typer.core.TyperCommand | None:
        if cmd_name in LAZY_APPS and cmd_name not in self.commands:
            module, attribute = LAZY_APPS[cmd_name]
            sub_app = getattr(importlib.import_module(module), attribute)
            group = typer.main.get_group(sub_app)
            group.name = cmd_name  # help lists a command by its own name
            self.add_command(group, cmd_name)
        return super().get_command(ctx, cmd_name)  # type: ignore[return-value]
