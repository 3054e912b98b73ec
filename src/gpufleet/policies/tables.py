"""The base of every policy table's model: a value of the wrong type is an error.

Pydantic's default (lax) mode reads ``"500"`` as 500 and ``"yes"`` as true, so a
quoted number or a word for a boolean in a policy file, a simulator profile or a
``PATCH /v1/config`` would pass as if it were meant. ``StrictTable`` validates in
strict mode, which refuses them and still takes a whole number for a float. Strict
mode takes only a tuple for a tuple field, though, and TOML and JSON give arrays
as lists, so a list given for a tuple field becomes a tuple first.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator


class StrictTable(BaseModel):
    """A table of a policy file: unknown keys and values of the wrong type are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _arrays_as_tuples(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            key: tuple(value)
            if isinstance(value, list) and key in fields and _holds_tuple(fields[key].annotation)
            else value
            for key, value in data.items()
        }


def _holds_tuple(annotation: Any) -> bool:
    """``tuple[...]``, or a union with one (``tuple[str, ...] | None``)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_holds_tuple(a) for a in get_args(annotation))
    return get_origin(annotation) is tuple
