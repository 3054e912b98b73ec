"""The benchmarks' commands as the docs give them, each run once with ``--quick``.

A command is a ``python benchmarks/SCRIPT.py ...`` line of a fenced block or
an inline code span in ``README.md`` or ``docs/*.md`` (a block's ``#``
comment is not part of it). Each runs under bash exactly as written, with
``--quick`` added unless it has it, from a directory holding a copy of the
clone's ``benchmarks/`` and ``examples/`` (the policy files some replay), so
nothing a script writes lands in the clone. A
script no page names runs as ``python benchmarks/SCRIPT.py --json --quick``.

``QuickRuns`` runs each command once and keeps the result; the session's one
(the ``quick_runs`` fixture) lets a test that checks more of one script's
figures (``test_api_load`` and the like) read the same run as the test of the
documented commands.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.live import run_bash

ROOT = Path(__file__).parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"^python3? benchmarks/\S+\.py\b")
TIMEOUT_S = 600  # api_load's quick run starts five controllers: about 100 s on 2 busy cores


def commands_in(text: str) -> list[str]:
    """The page's benchmark commands, in order, whitespace collapsed."""
    found = []
    for body in FENCE.findall(text):
        for line in body.replace("\\\n", " ").splitlines():
            found.append(line.partition(" #")[0])
    found += SPAN.findall(FENCE.sub("", text))
    return [" ".join(c.split()) for c in found if COMMAND.match(c.strip())]


def script_of(command: str) -> str:
    """``fill.py`` for ``python benchmarks/fill.py --json``."""
    return shlex.split(command)[1].removeprefix("benchmarks/")


def quick(command: str) -> str:
    """The command as the test runs it: ``--quick`` added unless it has it."""
    return command if "--quick" in shlex.split(command) else f"{command} --quick"


def documented() -> dict[str, list[tuple[str, str]]]:
    """Every page's benchmark commands, ``(page, command)`` by script."""
    out: dict[str, list[tuple[str, str]]] = {}
    for page in PAGES:
        for command in commands_in(page.read_text()):
            out.setdefault(script_of(command), []).append((page.name, command))
    return out


def scripts() -> list[str]:
    """The runnable scripts of ``benchmarks/`` (helpers such as ``quick.py`` have no main)."""
    return sorted(
        p.name
        for p in (ROOT / "benchmarks").glob("*.py")
        if 'if __name__ == "__main__":' in p.read_text()
    )


@dataclass(frozen=True)
class QuickRun:
    command: str
    returncode: int
    stdout: str
    stderr: str

    def result(self) -> dict[str, Any]:
        """The JSON object on the last line of stdout (the run must have exited 0)."""
        failed = f"{self.command}: exit {self.returncode}\n{self.stderr[-4000:]}"
        assert self.returncode == 0, failed
        lines = self.stdout.strip().splitlines()
        assert lines, f"{self.command}: printed nothing\n{self.stderr[-2000:]}"
        result = json.loads(lines[-1])
        assert isinstance(result, dict), f"{self.command}: last line {lines[-1]!r}"
        return result


class QuickRuns:
    """Runs each command once, from one copy of ``benchmarks/`` and ``examples/``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.done: dict[str, QuickRun] = {}
        for folder in ("benchmarks", "examples"):
            shutil.copytree(
                ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__")
            )

    def of(self, script: str) -> QuickRun:
        """The run of the script's first documented command (``--json --quick`` if none)."""
        pages = documented().get(script)
        return self.run(pages[0][1] if pages else f"python benchmarks/{script} --json")

    def run(self, command: str) -> QuickRun:
        command = quick(command)
        if command not in self.done:
            status, out, err = run_bash(command, self.work, TIMEOUT_S)
            self.done[command] = QuickRun(command, status, out, err)
        return self.done[command]
