"""The requests placement measures fragmentation against: recent ones, or typical ones.

Fragmentation-aware placement (``fgd``, share packing, the ``default``
profile) rates each option by what it leaves for the tasks the cluster
expects. The simulator knows them from its trace. A live cluster knows only
what was submitted lately, so ``WorkloadWindow`` keeps the last requests
(by count, by submit time, or both) and tells a driver how far their mix
has moved since it last built a placement profile from them, so the profile
is rebuilt when the mix changes rather than on every submission.

Before the first submission there is nothing to measure against, and
``TYPICAL`` stands in: whole tasks of 1, 2, 4 and 8 GPUs and quarter and
half shares of one GPU, equally often, on any model. They ask for no CPU or
memory, so until real requests say what tasks carry, only GPU fragmentation
counts. Being unconstrained by model, they suit every model present.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

from gpufleet.core.model import Request

TYPICAL: tuple[Request, ...] = (
    Request(gpus=1),
    Request(gpus=2),
    Request(gpus=4),
    Request(gpus=8),
    Request(gpu_milli=250),
    Request(gpu_milli=500),
)


def or_typical(requests: Iterable[Request]) -> tuple[Request, ...]:
    """``requests``, or ``TYPICAL`` when they hold nothing to measure fragmentation
    against (no request, or MIG requests only, which fragmentation leaves out)."""
    given = tuple(requests)
    return given if any(not r.mig_profile for r in given) else TYPICAL


class WorkloadWindow:
    """The requests submitted lately: the last ``size``, those submitted less than
    ``seconds`` ago, or what both limits keep.

    Pure: submit times are passed in (integers in the driver's time unit) and
    the window never reads a clock. ``submit`` and ``expire`` cost O(1) per
    request added or dropped.
    """

    def __init__(self, *, size: int | None = None, seconds: int | None = None) -> None:
        if size is None and seconds is None:
            raise ValueError("a workload window needs a size, a time span or both")
        for name, limit in (("size", size), ("seconds", seconds)):
            if limit is not None and limit < 1:
                raise ValueError(f"{name} must be at least 1, got {limit}")
        self.size = size
        self.seconds = seconds
        self._entries: deque[tuple[int, Request]] = deque()
        self._counts: Counter[Request] = Counter()
        self._marked: Counter[Request] = Counter()
        self._latest: int | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def submit(self, request: Request, at: int) -> None:
        """Add ``request``, submitted at ``at``; what falls outside the limits leaves.

        A time before the latest one seen counts as the latest: the window
        stays in submission order even if the driver's clock steps back.
        """
        if self._latest is not None:
            at = max(at, self._latest)
        self._latest = at
        self._entries.append((at, request))
        self._counts[request] += 1
        if self.size is not None and len(self._entries) > self.size:
            self._drop()
        self.expire(at)

    def expire(self, now: int) -> None:
        """Let go of requests submitted ``seconds`` or more before ``now``.

        Without a time span the window keeps its requests until newer ones
        push them out.
        """
        if self.seconds is None:
            return
        while self._entries and self._entries[0][0] <= now - self.seconds:
            self._drop()

    def _drop(self) -> None:
        _, request = self._entries.popleft()
        self._counts[request] -= 1
        if not self._counts[request]:
            del self._counts[request]

    def requests(self) -> tuple[Request, ...]:
        """The requests in the window, oldest first; a placement profile built from
        them falls back to ``TYPICAL`` while there are none."""
        return tuple(r for _, r in self._entries)

    def mark(self) -> tuple[Request, ...]:
        """Take the window's mix as the one profiles are now built from; return its
        requests. ``drift`` measures from here."""
        self._marked = Counter(self._counts)
        return self.requests()

    def drift(self) -> float:
        """How far the mix has moved since ``mark``: the total variation distance
        between the two distributions of requests, from 0 (the same frequencies)
        to 1 (no request in common, or exactly one of the two is empty).

        Costs O(distinct requests in either mix), so a driver may ask every
        cycle and rebuild its placement profile when the drift passes a
        threshold of its choosing.
        """
        now, then = self._counts, self._marked
        n, m = len(self._entries), sum(then.values())
        if not n or not m:
            return 0.0 if n == m else 1.0
        return 0.5 * sum(abs(now[r] / n - then[r] / m) for r in now.keys() | then.keys())
