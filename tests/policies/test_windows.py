"""Time-of-day windows: which are open when, and when that next changes."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from gpufleet.policies.config import PolicyError, parse_policy
from gpufleet.policies.windows import WindowConfig, Windows

MONDAY = int(datetime(2026, 3, 2, tzinfo=UTC).timestamp())  # Monday 2 March 2026, 00:00 UTC
H = 3600
D = 24 * H

DAY = WindowConfig(name="day", days=("weekdays",), start="08:00", end="20:00")
NIGHT = WindowConfig(name="night", start="22:00", end="06:00")  # every day, past midnight
WEEKEND = WindowConfig(name="weekend", days=("weekends",))


def windows(*configs: WindowConfig) -> Windows:
    return Windows(configs, MONDAY, ZoneInfo)  # the driver's time 0 is Monday midnight


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (0, ("night",)),  # Monday 00:00: Sunday's night runs to 06:00
        (6 * H, ()),  # Monday 06:00: the night is over, the day not begun
        (8 * H, ("day",)),  # Monday 08:00: start is inclusive
        (20 * H - 1, ("day",)),
        (20 * H, ()),  # end is exclusive
        (22 * H, ("night",)),
        (4 * D + 12 * H, ("day",)),  # Friday noon
        (5 * D + 12 * H, ("weekend",)),  # Saturday noon: no day window
        (5 * D + 23 * H, ("night", "weekend")),  # in file order
        (7 * D + 8 * H, ("day",)),  # the next Monday
    ],
)
def test_open_windows(t: int, expected: tuple[str, ...]) -> None:
    assert windows(DAY, NIGHT, WEEKEND).open(t) == expected


@pytest.mark.parametrize(
    ("t", "expected"),
    [
        (0, 6 * H),  # the night ends
        (6 * H, 8 * H),  # the day starts
        (12 * H, 20 * H),
        (4 * D + 21 * H, 4 * D + 22 * H),  # Friday 21:00: Friday's night starts at 22:00
        # Saturday: the weekend opened at midnight; the night closes at 06:00
        (5 * D + 1 * H, 5 * D + 6 * H),
    ],
)
def test_next_change(t: int, expected: int) -> None:
    assert windows(DAY, NIGHT, WEEKEND).next_change(t) == expected


def test_a_window_open_all_week_never_changes() -> None:
    assert windows(WindowConfig(name="always")).next_change(0) is None


def test_times_are_in_the_windows_time_zone() -> None:
    berlin = WindowConfig(name="day", start="08:00", end="20:00", tz="Europe/Berlin")
    w = windows(berlin)
    # 08:00 in Berlin in March (CET, UTC+1) is 07:00 UTC
    assert (w.open(7 * H - 1), w.open(7 * H)) == ((), ("day",))
    assert w.next_change(0) == 7 * H


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ('name = "x"\ndays = ["funday"]', "days"),
        ('name = "x"\nstart = "25:00"', "start"),
        ('name = "x"\nend = "8am"', "end"),
        ('name = "x"\n[windows.policy.accounts]\nx = 1', "policy"),
    ],
)
def test_bad_windows_name_the_key(entry: str, key: str) -> None:
    with pytest.raises(PolicyError, match=rf"p\.toml: windows\.x\.{key}"):
        parse_policy(f"[[windows]]\n{entry}\n", "p.toml")


def test_window_names_are_unique() -> None:
    with pytest.raises(PolicyError, match=r"windows\.a: defined twice"):
        parse_policy('[[windows]]\nname = "a"\n[[windows]]\nname = "a"\n', "p.toml")


def test_a_window_needs_a_name() -> None:
    with pytest.raises(ValidationError):
        WindowConfig(name="")
