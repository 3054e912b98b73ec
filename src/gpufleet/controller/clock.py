"""The controller's clock: wall time in production, a manual clock in tests.

The scheduling loop reads time and sleeps only through a ``Clock``, so a test
(or a parity run against the simulator) advances time by hand and gets the
same decisions on every run.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Time in seconds since the Unix epoch, and a wait that can be cut short."""

    def now(self) -> float:
        """The current time."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Block until ``event`` is set or ``timeout`` seconds of this clock pass.

        Returns whether the event was set. A manual clock never sleeps: it
        returns at once, so a test drives the loop step by step.
        """
        ...


class WallClock:
    """The system clock."""

    def now(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(max(0.0, timeout))


class ManualClock:
    """A clock that moves only when told; thread-safe."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, when: float) -> None:
        """Jump to ``when``, which must not be in this clock's past."""
        with self._lock:
            if when < self._now:
                raise ValueError(f"a clock cannot go back (to {when} from {self._now})")
            self._now = when

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.is_set()
