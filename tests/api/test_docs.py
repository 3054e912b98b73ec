"""docs/api.md: every route is on the page, and its examples run as written.

The page's shell blocks run in order under bash against ``gpufleet up``,
moved to a temporary directory and a free port; every answer must be
something other than a 500, and the examples that are meant to fail must
fail the way the page says.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from gpufleet.api.app import create_app
from gpufleet.api.openapi import document
from gpufleet.controller.service import Controller

PAGE = Path(__file__).parents[2] / "docs" / "api.md"


def _blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S)


def test_every_route_has_an_example() -> None:
    examples = "\n".join(_blocks())
    for path in document(create_app(cast(Controller, None)))["paths"]:
        pattern = re.sub(r"\\\{\w+\\\}", r"[^/?\"\\s]+", re.escape(path))
        assert re.search(f"(GPUFLEET_URL|6817){pattern}[\"?]", examples), path


@pytest.mark.skipif(shutil.which("curl") is None, reason="the examples use curl")
def test_the_examples_run_against_gpufleet_up(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = tmp_path / "data"
    script = "\n".join(_blocks())
    up = f"gpufleet up --port {port} --data {data}"
    script = script.replace("gpufleet up --data /tmp/gpufleet-api", up)
    script = script.replace("127.0.0.1:6817", f"127.0.0.1:{port}")
    script = script.replace("/tmp/gpufleet-api", str(data)).replace("/tmp/", f"{tmp_path}/")
    assert "/tmp/" not in script.replace(str(tmp_path), "")
    script = f"set -eu\n{script}\necho\necho END-OF-EXAMPLES\nkill %1\nwait\n"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.split("END-OF-EXAMPLES")[0].rstrip()
    assert '"status":500' not in out
    assert '"field":"body.nodes"' in out and '"field":"body.colour"' in out
    assert "HTTP/1.1 401" in out
    assert '"duplicate":true' in out
    assert '"data":"hello\\n"' in out  # the job ran and its output was read
    assert '"reason":"new cables"' in out
    assert '"jobs_to_start":[]' in out
    assert '"status":403' in out.splitlines()[-1]  # the sync for another node
    # The node no agent stands behind is drained, so that no later job waits on it.
    n2 = json.loads(out[out.rindex('{"name":"n2"') :])
    assert (n2["state"], n2["reason"]) == ("drain", "example node, no agent")
