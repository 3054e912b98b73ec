"""Pydantic errors in a configuration file's own words.

Every TOML file the project reads (policy files, simulator profiles, sweep
specs, the controller's configuration) reports a bad key as one line
``key.path: what is wrong``, such as ``qos.normal.nvme: unknown key (known:
name, priority, ...)`` or ``partitions.gpu.nodes: must be a list``, never with
pydantic's own wording ("Extra inputs are not permitted", "Input should be a
valid tuple"). Entries of an array of tables are named by their ``name``
(a node group by its ``names``), else by their 1-based position.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

# Error types whose wording is replaced outright; the rest have pydantic's
# "Input should be ..." turned into "must be ...".
_WORDS = {
    "missing": "required",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "set_type": "must be a list",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "dict_type": "must be a table",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
}


def problems(model: type[BaseModel], data: object, error: ValidationError) -> list[str]:
    """Every error in ``error``, raised validating ``data`` as ``model``, as one line each."""
    return [problem(model, data, details) for details in error.errors()]


def first_problem(
    model: type[BaseModel], data: object, error: ValidationError, at: str = ""
) -> str:
    """The first error in ``error`` as one line (files that stop at the first problem).

    ``at`` is the key of the table ``data`` came from, when it is not the whole file.
    """
    return problem(model, data, error.errors()[0], at)


def problem(model: type[BaseModel], data: object, details: ErrorDetails, at: str = "") -> str:
    """One pydantic error as ``key.path: message``; just the message at the top level."""
    key = ".".join(part for part in (at, key_path(data, details["loc"])) if part)
    text = message(model, details)
    return f"{key}: {text}" if key else text


def message(model: type[BaseModel], details: ErrorDetails) -> str:
    """One pydantic error's message alone, for callers that name the key their own way."""
    return _message(model, details["loc"], details["type"], details["msg"])


def key_path(data: object, loc: Sequence[int | str]) -> str:
    """A pydantic location as a dotted key: array positions become the entry's label."""
    parts: list[str] = []
    node = data
    for step in loc:
        if isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            node = node[step]
            parts.append(entry_label(node, step))
        else:
            node = node.get(str(step)) if isinstance(node, Mapping) else None
            parts.append(str(step))
    return ".".join(parts)


def _message(model: type[BaseModel], loc: Sequence[int | str], kind: str, msg: str) -> str:
    if kind == "extra_forbidden":
        table = _model_at(model, loc[:-1])
        known = f" (known: {', '.join(table.model_fields)})" if table else ""
        return f"unknown key{known}"
    if kind in _WORDS:
        return _WORDS[kind]
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if msg.startswith("Input should "):
        # literal_error, greater_than, ...: "Input should be 'a' or 'b'" -> "must be 'a' or 'b'"
        return "must " + msg.removeprefix("Input should ")
    return msg


def entry_label(entry: object, position: int) -> str:
    """An array entry's ``name`` (a node group's ``names``), else its 1-based position."""
    if isinstance(entry, Mapping):
        for field in ("name", "names"):
            value = entry.get(field)
            if isinstance(value, str) and value:
                return value
    return str(position + 1)


def _model_at(root: type[BaseModel], path: Sequence[int | str]) -> type[BaseModel] | None:
    """The model of the table at ``path`` under ``root``, to list its keys; None if none."""
    model = root
    keyed = False  # the last field was a mapping of models: the next step is its key
    for step in path:
        if isinstance(step, int) or keyed:
            keyed = False
            continue  # a position in an array of models, or a key in a table of them
        field = model.model_fields.get(step)
        inner = model_of(field.annotation) if field else None
        if field is None or inner is None:
            return None
        keyed = get_origin(field.annotation) in (dict, Mapping)
        model = inner
    return model


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The model in ``M``, ``M | None``, ``tuple[M, ...]`` or ``dict[str, M]``."""
    for candidate in (annotation, *get_args(annotation)):
        if (
            isinstance(candidate, type)
            and not isinstance(candidate, types.GenericAlias)
            and issubclass(candidate, BaseModel)
        ):
            return candidate
    return None
