"""Time-of-day policies: named windows that lay other settings over the policy while open.

A window (``[[windows]]`` in a policy file) is open on some days of the
week between two times of day, in its time zone; while it is open its
``policy`` table is laid over the policy file, as ``extends`` lays a file
over its base (tables merge key by key, ``[[qos]]`` and ``[[partitions]]``
entry by entry by name)::

    [[windows]]
    name = "day"
    days = ["weekdays"]           # mon..sun, "weekdays", "weekends"; default every day
    start = "08:00"
    end = "20:00"                 # an end at or before the start runs past midnight
    [windows.policy.ordering.multifactor]
    weight_job_size = 20000
    [[windows.policy.qos]]
    name = "normal"
    max_gpus_per_user = 8

A window may override the ordering, placement, backfill and preemption
tables, QoS (limits, priority), partitions (access lists, limits, tiers)
and the autoscaler's settings (``[autoscale]``: a lower cap on a pool at
night, a longer idle time by day). Several open windows apply in file
order, the later one winning.

``Windows`` answers, for a driver's clock, which windows are open and when
that next changes. It is pure: the driver gives the time origin (the Unix
time of its time 0) and resolves time-zone names (``zone``).
``WindowSwitch`` is what both drivers keep: asked at each boundary (and at
their start), it hands over the policy to put in force when the open set
changed, built once per set, and records each switch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, Generic, TypeVar

from pydantic import Field, field_validator

from gpufleet.policies.tables import StrictTable

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
GROUPS = {"weekdays": DAYS[:5], "weekends": DAYS[5:]}
OVERRIDABLE = ("ordering", "placement", "backfill", "preemption", "qos", "partitions", "autoscale")
_CLOCK = re.compile(r"^(\d\d):(\d\d)$")
_LOOKAHEAD_DAYS = 8  # every weekly pattern changes within a week, if ever


def _minutes(text: str) -> int:
    m = _CLOCK.match(text)
    if m is None or int(m[2]) >= 60 or int(m[1]) * 60 + int(m[2]) > 24 * 60:
        raise ValueError(f"must be a time of day HH:MM from 00:00 to 24:00, got {text!r}")
    return int(m[1]) * 60 + int(m[2])


class WindowConfig(StrictTable):
    """One ``[[windows]]`` entry."""

    name: str = Field(min_length=1)
    days: tuple[str, ...] = ("weekdays", "weekends")
    start: str = "00:00"
    end: str = "24:00"
    tz: str = Field("UTC", description="IANA time zone of start and end")
    policy: dict[str, Any] = Field(default_factory=dict)

    @field_validator("days")
    @classmethod
    def _days(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        known = (*DAYS, *GROUPS)
        for day in value:
            if day not in known:
                raise ValueError(f"must be day names {', '.join(known)}; got {day!r}")
        if not value:
            raise ValueError("must name at least one day")
        return value

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        _minutes(value)
        return value

    @field_validator("policy")
    @classmethod
    def _overridable(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if key not in OVERRIDABLE:
                allowed = ", ".join(OVERRIDABLE)
                raise ValueError(f"{key!r} cannot change by the hour (may: {allowed})")
        return value

    @property
    def weekdays(self) -> frozenset[int]:
        """The days it opens on, Monday = 0."""
        names = {d for day in self.days for d in GROUPS.get(day, (day,))}
        return frozenset(DAYS.index(d) for d in names)


class _Window:
    def __init__(self, config: WindowConfig, zone: tzinfo) -> None:
        self.name = config.name
        self.days = config.weekdays
        self.start, self.end = _minutes(config.start), _minutes(config.end)
        self.zone = zone

    def open_at(self, at: datetime) -> bool:
        local = at.astimezone(self.zone)
        minute = local.hour * 60 + local.minute
        today = local.weekday() in self.days
        if self.start < self.end:
            return today and self.start <= minute < self.end
        yesterday = (local.weekday() - 1) % 7 in self.days  # runs past midnight
        return (today and minute >= self.start) or (yesterday and minute < self.end)

    def boundaries(self, around: datetime) -> list[datetime]:
        """Every start and end within a week or so of ``around``, as instants."""
        first = around.astimezone(self.zone).date() - timedelta(days=1)
        result = []
        for k in range(_LOOKAHEAD_DAYS + 1):
            day = first + timedelta(days=k)
            for minute in (self.start, self.end):
                result.append(_instant(day, minute, self.zone))
        return result


def _instant(day: date, minute: int, zone: tzinfo) -> datetime:
    extra, minute = divmod(minute, 24 * 60)  # 24:00 is the next day's midnight
    local = datetime.combine(day + timedelta(days=extra), time(minute // 60, minute % 60))
    return local.replace(tzinfo=zone)


class Windows:
    """Which windows are open at a driver's time ``t`` (origin + t is Unix time)."""

    def __init__(
        self, configs: Sequence[WindowConfig], origin: int, zone: Callable[[str], tzinfo]
    ) -> None:
        self.origin = origin
        self.windows = [_Window(c, zone(c.tz)) for c in configs]

    def _at(self, t: int) -> datetime:
        return datetime.fromtimestamp(self.origin + t, UTC)

    def open(self, t: int) -> tuple[str, ...]:
        """The names of the windows open at ``t``, in file order."""
        at = self._at(t)
        return tuple(w.name for w in self.windows if w.open_at(at))

    def next_change(self, t: int) -> int | None:
        """The first time after ``t`` when the open windows differ; None if never."""
        now = self.open(t)
        at = self._at(t)
        candidates = sorted(
            {
                int(b.timestamp()) - self.origin
                for w in self.windows
                for b in w.boundaries(at)
                if b > at
            }
        )
        for c in candidates:
            if self.open(c) != now:
                return c
        return None


R = TypeVar("R")


class WindowSwitch(Generic[R]):
    """The policy in force at a driver's time, switched where the open windows change.

    ``build`` makes the policy of a set of open windows (a driver's own form
    of it: the simulator's scheduling profile, QoS, partitions and
    autoscaler, the controller's profile factory with them); each set is
    built once.
    ``switches`` lists (time, windows open from then) for every switch.
    """

    def __init__(self, windows: Windows, build: Callable[[tuple[str, ...]], R]) -> None:
        self.windows = windows
        self.build = build
        self.open_windows: tuple[str, ...] | None = None
        self.switches: list[tuple[int, tuple[str, ...]]] = []
        self._built: dict[tuple[str, ...], R] = {}

    def switch(self, t: int) -> R | None:
        """The policy to put in force at ``t`` when the open windows differ from the last
        call's (the first call always gives one); None when they do not."""
        now_open = self.windows.open(t)
        if now_open == self.open_windows:
            return None
        self.open_windows = now_open
        self.switches.append((t, now_open))
        policy = self._built.get(now_open)
        if policy is None:
            policy = self._built[now_open] = self.build(now_open)
        return policy

    def next_change(self, t: int) -> int | None:
        """When a driver at ``t`` must ask again (``Windows.next_change``)."""
        return self.windows.next_change(t)
