"""Path, query and body parameter types the routers share.

Names travel to the store as they are, so the types refuse what no name
can hold (control characters, NUL above all) with a 422 naming the
parameter, before the service sees it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Body, Path, Query

from gpufleet.api.schemas import Reason

NAME_PATTERN = r"^[^\x00-\x1f\x7f]+$"

NamePath = Annotated[str, Path(min_length=1, max_length=128, pattern=NAME_PATTERN)]
"""A node name or a token id in the path."""

NameQuery = Annotated[str | None, Query(min_length=1, max_length=128, pattern=NAME_PATTERN)]
"""An optional filter by user, partition or account."""

Cursor = Annotated[str | None, Query(min_length=1, max_length=256, pattern=NAME_PATTERN)]
"""An opaque ``next_cursor`` from an earlier page."""

OptionalReason = Annotated[Reason | None, Body()]
"""A body that may give the reason for an action (no body: no reason)."""
