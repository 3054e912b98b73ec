"""The scheduling loop: a thread that runs a cycle on events and every ``interval_s``.

Events (a submission, a run ending, a node changing) call ``wake``; several
wakes before the cycle runs make one cycle. The loop reads time and waits
only through the controller's ``Clock``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from gpufleet.controller.clock import Clock

log = logging.getLogger(__name__)


class SchedulerLoop:
    """Calls ``cycle()`` when woken and at least every ``interval_s`` seconds.

    A cycle that raises is logged and the loop goes on: the next event or
    tick retries it (the cycle itself leaves no half-applied plan).
    """

    def __init__(self, cycle: Callable[[], None], clock: Clock, interval_s: float) -> None:
        self._cycle = cycle
        self._clock = clock
        self._interval = interval_s
        self._event = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Ask for a cycle soon."""
        self._event.set()

    def stop(self) -> None:
        """Stop after the cycle in progress; idempotent."""
        self._stopping = True
        self._event.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopping:
            self._clock.wait(self._event, self._interval)
            self._event.clear()
            if self._stopping:
                return
            try:
                self._cycle()
            except Exception:
                log.exception("scheduling cycle failed; retrying on the next event")
