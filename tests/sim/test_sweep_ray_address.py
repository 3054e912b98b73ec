"""``sim sweep --ray``: an address nothing answers at fails in one line, in seconds."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.sim.grid import GridError, check_ray_address, run_grid, spec_from_dict

NODES = str(Path(__file__).parent / "fixtures" / "nodes8x8.csv")
SMALL = "synthetic:n_jobs=60,seed=2,gpus_total=64,max_duration_s=3600"


def closed_port() -> int:
    """A loopback port that was free a moment ago, so nothing listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def args(tmp_path: Path) -> list[str]:
    spec = tmp_path / "spec.toml"
    spec.write_text('[grid]\n"backfill.mode" = ["easy"]\n')
    return ["sim", "sweep", "--cluster", NODES, "--trace", SMALL, "--spec", str(spec)]


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_closed_port_fails_fast_in_one_line(
    args: list[str], capfd: pytest.CaptureFixture[str], scheme: str
) -> None:
    address = f"{scheme}127.0.0.1:{closed_port()}"
    started = time.monotonic()
    assert main([*args, "--ray", address]) == 2
    assert time.monotonic() - started < 10  # ray.init alone retried for minutes
    err = capfd.readouterr().err  # capfd: Ray logs to file descriptor 2 directly
    assert err.startswith(f"error: --ray {address}: no Ray cluster answers at 127.0.0.1:")
    assert err.count("\n") == 1


def test_auto_checks_the_address_in_ray_address(
    args: list[str], capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port()}")
    assert main([*args, "--ray", "auto"]) == 2
    err = capfd.readouterr().err
    assert err.startswith("error: --ray auto: no Ray cluster answers at 127.0.0.1:")
    assert err.count("\n") == 1


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", ":6379"])
def test_malformed_address_names_the_forms(address: str) -> None:
    with pytest.raises(GridError, match=r"expected 'local', 'auto' or HOST:PORT"):
        check_ray_address(address)


def test_listening_address_passes() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_ray_address(f"127.0.0.1:{server.getsockname()[1]}")  # raises nothing


def test_run_grid_checks_the_address_before_ray_does() -> None:
    # Called from Python, not only through the command line.
    spec = spec_from_dict({"grid": {"backfill.mode": ["easy"]}}, Path("."))
    started = time.monotonic()
    with pytest.raises(GridError, match=r"no Ray cluster answers at 127\.0\.0\.1:"):
        run_grid(NODES, SMALL, spec, ray_address=f"127.0.0.1:{closed_port()}")
    assert time.monotonic() - started < 10
