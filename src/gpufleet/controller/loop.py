"""The scheduling loop: a thread that runs a cycle on events and every ``interval_s``.

Events (a submission, a run ending, a node changing) call ``wake``; every
wake before the cycle starts makes one cycle. A cycle an event wakes waits
until ``min_interval_s`` have passed since the previous cycle ended, and at
least as long as that cycle took (Slurm's ``sched_min_interval`` and
``defer``): a flood of submissions then costs a few cycles a second, and
cycles take at most about half of the interpreter, whatever the queue's
length. The timer's cycle (``interval_s``) does not wait, and neither does
one at the time ``due()`` names (a policy window's boundary, or the
earliest heartbeat deadline: a node silent that long is marked DOWN then,
not at the next timer's cycle), which comes sooner than the timer's when it
is nearer. A due time that moved on while the loop waited (a node heard
from since) starts no cycle: the loop waits again for the new one. The loop reads
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
            woken = self._clock.wait(self._event, self._timeout(ended, gap))
            if not woken and not self._ripe(ended, gap):
                continue  # the due time moved on meanwhile: wait for the new one
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

    def _next(self, ended: float, gap: float) -> float:
        """When the next cycle that no event asks for is due (the last ended at ``ended``).

        A due time already past (a cycle that failed to act on it) comes no
        sooner than an event's cycle would: the loop never spins.
        """
        when = ended + self._interval
        due = self._due()
        if due is not None:
            when = min(when, max(due, ended + gap))
        return when

    def _timeout(self, ended: float, gap: float) -> float:
        return max(0.0, self._next(ended, gap) - self._clock.now())

    def _ripe(self, ended: float, gap: float) -> bool:
        return self._clock.now() >= self._next(ended, gap)
