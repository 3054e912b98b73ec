"""Accounting commands: ``usage`` (sacct/sreport: GPU-hours) and ``fairshare`` (sshare)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.output import JSON_HELP, connect, fail, print_json, print_table, reporting
from gpufleet.cli.sbatch import parse_begin
from gpufleet.controller.views import UsageKey

Json = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
TIME_HELP = "YYYY-MM-DD[THH:MM[:SS]], HH:MM, now-7days, midnight, ..."


def _when(option: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(parse_begin(text, datetime.now().astimezone()))
    except ValueError as e:
        fail("usage", f"{option}: {e}")


def usage(
    starttime: Annotated[
        str | None,
        typer.Option("--starttime", "-S", help=f"From (default: the first job). {TIME_HELP}"),
    ] = None,
    endtime: Annotated[
        str | None, typer.Option("--endtime", "-E", help="Until, exclusive (default: now).")
    ] = None,
    by: Annotated[
        UsageKey, typer.Option("--by", help="Group by user, account, partition or qos.")
    ] = "user",
    json_out: Json = False,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            help="Write the finished jobs submitted in the range to FILE as history JSON "
            "Lines, for gpufleet sim run --trace history:FILE.",
        ),
    ] = None,
) -> None:
    """GPU-hours used over a time range, like sreport: runs are clipped to the range.

    A user sees its own usage; operators see everyone's.
    """
    start = _when("--starttime", starttime)
    end = _when("--endtime", endtime)
    if export is not None:
        if json_out:
            fail("usage", "--export writes JSON Lines itself: leave out --json")
        with reporting("usage"), connect() as client:
            history = client.usage_export(start=start, end=end)
        try:
            export.write_text(history)
        except OSError as e:
            fail("usage", f"--export: {export}: {e.strerror or e}")
        typer.echo(f"{len(history.splitlines())} finished jobs written to {export}")
        return
    with reporting("usage"), connect() as client:
        rows = client.usage(start=start, end=end, by=by)
    if json_out:
        print_json(rows)
        return
    print_table(
        (by.upper(), "GPU-HOURS", "JOBS", "RUNS"),
        ((r.key, f"{r.gpu_hours:.2f}", r.jobs, r.runs) for r in rows),
    )


def fairshare(json_out: Json = False) -> None:
    """Shares, decayed usage and fairshare factor of each association, like sshare."""
    with reporting("fairshare"), connect() as client:
        rows = client.fairshare()
    if json_out:
        print_json(rows)
        return
    print_table(
        ("ACCOUNT", "USER", "RAWSHARES", "NORMSHARES", "RAWUSAGE", "NORMUSAGE", "FAIRSHARE"),
        (
            (
                r.account,
                r.user or "",
                f"{r.shares:g}",
                f"{r.normalized_shares:.6f}",
                f"{r.usage:.0f}",
                f"{r.normalized_usage:.6f}",
                "" if r.factor is None else f"{r.factor:.6f}",
            )
            for r in rows
        ),
    )


def register(app: typer.Typer) -> None:
    """Add the accounting commands to ``app``."""
    for command in (usage, fairshare):
        app.command()(command)
