"""The scheduling loop: a thread that runs a cycle on events and every ``interval_s``.

Events (a submission, a run ending, a node changing) call ``wake``; every
wake before the cycle starts makes one cycle. A cycle an event wakes waits
until ``min_interval_s`` have passed since the previous cycle ended, and at
least as long as that cycle took (Slurm's ``sched_min_interval`` and
``defer``): a flood of submissions then costs a few cycles a second, and
cycles take at most about half of the interpreter, whatever the queue's
length. The timer's cycle (``interval_s``) does not wait, and neither does
one at the time ``due()`` names (a policy window's boundary), which comes
sooner than the timer's when it is nearer. The loop reads
time and waits only through the controller's ``Clock`` (a manual clock
never waits).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from gpufleet.controller.clock import Clock

log = logging.getLogger(__name__)


class SchedulerLoop:
    """Calls ``cycle()`` when woken (spaced as above) and at least every ``interval_s``.

    A cycle that raises is logged and the loop goes on: the next event or
    tick retries it (the cycle itself leaves no half-applied plan).
    """

    def __init__(
        self,
        cycle: Callable[[], None],
        clock: Clock,
        interval_s: float,
        *,
        min_interval_s: float = 0.0,
        due: Callable[[], float | None] = lambda: None,
    ) -> None:
        self._cycle = cycle
        self._clock = clock
        self._interval = interval_s
        self._min_interval = min_interval_s
        self._due = due
        self._event = threading.Event()
        self._halt = threading.Event()
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
        self._halt.set()
        self._event.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        gap = 0.0  # the least time from the last cycle's end to an event's cycle
        ended = self._clock.now()
        while not self._stopping:
            woken = self._clock.wait(self._event, self._timeout())
            if woken and gap > 0:
                # Events arriving meanwhile join this cycle; only stop cuts the wait short.
                self._clock.wait(self._halt, ended + gap - self._clock.now())
            self._event.clear()
            if self._stopping:
                return
            began = self._clock.now()
            try:
                self._cycle()
            except Exception:
                log.exception("scheduling cycle failed; retrying on the next event")
            ended = self._clock.now()
            gap = max(self._min_interval, ended - began)

    def _timeout(self) -> float:
        """How long until the next cycle that no event asks for."""
        due = self._due()
        if due is None:
            return self._interval
        return max(0.0, min(self._interval, due - self._clock.now()))
