"""Trace specs: ``FORMAT:PATH[,KEY=VALUE...]``, the one way to name a trace and its options.

Every format takes its options the same way, from the command line or from
Python::

    tiresias:60_job.csv,gpus_per_node=4
    generic:jobs.csv,columns.id=JobID,time=iso,units.duration_s=min
    generic:jobs.csv,spec=jobs.toml,timezone=Asia/Shanghai

A dotted key reaches into a table (``columns.id`` is ``[columns] id``).
``spec=FILE`` reads the options from a TOML file first; options given
inline override it. Option values are text here and take the type the
format's options model gives them (``4`` becomes a whole number). The path
ends at the first comma followed by ``KEY=``; a path may hold other commas.
A path-valued option written in a spec file is relative to that file; on the
command line, to the working directory.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.policies.validation import key_path, message
from gpufleet.sim.openb import TraceError

SPEC_KEY = "spec"
M = TypeVar("M", bound=BaseModel)
_OPTION = re.compile(r",(?=[A-Za-z_][\w.]*=)")


class NoOptions(BaseModel):
    """The options of a format that takes none."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def split(spec: str) -> tuple[str, str, list[str]]:
    """``(format, path, ["key=value", ...])`` of a trace spec; TraceError if it has no path."""
    name, colon, rest = spec.partition(":")
    path, *pairs = _OPTION.split(rest)
    if not colon or not path:
        raise TraceError(spec, None, None, "a trace is given as FORMAT:PATH, e.g. swf:jobs.swf")
    return name, path, pairs


def parse_options(name: str, pairs: list[str], model: type[M]) -> M:
    """The options ``pairs`` give for format ``name``, validated as ``model``.

    TraceError, one line, names the option: ``tiresias trace option:
    gpus_per_node: must be greater than 0``.
    """
    where = f"{name} trace option"
    inline: dict[str, Any] = {}
    spec_file: Path | None = None
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key == SPEC_KEY:
            if spec_file is not None:
                raise TraceError(where, None, key, "given twice")
            spec_file = Path(value)
            continue
        _set(inline, key, value, where)
    data: dict[str, Any] = {}
    if spec_file is not None:
        data = _read_spec(spec_file, model, where)
    _merge(data, inline)
    if not model.model_fields and data:
        raise TraceError(where, None, next(iter(data)), f"{name} takes no options")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = key_path(data, first["loc"]) or None
        raise TraceError(where, None, field, message(model, first)) from None


def absolute(spec: str, model: type[BaseModel]) -> str:
    """``spec`` with its path, its spec file and path-valued options made absolute.

    A worker on another machine or in another directory reads the same files.
    Parts that name no existing file are left as they are.
    """
    name, path, pairs = split(spec)
    fixed = []
    for pair in pairs:
        key, _, value = pair.partition("=")
        if (key == SPEC_KEY or key in path_options(model)) and Path(value).exists():
            value = str(Path(value).resolve())
        fixed.append(f"{key}={value}")
    if Path(path).exists():
        path = str(Path(path).resolve())
    return ",".join([f"{name}:{path}", *fixed])


def path_options(model: type[BaseModel]) -> set[str]:
    """Top-level options of ``model`` that hold a file path."""
    return {name for name, field in model.model_fields.items() if _is_path(field.annotation)}


def _is_path(annotation: Any) -> bool:
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_path(a) for a in get_args(annotation))
    return annotation is Path


def _set(data: dict[str, Any], key: str, value: str, where: str) -> None:
    *tables, leaf = key.split(".")
    table = data
    for part in tables:
        inner = table.setdefault(part, {})
        if not isinstance(inner, dict):
            raise TraceError(where, None, key, f"{part} is given a value and a table")
        table = inner
    if leaf in table:
        raise TraceError(where, None, key, "given twice")
    table[leaf] = value


def _merge(base: dict[str, Any], over: dict[str, Any]) -> None:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _read_spec(path: Path, model: type[BaseModel], where: str) -> dict[str, Any]:
    try:
        data = read_toml(path)
    except UnreadableToml as e:
        raise TraceError(path, None, None, str(e)) from None
    for key in path_options(model):
        value = data.get(key)
        if isinstance(value, str) and not Path(value).is_absolute():
            data[key] = str(path.parent / value)
    return data
