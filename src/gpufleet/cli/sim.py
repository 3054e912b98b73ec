"""``gpufleet sim``: experiments that drive the scheduling core in virtual time."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from gpufleet.cli import sim_autoscale, sim_predict, sim_sweep
from gpufleet.cli.sim_run import SingleValueCommand, check_out_dir, register
from gpufleet.policies.registry import PLACEMENT, UnknownPolicy
from gpufleet.sim.fill import FillRun
from gpufleet.sim.openb import DEFAULT_NODES, DEFAULT_PODS, TraceError, bundled
from gpufleet.sim.report import FillSummary, summarize, write_outputs
from gpufleet.sim.sweep import SweepError, Trace, run_sweep

sim = typer.Typer(help="Simulate placement over cluster traces.", no_args_is_help=True)
register(sim)
sim_sweep.register(sim)
sim_predict.register(sim)
sim_autoscale.register(sim)

MAX_SEEDS = 10_000
_SEED_PART = re.compile(r"(\d+)(?:-(\d+))?")


class OptionError(ValueError):
    """An option value that cannot be used; the message names the option."""


def parse_seeds(text: str) -> list[int]:
    """``42``, ``42-51`` (inclusive) or a comma list of either, in the order given."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        match = _SEED_PART.fullmatch(part)
        if match is None:
            raise OptionError(f"--seeds: {part!r} is not a seed or a range like 42-51")
        low = int(match[1])
        high = int(match[2] or low)
        if high < low:
            raise OptionError(f"--seeds: range {part!r} runs backwards")
        if len(seeds) + high - low + 1 > MAX_SEEDS:
            raise OptionError(f"--seeds: more than {MAX_SEEDS} seeds")
        seeds.extend(range(low, high + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise OptionError(f"--seeds: seed {repeated[0]} is given twice")
    return seeds


def parse_policies(text: str) -> list[str]:
    """Comma-separated names from the placement registry, in the order given."""
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if not name:
            raise OptionError(f"--policy: empty name in {text!r}")
        if name not in PLACEMENT:
            raise OptionError(f"--policy: {UnknownPolicy(name)}")
        if names.count(name) > 1:
            raise OptionError(f"--policy: {name!r} is given twice")
    return names


def _fail(message: str) -> NoReturn:
    typer.echo("error: " + message.replace("\n", " "), err=True)
    raise typer.Exit(2)


FIRST_RUN_NOTE = "fill runs (the first compiles on a fresh install)"


@contextmanager
def _progress(total: int, console: Console | None = None) -> Iterator[Callable[[FillRun], None]]:
    """A callback that reports each finished run on stderr (or on ``console``).

    A terminal gets a live bar; anything else (a CI log, a pipe) gets one
    line per run, which reads better than a redrawn bar. Until the first run
    finishes the bar says that it may be compiling: on a fresh install that
    takes seconds with nothing else to show. (A pipe gets no such line: an
    error in the input must stay the only line on stderr.)
    """
    console = console or Console(stderr=True)
    if not console.is_terminal:
        count = 0

        def line(run: FillRun) -> None:
            nonlocal count
            count += 1
            console.print(
                f"[{count}/{total}] {run.policy} seed {run.seed}: "
                f"{run.at(100):.2f}% allocated at 100% arrived ({run.seconds:.1f} s)",
                markup=False,
                highlight=False,
            )

        yield line
        return
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(FIRST_RUN_NOTE, total=total)
        yield lambda run: bar.update(task, advance=1, description="fill runs")


def _level(level: int | None) -> str:
    return "none" if level is None else f"{level}%"


def _table(summaries: list[FillSummary], seeds: int) -> Table:
    table = Table(
        title=f"GPU allocation and fragmentation, % of capacity, mean of {seeds} seed(s)",
        caption="first gap: arrived % where allocation first trails by 1+ point (median); "
        "refused: % of pods arrived by 100% that found no place; first refusal: arrived % "
        "of the first (median); per request type in --json and curves.csv",
    )
    table.add_column("policy", no_wrap=True)
    headers = ("alloc @100%", "alloc @130%", "first gap", "frag @100%", "refused", "1st refusal")
    for header in (*headers, "s/run"):
        table.add_column(header, justify="right")
    for s in summaries:
        table.add_row(
            s.policy,
            f"{s.alloc_pct_at_100:.2f}",
            f"{s.alloc_pct_at_130:.2f}",
            _level(s.first_gap_level),
            f"{s.frag_pct_at_100:.2f}",
            f"{s.refused_pct:.2f}",
            _level(s.first_refusal_pct),
            f"{s.seconds_per_run:.1f}",
        )
    return table


@sim.command(cls=SingleValueCommand)
def fill(
    nodes: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Node list CSV (sn,cpu_milli,memory_mib,gpu,model) or a cluster file (.toml).",
            show_default=f"bundled {DEFAULT_NODES}",
        ),
    ] = None,
    pods: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Pod list CSV: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,mig_profile]",
            show_default=f"bundled {DEFAULT_PODS}",
        ),
    ] = None,
    policy: Annotated[
        str, typer.Option(help=f"Placement policies, comma-separated: {', '.join(PLACEMENT)}.")
    ] = "default",
    seeds: Annotated[str, typer.Option(help="Seeds: 42, 42-51, or a comma list of both.")] = "42",
    tune: Annotated[
        float,
        typer.Option(help="Arrive until GPU requests reach this multiple of GPU capacity."),
    ] = 1.3,
    as_json: Annotated[
        bool, typer.Option("--json", help="End stdout with one line of JSON results.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Write curves.csv, fill.png and placements-<policy>-<seed>.csv here.",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, metavar="N", help="Processes to run on.", show_default="one per CPU"),
    ] = None,
) -> None:
    """The FGD fill experiment: how much of the cluster each policy can allocate.

    Pods are sampled from the pod list with replacement until their GPU
    requests reach TUNE x capacity, shuffled, and placed one by one with no
    departures (Weng et al., USENIX ATC'23).
    """
    try:
        names = parse_policies(policy)
        seed_list = parse_seeds(seeds)
        if not 1.0 <= tune <= 5.0:
            raise OptionError(f"--tune: must be 1.0..5.0 so that load reaches 100%, got {tune}")
        if out is not None:
            # Fail on an unusable directory before minutes of simulation.
            check_out_dir(out)
        trace = Trace(nodes or bundled(DEFAULT_NODES), pods or bundled(DEFAULT_PODS))
        with _progress(len(names) * len(seed_list)) as on_done:
            runs = run_sweep(
                trace,
                names,
                seed_list,
                tune=tune,
                record=out is not None,
                workers=workers or os.cpu_count() or 1,
                on_done=on_done,
            )
        written = write_outputs(out, runs) if out is not None else []
    except (OptionError, TraceError, SweepError) as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"{e.filename or out}: {e.strerror or e}")

    summaries = summarize(runs)
    if as_json:
        results = {s.policy: s.as_json() for s in summaries}
        typer.echo(json.dumps({"results": results}))
    else:
        Console().print(_table(summaries, len(seed_list)))
    if written:
        typer.echo(f"wrote {len(written)} files to {out}", err=True)
