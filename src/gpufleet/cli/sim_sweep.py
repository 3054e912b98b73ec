"""``gpufleet sim sweep``: replay one trace at every point of a grid of profile settings.

The grid comes from a sweep spec (``sim.grid``). Points run on local
processes, or as Ray tasks with ``--ray ADDRESS``. Prints one table row per
point (with ``--json``, one JSON object as the last line of stdout);
``--out DIR`` writes ``sweep.csv``. Bad input ends with one line
``error: ...`` on stderr and exit status 2; a point whose ordering cannot
order the trace as it seems (SJF over jobs without limits) gets one
``warning: ...`` line.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from gpufleet.cli.sim_run import (
    ClusterOpt,
    JsonOpt,
    SingleValueCommand,
    TraceOpt,
    check_out_dir,
    metric_cell,
)
from gpufleet.core.model import InvalidSpec
from gpufleet.sim.grid import (
    GridError,
    Run,
    check_ray_address,
    load_spec,
    ordering_warnings,
    run_grid,
)
from gpufleet.sim.openb import TraceError

# Labels short enough that a row fits 80 columns (a pipe, a narrow terminal);
# the caption spells them out.
COLUMNS = (
    ("jct_mean_s", "JCT mean", "{:,.0f}"),
    ("jct_p95_s", "JCT p95", "{:,.0f}"),
    ("queue_mean_s", "queue", "{:,.0f}"),
    ("gpu_alloc_mean_pct", "GPU %", "{:.2f}"),
    ("jain_fairness", "Jain", "{:.3f}"),
    ("preemptions", "preempt", "{:,}"),
)
METRICS_NOTE = (
    "JCT mean, JCT p95, queue: job completion and mean queueing time, s; "
    "GPU %: mean share of GPUs allocated; Jain: Jain's fairness index"
)


def _fail(message: str) -> NoReturn:
    typer.echo("error: " + message.replace("\n", " "), err=True)
    raise typer.Exit(2)


def short_labels(keys: Sequence[str]) -> dict[str, str]:
    """Each grid key's last dotted part, or the whole key where two last parts clash."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {k: part if last.count(part) == 1 else k for k, part in zip(keys, last, strict=True)}


def _table(runs: Sequence[Run]) -> Table:
    keys = list(runs[0].settings)
    labels = short_labels(keys)
    renamed = [f"{labels[k]} = {k}" for k in keys if labels[k] != k]
    table = Table(
        title=f"Sweep: {len(runs)} grid points",
        # No outer or inner rules and single spaces between cells: that width
        # goes to the values.
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        caption="\n".join([*(["; ".join(renamed)] if renamed else []), METRICS_NOTE]),
    )
    for key in keys:
        # Values are the point's identity: keep them whole up to a width that
        # leaves the metrics room, and fold a longer one rather than cut it.
        width = max(len(labels[key]), *(len(str(run.settings[key])) for run in runs))
        table.add_column(labels[key], overflow="fold", min_width=min(width, 16))
    for _, label, _ in COLUMNS:
        table.add_column(label, justify="right", no_wrap=True)
    for run in runs:
        table.add_row(
            *(str(run.settings[k]) for k in keys),
            *(metric_cell(run.summary.get(key), fmt) for key, _, fmt in COLUMNS),
        )
    return table


def write_csv(out: Path, runs: Sequence[Run]) -> Path:
    """``sweep.csv``: one row per point, the settings, then every scalar of the summary."""
    keys = list(runs[0].settings)
    metrics = [k for k, v in runs[0].summary.items() if k != "profile" and not isinstance(v, dict)]
    path = out / "sweep.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([*keys, *metrics])
        for run in runs:
            writer.writerow([*(run.settings[k] for k in keys), *(run.summary[m] for m in metrics)])
    return path


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to the ``sim`` command group."""

    @app.command(cls=SingleValueCommand)
    def sweep(
        trace: TraceOpt,
        spec: Annotated[
            Path,
            typer.Option(
                metavar="FILE",
                help=r"Sweep spec TOML: a base profile and a \[grid] of values.",
            ),
        ],
        cluster: ClusterOpt = "openb",
        workers: Annotated[
            int | None,
            typer.Option(
                min=1, metavar="N", help="Local processes to run on.", show_default="one per CPU"
            ),
        ] = None,
        ray: Annotated[
            str | None,
            typer.Option(
                "--ray",
                metavar="ADDRESS",
                help="Run each point as a task on this Ray cluster ('local' starts one here).",
            ),
        ] = None,
        as_json: JsonOpt = False,
        out: Annotated[
            Path | None, typer.Option(metavar="DIR", help="Write sweep.csv here.")
        ] = None,
    ) -> None:
        """Replay one trace under every combination of the spec's grid values, in parallel."""
        try:
            grid = load_spec(spec)
            if out is not None:
                check_out_dir(out)
            if ray is not None:
                check_ray_address(ray)
            total = len(grid.points())
            console = Console(stderr=True)
            columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(
                *columns, console=console, transient=True, disable=not console.is_terminal
            ) as bar:
                task = bar.add_task("grid points", total=total)
                runs = run_grid(
                    cluster,
                    trace,
                    grid,
                    workers=workers or os.cpu_count() or 1,
                    ray_address=ray,
                    on_done=lambda done: bar.update(task, completed=done),
                )
            written = write_csv(out, runs) if out is not None else None
            warnings = ordering_warnings(cluster, trace, grid)
        except (GridError, TraceError, InvalidSpec) as e:
            _fail(str(e))
        except OSError as e:
            _fail(f"{e.filename or out}: {e.strerror or e}")
        if as_json:
            typer.echo(json.dumps({"runs": [r.as_json() for r in runs]}))
        else:
            Console().print(_table(runs))
        if written is not None:
            typer.echo(f"wrote {written}", err=True)
        for warning in warnings:
            typer.echo(f"warning: {warning}", err=True)
