"""Reading a trace's text fields, and saying exactly where one is wrong.

Every loader reports a bad value as ``TraceError(path, row, field, reason)``:
the row is the 1-based line of the file (a header is line 1) and the field is
the column as the file names it.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from gpufleet.core.model import MAX_AMOUNT, InvalidSpec
from gpufleet.sim.openb import TraceError, open_text


def table_rows(
    path: Path, required: tuple[str, ...], *, delimiter: str = ","
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) for each data row of a delimited file with a header line.

    Raises TraceError for a required column missing from the header and for
    a row with too few or too many fields. Blank lines are skipped.
    """
    with open_text(path) as handle:
        # Only comma files quote; sacct writes a job name's quotes as they are.
        if delimiter == ",":
            reader = csv.DictReader(handle)
        else:
            reader = csv.DictReader(handle, delimiter=delimiter, quoting=csv.QUOTE_NONE)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(path, 1, missing[0], "column missing from the header")
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise TraceError(path, reader.line_num, None, f"expected {len(header)} fields")
            yield reader.line_num, {k: v.strip() for k, v in row.items()}


def count(path: Path | str, line: int | None, field: str, text: str, *, minimum: int = 0) -> int:
    """A whole number of at least ``minimum``."""
    try:
        value = int(text)
    except ValueError:
        raise TraceError(path, line, field, f"{text!r} is not a whole number") from None
    if value < minimum:
        raise TraceError(path, line, field, f"must be {minimum} or more, got {value}")
    if value > MAX_AMOUNT:
        raise TraceError(path, line, field, f"must be at most {MAX_AMOUNT}, got {value}")
    return value


def seconds(
    path: Path | str,
    line: int | None,
    field: str,
    text: str,
    *,
    minimum: int = 0,
    unit: str = "s",
    per_unit: float = 1.0,
) -> int:
    """A time in seconds, decimals rounded to the nearest second, at least ``minimum``.

    ``text`` counts ``unit``s of ``per_unit`` seconds each; the bounds hold for
    the seconds, so a huge count of a large unit is refused too.
    """
    try:
        value = float(text)
    except ValueError:
        kind = "a number of seconds" if unit == "s" else "a number"
        raise TraceError(path, line, field, f"{text!r} is not {kind}") from None
    if not math.isfinite(value):
        raise TraceError(path, line, field, f"must be finite, got {text!r}")
    s, written = ("", text) if unit == "s" else (" s", f"{text} {unit}")
    value *= per_unit
    if value > MAX_AMOUNT:  # checked before round(), which fails on an overflow to inf
        raise TraceError(path, line, field, f"must be at most {MAX_AMOUNT}{s}, got {written}")
    rounded = round(value)
    if rounded < minimum:
        raise TraceError(path, line, field, f"must be {minimum}{s} or more, got {written}")
    return rounded


def repeated_ids(
    path: Path, ids: Sequence[str], lines: Sequence[int], column: str
) -> list[TraceError]:
    """A problem for each of the jobs ``ids`` (read from ``lines``) that an earlier one
    has, naming that one's row: the replay tells jobs apart by their ids."""
    first: dict[str, int] = {}
    problems = []
    for job_id, line in zip(ids, lines, strict=True):
        seen = first.setdefault(job_id, line)
        if seen != line:
            reason = f"{job_id!r} appears twice, first on row {seen}"
            problems.append(TraceError(path, line, column, reason))
    return problems


@contextmanager
def located(path: Path, line: int, columns: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raise an InvalidSpec from building a record as a TraceError at ``line``.

    ``columns`` renames a record field (``request.gpus``) to the column the
    file calls it (``num_gpu``); unnamed ones lose their ``request.`` prefix.
    """
    try:
        yield
    except InvalidSpec as e:
        names = columns or {}
        field = names.get(e.field, e.field.removeprefix("request."))
        raise TraceError(path, line, field, e.reason) from None


class TraceProblems(TraceError):
    """Every problem found in one trace file, each naming its row and column.

    ``str()`` joins them on one line, ``; ``-separated and by row, as a
    configuration's problems read; past ``SHOWN`` problems it only counts the rest, so a
    wrong unit in a million-row file stays one readable line.
    """

    SHOWN = 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[TraceError] = []
        ValueError.__init__(self, str(path))

    def add(self, problem: TraceError) -> None:
        self.problems.append(problem)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def __len__(self) -> int:
        return len(self.problems)

    def __str__(self) -> str:
        ordered = sorted(self.problems, key=lambda p: p.row or 0)
        shown = "; ".join(str(p) for p in ordered[: self.SHOWN])
        rest = len(self.problems) - self.SHOWN
        return shown + (f"; and {rest} more problem(s) in {self.path}" if rest > 0 else "")
