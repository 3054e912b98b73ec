"""Fixtures for the trace loader tests: the small trace files beside this module,
and copies of them with one cell broken."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"

Corrupt = Callable[[str, int, str, str], Path]


@pytest.fixture
def fixture() -> Callable[[str], Path]:
    """Path of a fixture file by name."""
    return lambda name: FIXTURES / name


@pytest.fixture
def corrupt(tmp_path: Path) -> Corrupt:
    """A copy of fixture ``name`` whose ``line`` (1-based) has ``old`` replaced by ``new``."""

    def make(name: str, line: int, old: str, new: str) -> Path:
        lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines(keepends=True)
        assert old in lines[line - 1], f"{old!r} not on line {line} of {name}"
        lines[line - 1] = lines[line - 1].replace(old, new, 1)
        out = tmp_path / name
        out.write_text("".join(lines), encoding="utf-8")
        return out

    return make
