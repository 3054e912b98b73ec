"""``gpufleet token`` and ``gpufleet server`` as a user runs them, on both stores.

The token commands run in-process; the server runs as its own process on
a free port of 127.0.0.1 and must stop cleanly on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.cli.main import main
from gpufleet.controller.tokens import CACHE_TTL_S
from store.databases import BACKENDS, Database, database

CONFIG = """
[[nodes]]
names = "n1"
cpu_milli = 8000
memory_mib = 32768
gpus = { model = "L4", count = 2 }

[[principals]]
name = "root"
role = "admin"
"""


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    yield from database(request.param, tmp_path / "data")


def _store_args(db: Database) -> list[str]:
    if db.schema is None:
        return ["--data", str(Path(db.url.removeprefix("sqlite:///")).parent)]
    # The schema rides in the URL, as an operator would put it.
    db.open().close()  # creates the schema
    return ["--db", f"{db.url}?options=-csearch_path%3D{db.schema}"]


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_token_create_list_revoke(db: Database, capsys: pytest.CaptureFixture[str]) -> None:
    store = _store_args(db)
    code, out, err = _run(["token", "create", "--user", "root", "--role", "admin", *store], capsys)
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("gf_") and "\n" not in secret  # stdout holds the secret alone
    code, out, _ = _run(["token", "list", "--json", *store], capsys)
    [listed] = json.loads(out)
    assert (listed["user"], listed["role"], listed["revoked"]) == ("root", "admin", False)
    assert secret not in out
    assert _run(["token", "revoke", listed["id"], *store], capsys)[0] == 0
    assert _run(["token", "revoke", listed["id"], *store], capsys)[0] == 0
    code, out, _ = _run(["token", "list", "--json", *store], capsys)
    assert json.loads(out)[0]["revoked"] is True


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["token", "create", "--user", "u", "--role", "god"], "--role"),
        (["token", "create", "--user", "u", "--role", "node"], "--node"),
        (["token", "create", "--user", "u", "--role", "user", "--node", "n1"], "--node"),
        (["token", "create", "--user", "", "--role", "user"], "--user"),
        (["token", "revoke", "nope"], "--data"),  # no store there to revoke from
    ],
)
def test_token_bad_input_is_one_line(
    args: list[str], where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run([*args, "--data", str(tmp_path)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {' '.join(args[:2])}: {where}: ") and err.count("\n") == 1


def test_token_needs_one_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for store in ([], ["--data", str(tmp_path), "--db", "sqlite://"]):
        code, _, err = _run(["token", "list", *store], capsys)
        assert code == 2 and err == "error: token list: give either --data DIR or --db URL\n"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _server(tmp_path: Path, store: list[str], port: int) -> subprocess.Popen[str]:
    config = tmp_path / "controller.toml"
    config.write_text(CONFIG)
    command = [sys.executable, "-m", "gpufleet.cli.main", "server", "--config", str(config)]
    return subprocess.Popen(
        [*command, *store, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError("the server did not come up")


def test_server_serves_tokens_from_the_cli_and_stops_on_sigterm(
    db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _store_args(db)
    secrets = {}
    for role, extra in (("admin", []), ("node", ["--node", "n1"])):
        create = ["token", "create", "--user", f"the-{role}", "--role", role, *extra, *store]
        code, secret, err = _run(create, capsys)
        assert code == 0, err
        secrets[role] = {"Authorization": f"Bearer {secret.strip()}"}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    data = [] if db.schema is None else ["--data", str(tmp_path / "data")]
    process = _server(tmp_path, [*store, *data], port)
    parked: list[httpx.Response] = []
    try:
        _wait_healthy(url, process)
        nodes = httpx.get(f"{url}/v1/nodes", headers=secrets["admin"], timeout=10)
        assert nodes.status_code == 200, nodes.text
        assert [n["name"] for n in nodes.json()] == ["n1"]
        assert httpx.get(f"{url}/v1/nodes", timeout=10).status_code == 401
        inventory = {"names": "n1", "cpu_milli": 8000, "memory_mib": 32768}
        registered = httpx.post(
            f"{url}/v1/agents/n1/register",
            json={"inventory": inventory},
            headers=secrets["node"],
            timeout=10,
        )
        assert registered.status_code == 200, registered.text
        # An agent's long poll, parked when the stop comes, must not hold it up.
        poll = threading.Thread(
            target=lambda: parked.append(
                httpx.post(
                    f"{url}/v1/agents/n1/sync",
                    json={"wait_s": 30},
                    headers=secrets["node"],
                    timeout=60,
                )
            )
        )
        poll.start()
        time.sleep(1)
    finally:
        stop = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    poll.join()
    assert time.monotonic() - stop < 5
    assert process.returncode == 0, err
    assert "Traceback" not in err and "ERROR" not in err, err
    assert parked[0].status_code == 200


def test_server_refuses_a_bad_config_and_a_busy_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[server]\ninterval_s = -1\nmystery = 1\n")
    command = ["server", "--data", str(tmp_path)]
    code, out, err = _run([*command, "--config", str(bad)], capsys)
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"error: {bad}: server.") for line in lines)
    good = tmp_path / "good.toml"
    good.write_text(CONFIG)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        code, out, err = _run([*command, "--config", str(good), "--port", port], capsys)
    assert (code, out) == (2, "")
    assert err.startswith("error: --port: cannot listen on 127.0.0.1:")
    assert err.count("\n") == 1


def test_a_token_revoked_from_the_cli_stops_working_on_a_running_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--data", str(tmp_path / "data")]
    create = ["token", "create", "--user", "root", "--role", "admin", *store]
    code, secret, err = _run(create, capsys)
    assert code == 0, err
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = _server(tmp_path, store, port)
    try:
        _wait_healthy(url, process)
        headers = {"Authorization": f"Bearer {secret.strip()}"}
        assert httpx.get(f"{url}/v1/tokens", headers=headers, timeout=10).status_code == 200
        [listed] = httpx.get(f"{url}/v1/tokens", headers=headers, timeout=10).json()
        assert _run(["token", "revoke", listed["id"], *store], capsys)[0] == 0
        # The server trusts a token it has checked for CACHE_TTL_S seconds, no longer.
        deadline = time.monotonic() + CACHE_TTL_S + 2
        while True:
            status = httpx.get(f"{url}/v1/tokens", headers=headers, timeout=10).status_code
            if status != 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == 401
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
