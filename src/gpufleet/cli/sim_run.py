"""``gpufleet sim run`` and ``gpufleet sim compare``: replay a trace under policy files.

``run`` replays one trace under one policy file and prints a summary table
(with ``--json``, one JSON object as the last line of stdout). ``compare``
replays the same trace under several policy files and shows them side by
side. ``--out DIR`` writes per-job CSV, the time series, per-group metrics
and an HTML report with its PNGs. Bad input ends with one line
``error: ...`` on stderr and exit status 2, before any replay where the
input allows (an unwritable ``--out``, an option given twice). A metric
over no jobs shows as ``n/a``, and a replay where some job never started
ends with one ``warning: ...`` line on stderr, as does a profile whose
ordering cannot order the trace as it seems (SJF over jobs without limits).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperCommand, TyperOption

from gpufleet.core.model import InvalidSpec
from gpufleet.sim.cluster import load_inputs
from gpufleet.sim.driver import SimResult
from gpufleet.sim.htmlreport import write_report
from gpufleet.sim.labels import NOT_MEASURED_NOTE, SUMMARY_ROWS
from gpufleet.sim.labels import metric_cell as metric_cell  # re-exported for sim sweep
from gpufleet.sim.metrics import (
    by_group,
    never_started,
    node_failed_jobs,
    summarize,
    write_tables,
)
from gpufleet.sim.openb import TraceError
from gpufleet.sim.profile import (
    ProfileError,
    SimProfile,
    check_nodes,
    check_pools,
    default_profile,
    load_profile,
    ordering_warning,
    replay,
)

ClusterOpt = Annotated[
    str,
    typer.Option(
        metavar="openb|FILE",
        help="'openb' (the bundled openb node list), a cluster .toml file, or a node list CSV.",
    ),
]
TraceOpt = Annotated[
    str,
    typer.Option(
        metavar="FORMAT:PATH[,K=V...]",
        help="A format (openb, swf, tiresias, philly, gavel, pai, sacct, generic, history), "
        ":PATH and its options "
        "as ,KEY=VALUE (see docs/traces.md); or synthetic:K=V,...",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="End stdout with one line of JSON.")]
OutOpt = Annotated[
    Path | None,
    typer.Option(metavar="DIR", help="Write jobs/series/groups CSV and report.html here."),
]


def _fail(message: str) -> NoReturn:
    typer.echo("error: " + message.replace("\n", " "), err=True)
    raise typer.Exit(2)


def check_out_dir(out: Path) -> None:
    """Create ``out`` and prove it writable, so a bad ``--out`` fails before any work.

    Raises OSError naming the directory.
    """
    out.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise OSError(e.errno, f"cannot write files here ({e.strerror})", str(out)) from None


class SingleValueCommand(TyperCommand):
    """A command that refuses an option given twice instead of keeping the last value."""

    # ctx is the Context of the click that typer bundles and does not export.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        single = {
            name: param
            for param in self.params
            if isinstance(param, TyperOption) and not param.multiple and not param.is_flag
            for name in param.opts
        }
        seen: set[str] = set()
        for arg in args:
            if arg == "--":
                break
            name = arg.partition("=")[0]
            if name not in single:
                continue
            if name in seen:
                hint = ""
                if name == "--profile":
                    hint = "; to replay several profiles, use gpufleet sim compare"
                typer.echo(f"error: {name}: given more than once{hint}", err=True)
                raise typer.Exit(2)
            seen.update(single[name].opts)
        return super().parse_args(ctx, args)


@contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback drawing a bar on stderr when stderr is a terminal."""
    console = Console(stderr=True)
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(
        *columns, console=console, transient=True, disable=not console.is_terminal
    ) as bar:
        task = bar.add_task(label, total=total)
        step = max(1, total // 200)
        last = 0

        def update(done: int, _total: int) -> None:
            nonlocal last
            if done - last >= step or done == _total:
                last = done
                bar.update(task, completed=done)

        yield update


def _replay_all(
    cluster: str, trace: str, profiles: Sequence[SimProfile]
) -> tuple[list[SimResult], list[dict[str, Any]], list[str]]:
    """The replays, their summaries, and a warning per profile whose ordering misleads."""
    nodes, pools, jobs = load_inputs(cluster, trace)
    for p in profiles:
        # Before any replay: a later profile's error would wait for the earlier replays.
        check_pools(p, pools)
        check_nodes(p, nodes, pools)
    warnings = [w for p in profiles if (w := ordering_warning(p, jobs))]
    results, summaries = [], []
    for p in profiles:
        with _progress(len(jobs), p.name) as on_progress:
            result = replay(nodes, jobs, p, on_progress, pools)
        results.append(result)
        summaries.append(summarize(result, p.config.deadline_factor))
    return results, summaries, warnings


def _table(summaries: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="Replay summary")
    table.add_column("metric")
    for s in summaries:
        table.add_column(str(s["profile"]), justify="right")
    for key, label, fmt in SUMMARY_ROWS:
        table.add_row(label, *(metric_cell(s.get(key), fmt) for s in summaries))
    if any(s.get(key) is None for s in summaries for key, _, _ in SUMMARY_ROWS):
        table.caption = NOT_MEASURED_NOTE
    return table


def _never_ran_warning(results: Sequence[SimResult]) -> str | None:
    """One line naming, per profile, how many jobs never started and why; None if all did."""
    parts = []
    for r in results:
        idle = never_started(r)
        if idle:
            unschedulable = sum(1 for j in r.jobs if j.state == "unschedulable")
            unsubmitted = sum(1 for j in r.jobs if j.state == "unsubmitted")
            why = f"{unschedulable} fit no node of the cluster"
            if unsubmitted:
                why += f", {unsubmitted} never submitted: the job they follow never ended"
            parts.append(f"{r.profile}: {idle} of {len(r.jobs)} jobs never started ({why})")
    return "warning: " + "; ".join(parts) if parts else None


def _builtin_profile() -> SimProfile:
    """The policy file's defaults, labelled by what they are (ordering+placement[+backfill])."""
    profile = default_profile()
    c = profile.policy.config
    backfill = f"+{c.backfill.mode}-backfill" if c.backfill else ""
    profile.name = f"{c.ordering.plugin}+{c.placement.plugin}{backfill}"
    return profile


def _profiles(paths: Sequence[Path]) -> list[SimProfile]:
    profiles = [load_profile(p) for p in paths] or [_builtin_profile()]
    names = [p.name for p in profiles]
    for i, p in enumerate(profiles):
        if names.count(p.name) > 1:
            p.name = f"{p.name}-{i + 1}"  # two files of one name still get distinct columns
    return profiles


def _execute(
    cluster: str, trace: str, paths: Sequence[Path], out: Path | None, as_json: bool, compare: bool
) -> None:
    try:
        profiles = _profiles(paths)
        if out is not None:
            check_out_dir(out)
        results, summaries, warnings = _replay_all(cluster, trace, profiles)
        for s, r in zip(summaries, results, strict=True):
            s["node_failed"] = node_failed_jobs(r)
        written: list[Path] = []
        if out is not None:
            for r in results:
                written += write_tables(out, r, f"-{r.profile}" if compare else "")
            written += write_report(out, results, summaries, f"gpufleet replay of {trace}")
    except (TraceError, ProfileError, InvalidSpec) as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"{e.filename or out}: {e.strerror or e}")
    except ValueError as e:
        _fail(str(e))
    for s, r in zip(summaries, results, strict=True):
        s["by_account"] = by_group(r, "account")
        s["by_qos"] = by_group(r, "qos")
        s["by_partition"] = by_group(r, "partition")
    if as_json:
        payload = {"profiles": {s["profile"]: s for s in summaries}} if compare else summaries[0]
        typer.echo(json.dumps(payload))
    else:
        Console().print(_table(summaries))
    if written:
        typer.echo(f"wrote {len(written)} files to {out}", err=True)
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)
    never_ran = _never_ran_warning(results)
    if never_ran:
        typer.echo(never_ran, err=True)


def register(app: typer.Typer) -> None:
    """Add ``run`` and ``compare`` to the ``sim`` command group."""

    @app.command(cls=SingleValueCommand)
    def run(
        trace: TraceOpt,
        cluster: ClusterOpt = "openb",
        profile: Annotated[
            Path | None,
            typer.Option(
                metavar="FILE",
                help="Policy TOML file.",
                show_default="multifactor, best-fit, no backfill",
            ),
        ] = None,
        as_json: JsonOpt = False,
        out: OutOpt = None,
    ) -> None:
        """Replay a trace through the scheduling cycle in virtual time and summarise it."""
        _execute(cluster, trace, [profile] if profile else [], out, as_json, compare=False)

    @app.command(cls=SingleValueCommand)
    def compare(
        trace: TraceOpt,
        profile: Annotated[
            list[Path],
            typer.Option(metavar="FILE", help="Policy TOML file; give it once per profile."),
        ],
        cluster: ClusterOpt = "openb",
        as_json: JsonOpt = False,
        out: OutOpt = None,
    ) -> None:
        """Replay one trace under several policy files, side by side."""
        _execute(cluster, trace, profile, out, as_json, compare=True)
