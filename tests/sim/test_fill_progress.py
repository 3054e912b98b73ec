"""``sim fill``'s progress says that the first run may be compiling until it finishes."""

from __future__ import annotations

import io

from rich.console import Console

from gpufleet.cli.sim import FIRST_RUN_NOTE, _progress
from gpufleet.sim.fill import FillRun

RUN = FillRun("best-fit", 42, [50.0] * 131, [5.0] * 131, 2.5, 100, 90)


def captured(terminal: bool) -> tuple[Console, io.StringIO]:
    file = io.StringIO()
    return Console(file=file, force_terminal=terminal, width=100, color_system=None), file


def test_bar_shows_the_note_until_the_first_run_finishes() -> None:
    console, file = captured(terminal=True)
    with _progress(2, console) as on_done:
        before = file.getvalue()  # the bar draws once as it starts
        on_done(RUN)
        on_done(RUN)
    assert FIRST_RUN_NOTE in before and "0/2" in before
    last_frame = [line for line in file.getvalue().splitlines() if "2/2" in line][-1]
    assert "fill runs" in last_frame and FIRST_RUN_NOTE not in last_frame


def test_pipe_prints_only_the_run_lines() -> None:
    console, file = captured(terminal=False)
    with _progress(1, console) as on_done:
        assert file.getvalue() == ""  # a bad input file's error stays the only line
        on_done(RUN)
    assert file.getvalue().startswith("[1/1] best-fit seed 42: 50.00% allocated")
