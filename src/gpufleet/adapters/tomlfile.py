"""Reading a TOML file, with the reason it failed in words a user can act on."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


class UnreadableToml(ValueError):
    """Why a TOML file could not be read. The message leaves the path to the caller,
    which knows what the file is for and names it in its own error."""


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed document; UnreadableToml for a missing, unreadable or malformed file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnreadableToml("no such file") from None
    except OSError as e:
        raise UnreadableToml(e.strerror or str(e)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UnreadableToml(f"not valid TOML: {e}") from None
