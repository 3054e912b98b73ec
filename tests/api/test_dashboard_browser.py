"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by selenium) against a live controller with agents.

The controller runs its scheduling loop on the wall clock, served by uvicorn on
127.0.0.1; three real ``gpufleet agent`` processes hold nodes ``a1`` and
``a2`` (four A100s each) and ``m1`` (a MIG-partitioned A100 beside a whole
one, whose declared telemetry reports XID 48, a double-bit ECC error, on GPU 1:
its health check masks that GPU and the node keeps working); ``d1`` is declared
and has no agent. Real jobs run on them: two whole GPUs and a half GPU on
``a1``, a MIG slice on ``m1``; ``a2`` is drained; one job waits. The
operator signs in through the page's form, and the cluster map must show
each node's GPU cells in the states the controller has, with a hover naming
the job and its user. Screenshots go to the test's own folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.live import client, serve
from gpufleet.adapters.store import sqlite_url
from gpufleet.adapters.tomlfile import read_toml
from gpufleet.api.app import create_app
from gpufleet.api.routers.agents import stop_long_polls
from gpufleet.controller.config import config_from_dict
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import setup_from_config

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None or importlib.util.find_spec("selenium") is None,
    reason="needs Debian's chromium and chromium-driver, and selenium",
)

NODES = """\
[[nodes]]
names = "a[1-2]"
cpu_milli = 8000
memory_mib = 16384
gpus = { model = "A100-80GB", count = 4 }

[[nodes]]
names = "m1"
cpu_milli = 8000
memory_mib = 16384
gpus = { model = "A100-80GB", count = 2, mig = { "0" = "3g.40gb@0,2g.20gb@4,1g.10gb@6" } }

[[nodes]]
names = "d1"
cpu_milli = 8000
memory_mib = 16384
gpus = { model = "A100-80GB", count = 4 }
"""
TELEMETRY = {
    "a1": (
        "[[gpus]]\nindex = 0\nutil_pct = 87.0\ntemp_c = 71\npower_w = 250.4\n"
        "[[gpus]]\nindex = 1\nutil_pct = 12.0\n"
    ),
    "m1": "[[gpus]]\nindex = 1\nxid_last = 48\n",
}
AGENTS = ("a1", "a2", "m1")
CONFIG: dict[str, Any] = {
    "server": {"interval_s": 1, "heartbeat_interval_s": 1, "kill_grace_s": 1},
    "policy": {"accounts": [{"name": "vision"}]},
    "principals": [
        {"name": "ops", "role": "operator"},
        {"name": "alice", "role": "user", "accounts": ["vision"]},
        {"name": "bob", "role": "user", "accounts": ["vision"]},
    ],
}
# Each node's cells by state, as the map must colour them.
EXPECTED = {
    "a1": {"allocated": 2, "shared": 1, "free": 1},
    "a2": {"draining": 4},
    "m1": {"mig": 1, "unhealthy": 1},
    "d1": {"offline": 4},
}
WAIT_S = 60.0  # the first cycle compiles the placement kernels
ADMIN = Principal(user="root", role="admin")


def _until(done: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@contextlib.contextmanager
def live_site(tmp: Path) -> Iterator[tuple[str, dict[str, str], dict[str, str]]]:
    """The served controller and its agents; yields (URL, tokens by user, job ids)."""
    inventory = tmp / "nodes.toml"
    inventory.write_text(NODES)
    config = config_from_dict({**CONFIG, **read_toml(inventory)}, "test")
    setup = setup_from_config(config.build("test"), config.to_dict())
    controller = Controller(setup=setup, db_url=sqlite_url(tmp / "data"))
    controller.start()
    agents: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as stack:
        stack.callback(controller.stop)
        app = create_app(controller)
        url = stack.enter_context(serve(app))
        tokens = {
            who: controller.create_token(principal=ADMIN, name=who, user=who, role=role).token
            for who, role in (("ops", "operator"), ("alice", "user"), ("bob", "user"))
        }
        stack.callback(_stop, app, agents)
        for node in AGENTS:
            agents.append(_agent(controller, url, tmp, inventory, node))
        ops = stack.enter_context(client(url, tokens["ops"]))
        _until(lambda: _states(ops) == {n: "idle" for n in AGENTS} | {"d1": "unknown"}, "agents")
        jobs = _run_jobs(url, tokens, ops, tmp)
        stack.callback(_cancel_all, ops, jobs)
        yield url, tokens, jobs


def _agent(
    controller: Controller, url: str, tmp: Path, inventory: Path, node: str
) -> subprocess.Popen[bytes]:
    token = controller.create_token(
        principal=ADMIN, name=node, user=f"node-{node}", role="node", node=node
    ).token
    telemetry = tmp / f"{node}.telemetry.toml"
    telemetry.write_text(TELEMETRY.get(node, ""))
    argv = [
        sys.executable, "-m", "gpufleet.cli.main", "agent", "--server", url,
        "--inventory", str(inventory), "--node", node, "--telemetry", str(telemetry),
        "--state-dir", str(tmp / f"agent-{node}"), "--same-user",
    ]  # fmt: skip
    log = (tmp / f"agent-{node}.log").open("wb")
    env = {**os.environ, "GPUFLEET_AGENT_TOKEN": token}
    # A session of its own: the agent is signalled alone, never the test's group.
    proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)
    log.close()
    return proc


def _stop(app: Any, agents: list[subprocess.Popen[bytes]]) -> None:
    stop_long_polls(app)
    for proc in agents:
        proc.send_signal(signal.SIGTERM)
    for proc in agents:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _states(api: httpx.Client) -> dict[str, str]:
    return {n["name"]: n["state"] for n in api.get("/v1/nodes").json()}


