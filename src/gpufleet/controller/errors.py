"""The controller's typed failures; the API maps each to one problem+json status.

``NotFound`` -> 404, ``Forbidden`` -> 403, ``Invalid`` -> 422 (or 400) naming
``field``, ``Conflict`` -> 409. Every message is one line meant for the user.
"""

from __future__ import annotations

from collections.abc import Sequence


class ControllerError(Exception):
    """Base of every failure the service reports to a caller."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ControllerError):
    """The named job, node, token or account does not exist (or is not visible to the caller)."""


class Forbidden(ControllerError):
    """The caller is authenticated but its role or ownership does not allow the action."""


class Invalid(ControllerError):
    """A request value the controller refuses; ``field`` names it, e.g. ``body.array``.

    ``more`` are further (field, message) pairs found in the same request, so that a
    caller hears of every bad field at once; ``problems`` holds them all, the first first.
    """

    def __init__(self, field: str, message: str, more: Sequence[tuple[str, str]] = ()) -> None:
        also = f" (and {len(more)} more)" if more else ""
        super().__init__(f"{field}: {message}{also}")
        self.field = field
        self.reason = message
        self.problems: tuple[tuple[str, str], ...] = ((field, message), *more)


class Conflict(ControllerError):
    """The action does not apply to the object's current state (cancel a finished job)."""
