"""``gpufleet sim autoscale``: what autoscaling costs and saves, across its settings.

It replays the trace on the cluster file's nodes and pools once with every
pool fixed at its ``max_nodes``, then once per autoscaler setting (each
``--idle`` time by each ``--pending`` time, laid over the profile's
``[autoscale]`` table), and prints each run's cost, GPU-hours, mean JCT and
nodes created, with the cost and JCT over the fixed run's. ``--out DIR``
writes ``autoscale.json``, ``autoscale.csv`` and ``autoscale.png`` (cost
against mean JCT); ``--json`` ends stdout with the JSON. Bad input: one line
and exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.cli.sim_run import JsonOpt, SingleValueCommand, TraceOpt, check_out_dir
from gpufleet.core.model import InvalidSpec
from gpufleet.policies.autoscale import AutoscaleArgs
from gpufleet.policies.config import overlay
from gpufleet.sim.autoscale import (
    FIXED,
    Point,
    curve_json,
    fixed,
    point,
    ratios,
    settings,
    write_curve,
)
from gpufleet.sim.cluster import load_inputs
from gpufleet.sim.openb import TraceError
from gpufleet.sim.profile import (
    ProfileError,
    default_profile,
    load_profile,
    profile_from_dict,
    replay,
)

MAX_SETTINGS = 100


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _seconds(text: str, option: str) -> list[int]:
    """``300,600,1800``: whole seconds, zero or more, each once."""
    values: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit():
            _fail(f"{option}: {part!r} is not a whole number of seconds")
        if int(part) in values:
            _fail(f"{option}: {part} is given twice")
        values.append(int(part))
    return values


def register(app: typer.Typer) -> None:
    """Add ``autoscale`` to the ``sim`` command group."""

    @app.command(cls=SingleValueCommand)
    def autoscale(
        trace: TraceOpt,
        cluster: Annotated[
            str, typer.Option(metavar="FILE", help="A cluster .toml file with [[pools]].")
        ],
        profile: Annotated[
            Path | None,
            typer.Option(metavar="FILE", help="Policy TOML file; [autoscale] sets the rest."),
        ] = None,
        idle: Annotated[
            str, typer.Option(metavar="S,S,...", help="Idle times to try, in seconds.")
        ] = "300,600,1800",
        pending: Annotated[
            str, typer.Option(metavar="S,S,...", help="Pending times to try, in seconds.")
        ] = "60,300",
        out: Annotated[
            Path | None,
            typer.Option(metavar="DIR", help="Write autoscale.json, .csv and .png here."),
        ] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Replay a trace with the pools fixed at their maximum, then autoscaled."""
        idle_s, pending_s = _seconds(idle, "--idle"), _seconds(pending, "--pending")
        if len(idle_s) * len(pending_s) > MAX_SETTINGS:
            _fail(f"--idle x --pending: more than {MAX_SETTINGS} settings")
        try:
            p = load_profile(profile) if profile else default_profile()
            if out is not None:
                check_out_dir(out)
            nodes, pools, jobs = load_inputs(cluster, trace, elastic=True)
            base = p.policy.config.autoscale or AutoscaleArgs()
            points = [point(FIXED, None, replay(nodes, jobs, p, pools=fixed(pools)))]
            for args in settings(idle_s, pending_s, base):
                laid = {"autoscale": args.model_dump(), "sim": p.config.model_dump()}
                setting = profile_from_dict(overlay(p.data, laid), p.name)
                points.append(point(args.policy, args, replay(nodes, jobs, setting, pools=pools)))
            title = f"cost against mean JCT, {trace[:80]}"
            written = write_curve(points, out, title) if out else []
        except (TraceError, ProfileError, InvalidSpec, ValueError) as e:
            _fail(str(e))
        except OSError as e:
            _fail(f"{e.filename or out}: {e.strerror or e}")
        if as_json:
            typer.echo(json.dumps(curve_json(points)))
        else:
            Console().print(_table(points))
        if written:
            typer.echo(f"wrote {len(written)} files to {out}", err=True)


def _table(points: list[Point]) -> Table:
    r = ratios(points)
    table = Table(title="Autoscaling: cost against mean JCT (ratios: over the fixed cluster)")
    columns = ("run", "idle, s", "pending, s", "cost", "cost ratio", "GPU-hours", "mean JCT, s")
    for col in (*columns, "JCT ratio", "created"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for pt in points:
        ratio = r.get(pt.label, {"cost_ratio": 1.0, "jct_ratio": 1.0})
        table.add_row(
            pt.policy,
            "" if pt.idle_s is None else str(pt.idle_s),
            "" if pt.pending_s is None else str(pt.pending_s),
            f"{pt.cost:,.0f}",
            f"{ratio['cost_ratio']:.2f}",
            f"{pt.gpu_hours:,.0f}",
            f"{pt.mean_jct_s:,.0f}",
            f"{ratio['jct_ratio']:.2f}",
            f"{pt.nodes_created}",
        )
    return table