def _run_jobs(url: str, tokens: dict[str, str], ops: httpx.Client, tmp: Path) -> dict[str, str]:
    """Submit the jobs, drain a2, and wait until the map shows what EXPECTED says."""
    shapes = {
        "whole": ("alice", {"gpus_per_node": 2, "nodelist": ["a1"]}),
        "share": ("bob", {"gpu_milli": 500, "nodelist": ["a1"]}),
        "slice": ("alice", {"mig_profile": "1g.10gb", "mig_count": 1, "nodelist": ["m1"]}),
        "waits": ("bob", {"gpus_per_node": 4, "nodelist": ["a1"]}),
    }
    assert ops.post("/v1/nodes/a2/drain", json={"reason": "new cables"}).status_code == 200
    jobs = {}
    for name, (who, shape) in shapes.items():
        body = {"name": name, "command": ["sleep", "600"], "workdir": str(tmp), **shape}
        with client(url, tokens[who]) as api:
            answer = api.post("/v1/jobs", json=body)
        assert answer.status_code == 201, answer.text
        jobs[name] = answer.json()["job_id"]

    def shown() -> bool:
        nodes = {n["name"]: n for n in ops.get("/v1/dashboard/map").json()["nodes"]}
        states = {name: dict(Counter(n["gpus"])) for name, n in nodes.items()}
        # A MIG GPU shows as such held or not: its slice must be held too.
        return states == EXPECTED and nodes["m1"]["mig_used"] == [1, 0]

    _until(shown, "the jobs to run and the readings to arrive")
    listed = ops.get("/v1/jobs").json()["jobs"]
    assert {j["name"]: j["state"] for j in listed} == {
        "whole": "RUNNING",
        "share": "RUNNING",
        "slice": "RUNNING",
        "waits": "PENDING",
    }, [(j["name"], j["reason"]) for j in listed]
    return jobs


def _cancel_all(ops: httpx.Client, jobs: dict[str, str]) -> None:
    for job_id in jobs.values():
        ops.post(f"/v1/jobs/{job_id}/cancel")
    _until(lambda: not ops.get("/v1/jobs", params={"state": "RUNNING"}).json()["jobs"], "cancels")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,900")
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})
    driver = webdriver.Chrome(
        options=options, service=Service(str(DRIVER), log_output=str(tmp_path / "driver.log"))
    )
    try:
        yield driver
    finally:
        driver.quit()


def _ready(driver: Any, page: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.body.dataset.ready") in (page, "error")
    )
    assert driver.execute_script("return document.body.dataset.ready") == page, driver.find_element(
        "id", "main"
    ).text


def test_the_cluster_map_shows_every_gpu_in_its_state(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    with live_site(tmp_path) as (url, tokens, jobs):
        browser.get(url + "/")
        _ready(browser, "signin")
        browser.find_element(By.NAME, "token").send_keys(tokens["ops"])
        browser.find_element(By.CSS_SELECTOR, "#signin button").click()
        _ready(browser, "map")
        cells = browser.find_elements(By.CSS_SELECTOR, "#map .gpu")
        assert len(cells) == sum(sum(states.values()) for states in EXPECTED.values())
        shown = {}
        for block in browser.find_elements(By.CSS_SELECTOR, "#map .node"):
            name = block.get_attribute("aria-label").split()[0]
            classes = [c.get_attribute("class") for c in block.find_elements(By.CLASS_NAME, "gpu")]
            shown[name] = dict(Counter(c.removeprefix("gpu s-") for c in classes))
        assert shown == EXPECTED
        browser.save_screenshot(str(tmp_path / "cluster-map.png"))

        # Hovering a whole GPU of alice's job names the job and its user.
        held = browser.find_elements(By.CSS_SELECTOR, "#map .node[aria-label^='a1 '] .s-allocated")
        ActionChains(browser).move_to_element(held[0]).perform()
        tip = browser.find_element(By.ID, "tip")
        assert tip.is_displayed()
        assert f"job {jobs['whole']} whole: alice (vision)" in tip.text

        # The queue names the waiting job's reason; the node page the unhealthy GPU.
        browser.execute_script("location.hash = '#/queue'")
        _ready(browser, "queue")
        row = browser.find_element(By.XPATH, f"//tr[td/a[text()='{jobs['waits']}']]")
        assert "Resources" in row.text
        # The job page: its two GPUs on a1, each with a line of its utilisation.
        browser.execute_script(f"location.hash = '#/jobs/{jobs['whole']}'")
        _ready(browser, "jobs")
        gpus = browser.find_elements(By.CSS_SELECTOR, "#job-gpus tbody tr")
        assert [r.text.split()[0] for r in gpus] == ["a1", "a1"]
        assert len(browser.find_elements(By.CSS_SELECTOR, "#job-gpus polyline")) == 2
        # A node's readings: GPU 1's temperature and power were never read, so no figure.
        browser.execute_script("location.hash = '#/nodes/a1'")
        _ready(browser, "nodes")
        rows = browser.find_elements(By.CSS_SELECTOR, "#main table tbody tr")
        cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows[:2]]
        assert cells[0][5:8] == ["87%", "71 C", "250 W"]
        assert cells[1][5:8] == ["12%", "", ""]
        browser.execute_script("location.hash = '#/nodes/m1'")
        _ready(browser, "nodes")
        assert "unhealthy" in browser.find_element(By.ID, "main").text
        browser.save_screenshot(str(tmp_path / "node-m1.png"))
        # No script error and no failed request on any page.
        assert [e["message"] for e in browser.get_log("browser")] == []
    for shot in ("cluster-map.png", "node-m1.png"):
        assert (tmp_path / shot).read_bytes().startswith(b"\x89PNG"), shot
