"""The shell commands in the docs run as written.

Which blocks run:

* ``docs/cli.md``, ``docs/operations.md``, ``docs/simulator.md``,
  ``docs/cluster-file.md``, ``docs/fill.md``, ``docs/traces.md``,
  ``docs/slurm.md`` and ``docs/agent.md``: every fenced block whose info string starts with ``sh``,
  except those whose info string also says ``no-run`` (```` ```sh no-run ````):
  commands that need a real cluster, root or systemd, or replays too long for
  a test (the block says so).
* ``README.md``: only blocks marked ```` ```sh live ````, the commands meant
  to run against a running controller, and ```` ```sh run ````, the
  simulator's commands, which need nothing running (the other ``sh`` blocks
  install the package or run long experiments). The README has its reader
  start ``gpufleet up`` in a first shell, from the clone, so here the script
  first does the same: it starts ``gpufleet up`` in the background.

Every page runs from a directory holding a copy of the clone's
``examples/`` and ``deploy/``, as the docs' commands run from the clone.

(``docs/api.md`` has its own test, ``tests/api/test_docs.py``, and the
``python benchmarks/...`` commands of every page run in their quick mode in
``tests/benchmarks/test_documented_commands.py``.)

A page's blocks run in order as one bash script, under ``set -eu`` with
each command traced, from an empty directory; every command must exit 0.
The pages start their own ``gpufleet up`` or ``gpufleet server`` in the
background; at the end every background job is stopped with SIGTERM and
must exit 0. To keep tests off shared places, the script is rewritten
first, and only so: ``/tmp/``, ``/etc/gpufleet/`` and ``/var/lib/gpufleet/``
become directories of the test's own, the port ``6817`` a free one (also
for ``gpufleet up`` and ``gpufleet server``, which default to it), the
host ``controller.example.org`` and the address ``0.0.0.0``
``127.0.0.1``, and ``sudo`` is dropped.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path

import pytest

from cli.live import run_bash

ROOT = Path(__file__).parents[2]
FENCE = re.compile(r"^```(sh[^\n]*)\n(.*?)^```", re.S | re.M)
# A page's runnable blocks: "all" but no-run ones, or those marked with one of the words.
PAGES: dict[str, str | tuple[str, ...]] = {
    "docs/cli.md": "all",
    "docs/operations.md": "all",
    "docs/simulator.md": "all",
    "docs/cluster-file.md": "all",
    "docs/fill.md": "all",
    "docs/traces.md": "all",
    "docs/slurm.md": "all",
    "docs/agent.md": "all",
    "README.md": ("live", "run"),
}
FIRST_SHELL = {
    "README.md": "gpufleet up &\n"
    'until curl -sf "http://127.0.0.1:6817/healthz" > /dev/null; do sleep 1; done\n'
}
TIMEOUT_S = 360  # README.md starts two controllers and runs Prometheus and Alertmanager


def runnable_blocks(text: str, which: str | tuple[str, ...]) -> list[str]:
    """The page's shell blocks that run: ``all`` but ``no-run`` ones, or those marked ``which``."""
    blocks = []
    for info, body in FENCE.findall(text):
        words = info.split()
        if words[0] != "sh":
            continue
        if ("no-run" not in words) if which == "all" else bool(set(which) & set(words)):
            blocks.append(body)
    return blocks


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def localized(script: str, tmp: Path, port: int) -> str:
    """``script`` with the shared places replaced by the test's own (see the module doc)."""
    places = {"/etc/gpufleet": "etc", "/var/lib/gpufleet": "var-lib", "/tmp": "scratch"}
    for own in places.values():
        (tmp / own).mkdir(exist_ok=True)
    # One pass, so that a replacement (itself under /tmp) is not replaced again.
    script = re.sub(
        r"(/etc/gpufleet|/var/lib/gpufleet|/tmp)\b", lambda m: f"{tmp}/{places[m[1]]}", script
    )
    script = re.sub(r"\bsudo ", "", script)
    # An explicit --port 6817 comes later on the line and, rewritten too, wins.
    script = re.sub(r"\bgpufleet (up|server)\b", rf"gpufleet \1 --port {port}", script)
    script = script.replace("controller.example.org", "127.0.0.1").replace("0.0.0.0", "127.0.0.1")
    return re.sub(r"\b6817\b", str(port), script)


def test_the_fence_convention() -> None:
    page = (
        "```sh\na\n```\n```sh no-run\nb\n```\n```sh live\nc\n```\n```toml\nd\n```\n"
        "```sh run\ne\n```\n"
    )
    assert runnable_blocks(page, "all") == ["a\n", "c\n", "e\n"]
    assert runnable_blocks(page, ("live",)) == ["c\n"]
    assert runnable_blocks(page, ("live", "run")) == ["c\n", "e\n"]


@pytest.mark.parametrize("page", list(PAGES))
def test_the_commands_run_as_written(page: str, tmp_path: Path) -> None:
    blocks = runnable_blocks((ROOT / page).read_text(), PAGES[page])
    assert blocks, f"{page} has no runnable blocks"
    work = tmp_path / "work"
    work.mkdir()
    for shipped in ("examples", "deploy"):
        shutil.copytree(ROOT / shipped, work / shipped)
    script = localized(FIRST_SHELL.get(page, "") + "".join(blocks), tmp_path, free_port())
    for tool in ("curl", "sqlite3", "prometheus", "prometheus-alertmanager", "amtool"):
        if re.search(rf"\b{tool} ", script):
            assert shutil.which(tool), f"{page} uses {tool}: install it (.ci/run does)"
    assert "/tmp/" not in script.replace(str(tmp_path), ""), script
    stop = 'for p in $(jobs -p); do kill -TERM "$p"; wait "$p"; done\necho END-OF-COMMANDS\n'
    status, out, err = run_bash(f"set -eux\n{script}\n{stop}", work, TIMEOUT_S)
    assert status == 0, err[-4000:]
    assert out.rstrip().endswith("END-OF-COMMANDS"), err[-4000:]
