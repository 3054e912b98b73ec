"""Reading a TOML file, with the reason it failed in words a user can act on."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from gpufleet.adapters.textfile import UnreadableText, read_text


class UnreadableToml(ValueError):
    """Why a TOML file could not be read. The message leaves the path to the caller,
    which knows what the file is for and names it in its own error."""


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed document; UnreadableToml for a missing, unreadable or malformed file."""
    try:
        text = read_text(path)
    except UnreadableText as e:
        prefix = "" if e.line is None else "not valid TOML: "
        raise UnreadableToml(prefix + str(e)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UnreadableToml(f"not valid TOML: {e}") from None
