"""The simulator's event queue: virtual time, ordered by (time, priority, sequence).

Events at the same time run in ``Kind`` order, so that what frees resources
(job ends, the end of a preemption's grace time, repairs, booted nodes) happens before what
consumes them (arrivals) and the scheduling cycle comes last. Events of the
same time and kind run in the order they were pushed (SimPy's rule), which
makes every replay deterministic.

An event that a later one made moot (the end of a run that was preempted)
is not removed from the heap: it carries the run number it belongs to, and
the driver drops it when the job has moved on.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import NamedTuple


class Kind(IntEnum):
    """What happens; the value is the priority among events of one instant."""

    JOB_END = 0
    PREEMPT = 1  # a preempted job's grace time is over: requeue or cancel it
    CHECKPOINT = 2
    NODE_FAIL = 3
    NODE_REPAIR = 4
    MIG_READY = 5  # a GPU's MIG layout change is done: its new instances take work
    NODE_BOOT = 6  # a pool node asked for is up (sim.autoscale)
    RESERVATION = 7  # a reservation starts or ends: the gate's answer changes
    WINDOW = 8  # policy windows open or close: the policy changes
    ARRIVAL = 9
    SCHEDULE = 10
    SCALE = 11  # the autoscaler's wake time: after the instant's cycle


class Event(NamedTuple):
    """One event. ``key`` names the job (id) or node (index) it concerns, or for
    ``MIG_READY`` the GPU as ``"NODE:GPU"``.

    ``run`` is the job's run number the event was made for (0 for events
    that do not concern a job's run). A tuple, so the heap compares
    (time, kind, seq) natively; ``seq`` is unique, so ``key`` is never compared.
    """

    time: int
    kind: Kind
    seq: int
    key: str | int = ""
    run: int = 0


class EventQueue:
    """A min-heap of events; ``pop`` returns the next in (time, kind, seq) order."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, time: int, kind: Kind, key: str | int = "", run: int = 0) -> None:
        heapq.heappush(self._heap, Event(time, kind, self._seq, key, run))
        self._seq += 1

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def peek_time(self) -> int | None:
        """Time of the next event, or None when the queue is empty."""
        return self._heap[0].time if self._heap else None

    def holds(self, kinds: set[Kind]) -> bool:
        """Is any event of these kinds still to come?"""
        return any(e.kind in kinds for e in self._heap)

    def __len__(self) -> int:
        return len(self._heap)
