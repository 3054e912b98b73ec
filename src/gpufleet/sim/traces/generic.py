"""The generic trace schema: one job per row of a CSV (or a Parquet) file, with a mapping.

A file in gpufleet's own column names loads as it is. Any other table loads
through ``GenericOptions``: which column holds each field (``columns``), how
times are written (``time``, ``timezone``, ``origin``), the units of
durations, memory, CPUs and GPUs (``units``), and values for fields the file
has no column for (``constants``).

==========================  ==========================================
field                       meaning
==========================  ==========================================
``id``                      job id (no column: the row's position)
``submit_time``             when the job arrived (required)
``duration_s``              actual runtime, else ``end_time - start_time``
``start_time``, ``end_time`` when it ran, read only without ``duration_s`` (both)
``gpus``                    whole GPUs per task (default 0)
``gpu_milli``               a fraction of one shared GPU, 1..999
``cpu_milli``               milli-CPU per task (default 0)
``memory_mib``              memory per task in MiB (default 0)
``nodes``                   tasks of a gang, one per node (default 1)
``user``, ``account``,      names (default empty)
``qos``, ``partition``
``time_limit_s``            requested limit (empty: none)
``mig_profile``             a MIG profile such as ``1g.10gb``
``mig_count``               MIG instances (default 1 with a profile)
``gpu_models``              allowed GPU models, ``|``-separated
``preemptible``             true/false, yes/no or 1/0 (default false)
``priority_class``          high, normal or low (default normal)
``checkpoint_interval_s``   seconds between checkpoints (empty: none)
``after``                   id of the job this one follows (empty: none)
``think_s``                 seconds after that job's end it is submitted
==========================  ==========================================

A column no field takes is kept in the job's ``labels``. One that looks like
a misspelt field the file does not otherwise give (``gpu`` for ``gpus``) is
refused, since its values would be lost. Every problem of the file is
reported at once (``TraceProblems``), each naming the file, row and column;
a bad constant is one problem naming its option (``constants.FIELD``), before
any row is read.
A ``.parquet`` file holds the same columns; reading it needs pyarrow, which
gpufleet does not install, and its rows count from 1 without a header.
"""

from __future__ import annotations

import csv
import difflib
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.mig import unknown_profile
from gpufleet.core.model import MAX_AMOUNT, InvalidSpec, Request
from gpufleet.sim.openb import TraceError, open_text
from gpufleet.sim.traces.fields import TraceProblems, count, repeated_ids, seconds
from gpufleet.sim.traces.record import (
    TraceJob,
    by_submit,
    follow_problems,
    gpu_share,
    priority_class_problem,
    whole_gpus,
)

