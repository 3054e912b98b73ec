"""``gpufleet sim predict``: how far the runtime estimates were off, over a replay.

It replays the trace under the profile (whose ``[predict]`` table sets the
predictor; without one, the predictor's defaults) and prints, per slice of
the trace by submit time, the estimates' mean absolute error, their median
error relative to the runtime ("error") and how often they fell short,
beside the same errors of the time limits. ``--json`` ends stdout with one JSON object
(``prediction.prediction_error``'s). Bad input: one line and exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.cli.sim_run import ClusterOpt, JsonOpt, SingleValueCommand, TraceOpt
from gpufleet.core.model import InvalidSpec
from gpufleet.policies.config import overlay
from gpufleet.sim.cluster import load_inputs
from gpufleet.sim.openb import TraceError
from gpufleet.sim.prediction import prediction_error
from gpufleet.sim.profile import (
    ProfileError,
    default_profile,
    load_profile,
    profile_from_dict,
    replay,
)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _row(name: str, e: dict[str, Any]) -> list[str]:
    return [
        name,
        f"{e['jobs']:,}",
        f"{e['mae_s']:,.0f}",
        f"{e['median_error_pct']:,.0f}",
        f"{e['under_pct']:.0f}",
        f"{e['limit_mae_s']:,.0f}",
        f"{e['limit_median_error_pct']:,.0f}",
    ]


def register(app: typer.Typer) -> None:
    """Add ``predict`` to the ``sim`` command group."""

    @app.command(cls=SingleValueCommand)
    def predict(
        trace: TraceOpt,
        cluster: ClusterOpt = "openb",
        profile: Annotated[
            Path | None,
            typer.Option(metavar="FILE", help="Policy TOML file; [predict] sets the predictor."),
        ] = None,
        buckets: Annotated[
            int, typer.Option(min=1, max=1000, help="Slices of the trace by submit time.")
        ] = 10,
        as_json: JsonOpt = False,
    ) -> None:
        """Replay a trace and show how far the runtime estimates were off, over time."""
        try:
            p = load_profile(profile) if profile else default_profile()
            if p.policy.config.predict is None:  # the predictor's defaults
                p = profile_from_dict(overlay(p.data, {"predict": {}}), p.name)
            nodes, pools, jobs = load_inputs(cluster, trace)
            errors = prediction_error(replay(nodes, jobs, p, pools=pools), buckets)
        except (TraceError, ProfileError, InvalidSpec, ValueError) as e:
            _fail(str(e))
        except OSError as e:
            _fail(f"{e.filename}: {e.strerror or e}")
        if as_json:
            typer.echo(json.dumps(errors))
            return
        table = Table(title=f"runtime estimates against limits, {trace}")
        columns = ("submitted", "jobs", "MAE, s", "error, %", "short, %", "limit MAE, s")
        for col in (*columns, "limit error, %"):
            table.add_column(col, justify="right")
        for b in errors["buckets"]:
            table.add_row(*_row(f"{b['from_s'] / 3600:.1f}-{b['to_s'] / 3600:.1f} h", b))
        table.add_row(*_row("all", errors["overall"]))
        Console().print(table)
