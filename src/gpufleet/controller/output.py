"""Reading a job's output file for its owner, and only what the job's run wrote.

The controller reads output files where the nodes wrote them (a shared file
system), with its own permissions, so a path a user typed must not become a
way to read what the controller can read. A slice is served only when:

* the job has started (a pending or held job has no output yet);
* the path is a regular file, itself not a symbolic link (``lstat``, then
  ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` of what was opened: a FIFO, a
  device or a link swapped in meanwhile is refused without blocking);
* it is owned by the account the run ran as: the agent's own when its node
  runs jobs as itself (it says so when it registers), else the job's user
  as the controller's host knows it. When neither is known, a file owned
  by root or by the controller's own account is refused;
* it does not lie in the controller's own data directory (its database);
* it was modified at or after the run's start (``MTIME_SLACK_S`` allowed
  for coarse file system clocks), so a file from before the run is not it.

Anything else is ``Unreadable`` with a short reason for the caller.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MTIME_SLACK_S = 2.0
"""How far a file's modification time may be before the run's start (clock granularity)."""


class Unreadable(Exception):
    """The file is not served; the message says why, in a few words."""


def read_slice(
    path: str,
    offset: int,
    size: int,
    *,
    owner: int | None,
    started: float,
    private: Sequence[Path] = (),
) -> tuple[bytes, bool]:
    """At most ``size`` bytes of ``path`` from ``offset``, and whether the file ends there.

    ``owner`` is the uid the run ran as (None: not known), ``started`` the
    run's start (Unix time), ``private`` directories never served.
    """
    try:
        seen = os.lstat(path)
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    if not stat.S_ISREG(seen.st_mode):
        raise Unreadable("not a regular file")
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            raise Unreadable("not a regular file")
        if private and _inside(_real_path(fd, path), private):
            raise Unreadable("in the controller's data directory")
        if owner is not None and st.st_uid != owner:
            raise Unreadable("not owned by the job's user")
        if owner is None and st.st_uid in (0, os.geteuid()):
            raise Unreadable("not owned by the job's user")
        if st.st_mtime < started - MTIME_SLACK_S:
            raise Unreadable("not written by the job's run")
        data = os.pread(fd, size, offset)
        at_end = os.pread(fd, 1, offset + len(data)) == b""
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None
    finally:
        os.close(fd)
    return data, at_end


def _real_path(fd: int, path: str) -> Path:
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # no /proc: the path's own resolution
        return Path(os.path.realpath(path))


def _inside(path: Path, dirs: Sequence[Path]) -> bool:
    return any(path == d or d in path.parents for d in dirs)
