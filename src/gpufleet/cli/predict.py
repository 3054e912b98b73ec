"""``gpufleet predict report``: how far the live controller's runtime estimates were off.

It asks the controller (operators) for the predictor's error over time: per
slice of the finished jobs by submit time, the estimates' mean absolute
error, their median error relative to the runtime and how often they fell
short, beside the same errors of the time limits, the figures
``gpufleet sim predict`` prints for a replay. ``--json`` ends stdout with
one JSON object. Bad input: one line and exit status 2.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.output import JSON_HELP, connect, print_json, print_table, reporting
from gpufleet.controller.views import ErrorFigures

predict = typer.Typer(help="The runtime predictor of the live controller.", no_args_is_help=True)


def _row(name: str, e: ErrorFigures) -> tuple[str, ...]:
    return (
        name,
        f"{e.jobs:,}",
        f"{e.mae_s:,.0f}",
        f"{e.median_error_pct:,.0f}",
        f"{e.under_pct:.0f}",
        f"{e.limit_mae_s:,.0f}",
        f"{e.limit_median_error_pct:,.0f}",
    )


@predict.command()
def report(
    buckets: Annotated[
        int, typer.Option(min=1, max=1000, help="Slices of the finished jobs by submit time.")
    ] = 10,
    json_out: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Show how far the runtime estimates were off, over time, against the limits."""
    with reporting("predict report"), connect() as client:
        errors = client.prediction_report(buckets=buckets)
    if json_out:
        print_json(errors)
        return
    columns = ("SUBMITTED", "JOBS", "MAE_S", "ERROR_%", "SHORT_%", "LIMIT_MAE_S", "LIMIT_ERROR_%")
    rows = [_row(f"{b.from_s / 3600:.1f}-{b.to_s / 3600:.1f} h", b) for b in errors.buckets]
    print_table(columns, [*rows, _row("all", errors.overall)])
