"""Reading a user's text file: UTF-8, with or without a byte-order mark.

Every trace, node list, cluster file and TOML file is read here, so a file
that cannot be read is refused the same way everywhere: a missing file as
``no such file``, a byte that is not UTF-8 with the line it is on. Excel's
"CSV UTF-8" starts with a byte-order mark, which is dropped.
"""

from __future__ import annotations

import codecs
import io
from pathlib import Path


class UnreadableText(ValueError):
    """Why a text file could not be read. The message leaves the path to the caller.

    ``line`` is the 1-based line holding the first byte that is not UTF-8,
    or None when the file could not be read at all; ``reason`` is the
    message without it.
    """

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason if line is None else f"line {line}: {reason}")
        self.reason, self.line = reason, line


def read_text(path: Path) -> str:
    """The whole file decoded as UTF-8, a leading byte-order mark removed.

    Raises UnreadableText for a missing or unreadable file and for one that
    is not UTF-8, then naming the line of the first bad byte.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UnreadableText("no such file") from None
    except OSError as e:
        raise UnreadableText(e.strerror or str(e)) from None
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        # Lines end as Python's text files end them: \n, \r\n or \r.
        line = len((data[: e.start] + b".").splitlines())
        reason = f"not UTF-8 text (byte 0x{data[e.start]:02x}): save the file as UTF-8"
        raise UnreadableText(reason, line) from None


def open_text(path: Path) -> io.StringIO:
    """``read_text`` as a file, its lines split as ``open(path, newline="")`` splits them."""
    return io.StringIO(read_text(path), newline="")
