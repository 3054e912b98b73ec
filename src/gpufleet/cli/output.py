"""What the controller commands share: the connection, error lines, tables and JSON.

Errors end a command with one line on stderr, ``error: <where>: <what>``:
exit status 2 when the input was wrong (a bad option, a field the
controller refused, an unknown job), 1 when the controller could not be
reached or failed. Tables are plain text in aligned columns, like squeue
and sinfo print them, so that they survive pipes, ``cut`` and ``awk``;
``--json`` prints the API's own objects.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import typer
from pydantic import BaseModel

from gpufleet.adapters.client import Client, ClientError, client_settings
from gpufleet.cli.sbatch import SbatchError

JSON_HELP = "Print JSON (the API's objects) instead of a table."

STATE_CODES = {
    "PENDING": "PD",
    "RUNNING": "R",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "FAILED": "F",
    "CANCELLED": "CA",
    "TIMEOUT": "TO",
    "PREEMPTED": "PR",
    "NODE_FAIL": "NF",
    "REQUEUED": "RQ",
}
"""squeue's two-letter job states."""

_JOB_ID = re.compile(r"[0-9]{1,18}(?:_[0-9]{1,9})?")


def command_name(command_path: str) -> str:
    """How a command names itself in its errors, from click's ``command_path``
    (``gpufleet token create``): ``token create``; ``gpufleet`` for the root."""
    return " ".join(command_path.split()[1:]) or "gpufleet"


def fail(where: str, message: str, code: int = 2) -> NoReturn:
    """End the command with ``error: where: message`` and ``code``."""
    line = f"{where}: {message}" if where else message
    typer.echo("error: " + line.replace("\n", " "), err=True)
    raise typer.Exit(code)


@contextmanager
def reporting(where: str) -> Iterator[None]:
    """Turn the parser's and the client's errors into one line and their exit status."""
    try:
        yield
    except SbatchError as e:
        fail(where, str(e), 2)
    except ClientError as e:
        fail(where, str(e), e.exit_code)


def connect() -> Client:
    """A client for the controller named by the environment or client.toml."""
    return Client.from_settings(client_settings(os.environ, Path.home()))


def job_id(where: str, text: str) -> str:
    """``text`` if it is a job id (``42`` or an array task ``42_3``)."""
    if _JOB_ID.fullmatch(text) is None:
        fail(where, f"{text!r} is not a job id like 42 or 42_3")
    return text


def print_json(data: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> None:
    if isinstance(data, BaseModel):
        value: Any = data.model_dump(mode="json")
    elif isinstance(data, dict):
        value = data
    else:
        value = [item.model_dump(mode="json") for item in data]
    typer.echo(json.dumps(value, indent=2))


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Left-aligned columns two spaces apart; the last column is not padded."""
    cells = [list(headers)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[k]) for row in cells) for k in range(len(headers))]
    for row in cells:
        padded = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
        typer.echo("  ".join([*padded, row[-1]]).rstrip())


def duration(seconds: float | None) -> str:
    """squeue's elapsed time: M:SS, H:MM:SS or D-HH:MM:SS; ``UNLIMITED`` for None."""
    if seconds is None:
        return "UNLIMITED"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def timestamp(seconds: float | None) -> str:
    """Local time as Slurm prints it (2024-05-01T12:00:00); ``N/A`` for None."""
    if seconds is None:
        return "N/A"
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%dT%H:%M:%S")


_NUMBERED = re.compile(r"(.*?)(\d+)")


def compress_hostlist(names: Sequence[str]) -> str:
    """The inverse of ``expand_hostlist`` for display: ``node[01-03,07],login``.

    Names that share a prefix and a digit width and are adjacent in order
    are folded into one bracket; everything else is listed as it is.
    """
    groups: list[tuple[str, int, list[int]]] = []
    plain: list[str] = []
    for name in names:
        match = _NUMBERED.fullmatch(name)
        if match is None:
            plain.append(name)
            continue
        prefix, digits = match[1], match[2]
        width = len(digits)  # node9 and node10 stay apart: a bracket has one width
        if groups and groups[-1][0] == prefix and groups[-1][1] == width:
            groups[-1][2].append(int(digits))
        else:
            groups.append((prefix, width, [int(digits)]))
    out: list[str] = []
    for prefix, width, numbers in groups:
        if len(numbers) == 1:
            out.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        ranges: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            low, high = f"{start:0{width}d}", f"{prev:0{width}d}"
            ranges.append(low if start == prev else f"{low}-{high}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out + plain)