TIMES = ("submit_time", "start_time", "end_time")
FIELDS = (
    "id",
    "submit_time",
    "duration_s",
    "start_time",
    "end_time",
    "gpus",
    "gpu_milli",
    "cpu_milli",
    "memory_mib",
    "nodes",
    "user",
    "account",
    "qos",
    "partition",
    "time_limit_s",
    "mig_profile",
    "mig_count",
    "gpu_models",
    "preemptible",
    "priority_class",
    "checkpoint_interval_s",
    "after",
    "think_s",
)
DurationUnit = Literal["s", "ms", "min", "h", "d"]
MemoryUnit = Literal["B", "KB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "TiB"]
CpuUnit = Literal["milli", "cores", "percent"]
DURATION_UNITS: dict[str, float] = {"s": 1.0, "ms": 0.001, "min": 60.0, "h": 3600.0, "d": 86400.0}
MEMORY_UNITS: dict[str, float] = {  # in MiB
    "B": 1 / 2**20,
    "KB": 1e3 / 2**20,
    "KiB": 1 / 2**10,
    "MB": 1e6 / 2**20,
    "MiB": 1.0,
    "GB": 1e9 / 2**20,
    "GiB": 2.0**10,
    "TB": 1e12 / 2**20,
    "TiB": 2.0**20,
}
CPU_UNITS: dict[str, float] = {"milli": 1.0, "cores": 1000.0, "percent": 10.0}


class Units(BaseModel):
    """The unit of each field that takes one; the defaults are the schema's own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    duration_s: DurationUnit = "s"
    time_limit_s: DurationUnit = "s"
    checkpoint_interval_s: DurationUnit = "s"
    think_s: DurationUnit = "s"
    memory_mib: MemoryUnit = "MiB"
    cpu_milli: CpuUnit = "milli"
    gpus: Literal["count", "percent"] = "count"
    """percent: 100 is one GPU; below 100 a share of one, above whole GPUs rounded up."""


def _known_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {value!r} (e.g. UTC, Asia/Shanghai)") from None
    return value


TimeZone = Annotated[str, AfterValidator(_known_zone)]
"""An IANA time zone name, checked when the options are read."""

_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_ANY: frozenset[str] = frozenset()
_LOOKALIKE = 0.8  # difflib ratio above which a column reads as a misspelt field


class GenericOptions(BaseModel):
    """How a table's columns map onto a job (``docs/traces.md``, "Generic CSV")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    columns: dict[str, str] = {}
    """field -> the file's column holding it; unmapped fields use their own name."""
    time: Literal["s", "ms", "iso"] = "s"
    """how submit, start and end times are written: seconds, milliseconds or ISO 8601."""
    timezone: TimeZone = "UTC"
    """zone of ISO times written without an offset."""
    origin: Literal["first"] | float | None = None
    """seconds subtracted from every time; ``first``: the earliest submit time.
    None: 0 for numbers, ``first`` for ISO times."""
    units: Units = Units()
    """field -> unit; default seconds, MiB, milli-CPU and a GPU count."""
    constants: dict[str, str | int | float | bool] = {}
    """field -> the value every job takes, for a field the file has no column for."""
    gpus_per_node: int | None = Field(None, gt=0)
    """with it, a job wider than a node becomes a gang of whole nodes."""

    @field_validator("columns", "constants")
    @classmethod
    def _known_fields(cls, value: dict[str, object]) -> dict[str, object]:
        for name in value:
            if name not in FIELDS:
                raise ValueError(f"{name}: not a field (known: {', '.join(FIELDS)})")
        return value

    @field_validator("origin", mode="before")
    @classmethod
    def _origin(cls, value: object) -> object:
        # One message for any bad value, rather than one per member of the union.
        if value is None or value == "first":
            return value
        try:
            number = float(value) if isinstance(value, str | int | float) else math.nan
        except ValueError:
            number = math.nan
        if isinstance(value, bool) or not -MAX_AMOUNT <= number <= MAX_AMOUNT:
            raise ValueError(
                f"must be 'first' or a number of seconds within ±{MAX_AMOUNT}, got {value!r}"
            )
        return number

    def column(self, field: str) -> str:
        return self.columns.get(field, field)


def load_generic(
    path: Path,
    options: GenericOptions | None = None,
    keep: Callable[[Mapping[str, str]], bool] | None = None,
) -> list[TraceJob]:
    """Jobs of a generic CSV or Parquet trace, by submit time.

    ``keep`` (for loaders built on this one) skips the rows it refuses by
    their cells, as a format's "never ran" rows. Raises TraceProblems (a
    TraceError) listing every malformed value, each with its row and column.
    """
    options = options or GenericOptions()
    header, rows, problems = _parquet_table(path) if path.suffix == ".parquet" else _csv_table(path)
    reader = _Reader(path, options, header)
    reader.check_header()
    reader.check_constants()
    for error in problems:
        reader.problems.add(error)
    if keep is not None:
        rows = [(n, line, row) for n, line, row in rows if keep(row)]
    parsed = [job for job in (reader.row(n, line, row) for n, line, row in rows) if job]
    ids, lines = [p.fields["id"] for p in parsed], [p.line for p in parsed]
    for problem in repeated_ids(path, ids, lines, options.column("id")):
        reader.problems.add(problem)
    reader.raise_problems()
    if not parsed:
        raise TraceError(path, None, None, "holds no jobs")
    jobs = reader.finish(parsed)
    reader.raise_problems()
    return by_submit(jobs)


Table = tuple[list[str], list[tuple[int, int, dict[str, str]]], list[TraceError]]
"""(header, [(job number, row, cells)], rows of the wrong shape)."""


def _csv_table(path: Path) -> Table:
    rows: list[tuple[int, int, dict[str, str]]] = []
    problems: list[TraceError] = []
    with open_text(path) as handle:
        reader = csv.DictReader(handle)
        header = list(reader.fieldnames or [])
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                reason = f"expected {len(header)} fields"
                problems.append(TraceError(path, reader.line_num, None, reason))
            else:
                cells = {k: v.strip() for k, v in row.items()}
                rows.append((len(rows) + len(problems) + 1, reader.line_num, cells))
    return header, rows, problems


def _parquet_table(path: Path) -> Table:
    try:
        parquet = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise TraceError(
            path, None, None, "reading Parquet needs pyarrow (pip install pyarrow), or use CSV"
        ) from None
    try:
        table = parquet.read_table(path)
    except (OSError, ValueError) as e:
        raise TraceError(path, None, None, f"not a readable Parquet file: {e}") from None
    rows = [
        (n, n, {k: "" if v is None else str(v).strip() for k, v in record.items()})
        for n, record in enumerate(table.to_pylist(), start=1)
    ]
    return list(table.column_names), rows, []


@dataclass
class _Parsed:
    """A row read but not yet placed in time: times wait for the file's origin."""

    line: int
    submit: float
    fields: dict[str, Any]
    """the TraceJob's arguments but its submit time"""


class _Reader:
    """Reads rows under one mapping, keeping every problem instead of stopping at one."""

    def __init__(self, path: Path, options: GenericOptions, header: list[str]) -> None:
        self.path = path
        self.options = options
        self.header = header
        self.problems = TraceProblems(path)
        self.zone = ZoneInfo(options.timezone)
        self.given = {f for f in FIELDS if f in options.constants or options.column(f) in header}
        # Looked up for every cell of every row, so resolved once here.
        self.constants = {
            f: str(v).lower() if isinstance(v, bool) else str(v)
            for f, v in options.constants.items()
        }
        self.columns = {f: options.column(f) for f in self.given if f not in options.constants}
        read = self.given - ({"start_time", "end_time"} if "duration_s" in self.given else set())
        used = {options.column(f) for f in read if f not in options.constants}
        self.labels = [c for c in header if c not in used]

    def check_header(self) -> None:
        """Note every problem of the header and the mapping; raise them, as no row can load."""
        o = self.options
        header_row = None if self.path.suffix == ".parquet" else 1

        def problem(column: str, reason: str) -> None:
            self.problems.add(TraceError(self.path, header_row, column, reason))

        for field, column in o.columns.items():
            if field in o.constants:
                problem(column, f"mapped to {field}, yet constants.{field} gives {field} too")
            elif column not in self.header:
                problem(column, f"column missing (mapped to {field})")
        for field in o.constants:
            if field not in o.columns and field in self.header:
                problem(field, f"a column, yet constants.{field} gives {field} too")
        if "submit_time" not in self.given:
            problem(o.column("submit_time"), "column missing" + self._hint("submit_time"))
        if "duration_s" not in self.given and not {"start_time", "end_time"} <= self.given:
            problem(
                o.column("duration_s"),
                "column missing (or give start_time and end_time)" + self._hint("duration_s"),
            )
        missing = [f for f in FIELDS if f not in self.given]
        for column in self.labels:
            close = difflib.get_close_matches(column.lower(), missing, 1, _LOOKALIKE)
            if close:
                field = close[0]
                problem(
                    column,
                    f"looks like a misspelt {field}: map it (columns.{field}={column}) "
                    f"or set constants.{field}",
                )
        self.raise_problems()

    def _hint(self, field: str) -> str:
        """``; map one with columns.FIELD=COLUMN`` for the column most like ``field``."""
        lowered = {c.lower(): c for c in self.labels}
        close = difflib.get_close_matches(field, list(lowered), 1, 0.6)
        return f"; map one with columns.{field}={lowered[close[0]]}" if close else ""

    def check_constants(self) -> None:
        """Read the constants alone, as a row without cells: a bad one, the same in every
        row, is one problem naming the option rather than one per row. Raise them."""
        self.parse(_Constants(self), 0)
        self.raise_problems()

    def raise_problems(self) -> None:
        if self.problems:
            raise self.problems

    def row(self, number: int, line: int, cells: Mapping[str, str]) -> _Parsed | None:
        """The row's job at submit time 0 (``finish`` places it), or None after noting problems."""
        found = self.parse(_Row(self, line, cells), number)
        return None if found is None else _Parsed(line, *found)

    def parse(self, r: _Row, number: int) -> tuple[float, dict[str, Any]] | None:
        """The submit time and the other fields ``r`` gives, or None after noting problems."""
        before = len(self.problems)
        o = self.options
        if not r.text("submit_time"):
            r.fail("submit_time", "empty: every job needs a submit time")
        submit = r.instant("submit_time")
        given = "duration_s" in self.given
        duration = r.seconds("duration_s", minimum=0) if given else r.runtime()
        gpus, gpu_milli = r.gpus()
        profile = r.text("mig_profile")
        if profile and (problem := unknown_profile(profile)):
            r.fail("mig_profile", problem)
        listed = r.text("gpu_models")
        models = frozenset(filter(None, (m.strip() for m in listed.split("|")))) if listed else _ANY
        for model in models:
            try:
                gpu_memory_mib(model, "gpu_models")
            except InvalidSpec as e:
                r.fail("gpu_models", e.reason)
        preemptible = _BOOLEANS.get(r.text("preemptible").lower() or "false")
        if preemptible is None:
            r.fail("preemptible", f"{r.text('preemptible')!r} is not true/false")
        priority_class = r.text("priority_class") or "normal"
        if problem := priority_class_problem(priority_class):
            r.fail("priority_class", problem)
        cpu_milli = r.scaled("cpu_milli", o.units.cpu_milli, CPU_UNITS, round)
        memory_mib = r.scaled("memory_mib", o.units.memory_mib, MEMORY_UNITS, math.ceil)
        nodes = r.count("nodes", 1)
        mig_count = r.count("mig_count", 1 if profile else 0)
        time_limit = r.seconds("time_limit_s", minimum=1)
        checkpoint = r.seconds("checkpoint_interval_s", minimum=1)
        think = r.seconds("think_s", minimum=0)
        gpu_milli = r.count("gpu_milli", gpu_milli)
        # The probe ends here: a request of the constants alone, without a row's cells,
        # would fail for what the row gives.
        if len(self.problems) > before or submit is None or duration is None or r.probe:
            return None
        labels = {c: r.cells[c] for c in self.labels if r.cells.get(c)}
        try:
            per_node = self.options.gpus_per_node
            if per_node and nodes == 1 and gpus > per_node:
                gang = whole_gpus(gpus, per_node)
                gpus, nodes = gang.gpus, gang.nodes
            request = Request(
                gpus=gpus,
                gpu_milli=gpu_milli,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
                nodes=nodes,
                mig_profile=profile,
                mig_count=mig_count,
                gpu_models=models,
            )
            fields = dict(
                id=r.text("id") if "id" in self.given else str(number),
                duration_s=duration,
                request=request,
                user=r.text("user"),
                account=r.text("account"),
                qos=r.text("qos"),
                partition=r.text("partition"),
                time_limit_s=time_limit,
                preemptible=bool(preemptible),
                priority_class=priority_class,
                checkpoint_interval_s=checkpoint,
                labels=labels,
                after=r.text("after") or None,
                think_s=think or 0,
            )
        except InvalidSpec as e:
            field = {"request": "gpus"}.get(e.field, e.field.removeprefix("request."))
            r.fail(field, e.reason)
            return None
        return submit, fields

    def finish(self, parsed: list[_Parsed]) -> list[TraceJob]:
        """The jobs with submit times counted from the origin."""
        o = self.options
        origin = o.origin if o.origin is not None else "first" if o.time == "iso" else 0.0
        zero = min(p.submit for p in parsed) if origin == "first" else float(origin)
        jobs, lines = [], []
        for p in parsed:
            after = p.submit - zero
            submit = round(after) if after <= MAX_AMOUNT else None
            if submit is None or submit < 0:
                reason = (
                    f"more than {MAX_AMOUNT} s after the origin ({zero:.15g} s)"
                    if submit is None
                    else f"before the origin ({zero:.15g} s), by {-submit} s"
                )
                self.problems.add(TraceError(self.path, p.line, o.column("submit_time"), reason))
                continue
            try:
                jobs.append(TraceJob(submit_time=submit, **p.fields))
                lines.append(p.line)
            except InvalidSpec as e:
                self.problems.add(TraceError(self.path, p.line, o.column(e.field), e.reason))
        # A reference to a row with problems of its own would only repeat them.
        for i, reason in [] if self.problems else follow_problems(jobs):
            self.problems.add(TraceError(self.path, lines[i], o.column("after"), reason))
        return jobs


class _Row:
    """One row's cells under the mapping; a bad value is noted and reads as None."""

    probe = False
    """only the constants, with no cells: see ``_Constants``"""

    def __init__(self, reader: _Reader, line: int | None, cells: Mapping[str, str]) -> None:
        self.reader = reader
        self.options = reader.options
        self.line = line
        self.cells = cells
        self.where: Path | str = reader.path

    def column(self, field: str) -> str:
        """What a problem of ``field`` names: its column."""
        return self.options.column(field)

    def text(self, field: str) -> str:
        """The field's cell (stripped when the table was read) or its constant; "" if neither."""
        column = self.reader.columns.get(field)
        if column is not None:
            return self.cells.get(column, "")
        return self.reader.constants.get(field, "")

    def fail(self, field: str, reason: str) -> None:
        self.reader.problems.add(TraceError(self.where, self.line, self.column(field), reason))

    def count(self, field: str, default: int) -> int:
        value = self.text(field)
        if not value:
            return default
        try:
            return count(self.where, self.line, self.column(field), value)
        except TraceError as e:
            self.reader.problems.add(e)
            return default

    def number(self, field: str) -> float | None:
        """A finite number of zero or more, or None (empty, or noted as a problem)."""
        value = self.text(field)
        if not value:
            return None
        try:
            result = float(value)
        except ValueError:
            self.fail(field, f"{value!r} is not a number")
            return None
        if not math.isfinite(result) or result < 0:
            self.fail(field, f"must be a finite number of 0 or more, got {value}")
            return None
        return result

    def scaled(
        self, field: str, unit: str, factors: Mapping[str, float], to_int: Callable[[float], int]
    ) -> int:
        """A count of the field's own unit: whole as written, or converted from ``unit``."""
        if factors[unit] == 1:
            return self.count(field, 0)
        value = self.number(field)
        if value is None:
            return 0
        amount = value * factors[unit]
        if amount > MAX_AMOUNT:  # checked before to_int, which fails on an overflow to inf
            self.fail(
                field, f"must be at most {MAX_AMOUNT} once converted, got {self.text(field)} {unit}"
            )
            return 0
        return to_int(amount)

    def seconds(self, field: str, *, minimum: int) -> int | None:
        value = self.text(field)
        if not value:
            return None
        unit = getattr(self.options.units, field)
        try:
            return seconds(
                self.where,
                self.line,
                self.column(field),
                value,
                minimum=minimum,
                unit=unit,
                per_unit=DURATION_UNITS[unit],
            )
        except TraceError as e:
            self.reader.problems.add(e)
            return None

    def runtime(self) -> int | None:
        """``end_time - start_time`` in whole seconds, or None after noting why not."""
        start, end = self.instant("start_time"), self.instant("end_time")
        for field, other in (("start_time", "end_time"), ("end_time", "start_time")):
            if not self.text(field):
                given = "empty too" if not self.text(other) else "given"
                self.fail(field, f"empty ({other} {given}): the runtime is end_time - start_time")
        if start is None or end is None:
            return None
        if end < start:
            self.fail("end_time", f"before start_time, by {start - end:.15g} s")
            return None
        if end - start > MAX_AMOUNT:
            self.fail("end_time", f"more than {MAX_AMOUNT} s after start_time")
            return None
        return round(end - start)

    def gpus(self) -> tuple[int, int]:
        """(whole GPUs, milli of one shared GPU) the row asks for."""
        if self.options.units.gpus != "percent":
            return self.count("gpus", 0), 0
        return gpu_share(self.number("gpus") or 0.0)

    def instant(self, field: str) -> float | None:
        """A time as seconds since the epoch (numbers: as written), or None."""
        value = self.text(field)
        if not value:
            return None
        time = self.options.time
        if time == "iso":
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                self.fail(field, f"{value!r} is not an ISO 8601 time (e.g. 2020-05-01 08:30:00)")
                return None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=self.reader.zone)
            return moment.timestamp()
        number = self.number(field)
        return None if number is None else number / 1000 if time == "ms" else number


class _Constants(_Row):
    """The constants read as a row of no cells: each problem names its option
    (``generic trace option: constants.priority_class: ...``), and the fields the
    file's columns give, empty here, are not checked."""

    probe = True

    def __init__(self, reader: _Reader) -> None:
        super().__init__(reader, None, {})
        self.where = "generic trace option"

    def column(self, field: str) -> str:
        return f"constants.{field}"

    def fail(self, field: str, reason: str) -> None:
        if field in self.options.constants:
            super().fail(field, reason)
