"""The agent's sync loop against a stand-in controller on 127.0.0.1."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.fake_controller import FakeController, serve
from agent.support import Launches
from gpufleet.agent.daemon import Agent, Refused
from gpufleet.agent.runner import Runner

INVENTORY = {"names": "n1", "cpu_milli": 4000, "memory_mib": 8192}


def eventually(check: Callable[[], bool], timeout: float = 8.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


@contextmanager
def running_agent(url: str, state: Path, max_wait_s: float = 0.3) -> Iterator[Agent]:
    """An agent syncing in a thread; short long polls, so that it stops quickly."""
    runner = Runner(state, "n1", same_user=True)
    agent = Agent(
        server=url,
        token="gf_node",
        node="n1",
        inventory=INVENTORY,
        runner=runner,
        poll_s=0.05,
        max_backoff_s=0.5,
        max_wait_s=max_wait_s,
    )
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        agent.stop()
        thread.join(5)
        runner.close()
        assert not thread.is_alive()


def test_register_start_report_acknowledge(tmp_path: Path, launch: Launches) -> None:
    fake = FakeController()
    with serve(fake) as url, running_agent(url, tmp_path / "state") as agent:
        eventually(lambda: fake.registered)
        assert fake.registrations[0].inventory == INVENTORY
        fake.want(launch("1", argv=["sh", "-c", "echo $GPUFLEET_NODE; exit 5"]))
        eventually(lambda: len(fake.reports) >= 1)
        report = fake.reports[0]
        assert (report.job_id, report.run, report.state, report.exit_code) == ("1", 1, "exited", 5)
        assert launch.output("1") == "n1\n"
        # The reply acknowledged it: the agent sends it no more.
        eventually(lambda: agent.runner.reports() == [])
        syncs_before = len(fake.syncs)
        eventually(lambda: len(fake.syncs) > syncs_before)
        assert len(fake.reports) == 1


def test_the_report_does_not_wait_for_the_long_poll(tmp_path: Path, launch: Launches) -> None:
    fake = FakeController()
    fake.heartbeat_s = 30.0
    # Without a flush of its own, the report would wait for the 2 s long poll.
    with serve(fake) as url, running_agent(url, tmp_path / "state", max_wait_s=2.0):
        fake.want(launch("1", argv=["sleep", "0.3"]))
        started = time.monotonic()
        eventually(lambda: len(fake.reports) == 1, timeout=5)
        assert time.monotonic() - started < 1.2


def test_a_repeated_start_runs_the_job_once(tmp_path: Path, launch: Launches) -> None:
    fake = FakeController()
    fake.resend_starts = True
    marker = tmp_path / "runs.txt"
    with serve(fake) as url, running_agent(url, tmp_path / "state"):
        fake.want(launch("1", argv=["sh", "-c", f"echo once >> {marker}; sleep 0.5"]))
        eventually(lambda: len(fake.reports) >= 1)
        time.sleep(0.3)  # more syncs, still answered with the start
    assert marker.read_text() == "once\n"


def test_kill_from_the_controller(tmp_path: Path, launch: Launches) -> None:
    fake = FakeController()
    with serve(fake) as url, running_agent(url, tmp_path / "state") as agent:
        fake.want(launch("1", argv=["sleep", "30"]))
        eventually(lambda: [r.job_id for r in agent.runner.running()] == ["1"])
        fake.kill("1", 1, "TERM", 1)
        eventually(lambda: len(fake.reports) >= 1)  # a repeat is allowed, and ignored
        assert (fake.reports[0].state, fake.reports[0].signal) == ("signalled", 15)


def test_jobs_go_on_while_the_controller_is_away(tmp_path: Path, launch: Launches) -> None:
    port = _free_port()
    fake = FakeController()
    state = tmp_path / "state"
    with running_agent(f"http://127.0.0.1:{port}", state) as agent:
        time.sleep(0.5)  # a few failed attempts
        with serve(fake, port) as url:
            eventually(lambda: fake.registered)
            fake.want(launch("1", argv=["sh", "-c", "sleep 1; exit 7"]))
            eventually(lambda: len(agent.runner.running()) == 1)
        # The controller is gone; the job ends meanwhile and is reported later.
        time.sleep(1.5)
        assert len(agent.runner.reports()) == 1
        with serve(fake, port):
            eventually(lambda: len(fake.reports) >= 1)
    assert url.endswith(str(port))
    assert {(r.job_id, r.exit_code) for r in fake.reports} == {("1", 7)}


def test_an_unknown_node_registers_again(tmp_path: Path) -> None:
    fake = FakeController()
    with serve(fake) as url, running_agent(url, tmp_path / "state"):
        eventually(lambda: fake.registered)
        fake.forget_node()
        eventually(lambda: len(fake.registrations) == 2)


def test_a_retired_node_waits_to_be_stopped(tmp_path: Path) -> None:
    """Once registered, a refused registration does not end the agent: a node that
    autoscaling retires is forgotten and its token revoked, and the provider's stop may
    come after the agent's next sync. It waits, as after a refused sync, until it is
    stopped or let in again."""
    fake = FakeController()
    with serve(fake) as url, running_agent(url, tmp_path / "state"):
        eventually(lambda: fake.registered)
        fake.refusals = [404, 401]  # the sync finds the node gone, the registration the token
        eventually(lambda: not fake.refusals)
        eventually(lambda: len(fake.registrations) == 2)


def test_a_refused_token_ends_the_agent(tmp_path: Path) -> None:
    fake = FakeController()
    runner = Runner(tmp_path / "state", "n1", same_user=True)
    with serve(fake) as url:
        agent = Agent(server=url, token="wrong", node="n1", inventory=INVENTORY, runner=runner)
        with pytest.raises(Refused) as refused:
            agent.run()
    runner.close()
    assert refused.value.status == 401


def test_server_errors_are_retried(tmp_path: Path) -> None:
    fake = FakeController()
    fake.refusals = [503, 500]
    with serve(fake) as url, running_agent(url, tmp_path / "state"):
        eventually(lambda: fake.registered)


def test_the_backoff_never_exceeds_the_heartbeat_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A controller that restarts calls a node lost after its heartbeat timeout (a few
    intervals): an agent backing off longer than an interval would come back too late."""
    fake = FakeController()
    fake.heartbeat_s = 1.0
    runner = Runner(tmp_path / "state", "n1", same_user=True)
    with serve(fake) as url:
        agent = Agent(server=url, token="gf_node", node="n1", inventory=INVENTORY, runner=runner)
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        eventually(lambda: fake.registered)
    # The controller is gone. Doubling from 0.5 s, the third pause would be 1 to 2 s.
    eventually(lambda: caplog.text.count("retrying in") >= 4)
    agent.stop()
    thread.join(5)
    runner.close()
    pauses = [float(m) for m in re.findall(r"retrying in ([0-9.]+) s", caplog.text)]
    assert max(pauses) <= 1.0, pauses


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
