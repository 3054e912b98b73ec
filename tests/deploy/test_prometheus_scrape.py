"""A real Prometheus scrapes a running controller with two real agents.

The controller is served on 127.0.0.1; two ``gpufleet agent`` processes
declare two GPUs each and send readings from their telemetry files (no
NVML here), one with a hardware XID; a job holds one GPU. Debian's
``prometheus``, started on loopback with the example configuration
(deploy/prometheus/prometheus.yml: the metrics token from a file, the
alert rules) pointed at the controller, must then hold every GPU's
DCGM-named series with dcgm-exporter's labels and the holder's, the
scheduler's series, fire the XID alert, and answer every dashboard panel.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from api.live import serve
from cli.live import gpufleet_env
from deploy.conftest import DEPLOY
from deploy.dashboards import BOARDS, board, concrete, expressions
from deploy.live import free_port, process, until
from gpufleet.api.app import create_app
from gpufleet.controller.config import config_from_dict
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import setup_from_config
from store.databases import database

CONFIG: dict[str, Any] = {
    "server": {"interval_s": 1, "heartbeat_interval_s": 1, "kill_grace_s": 1},
    "policy": {
        "partitions": [{"name": "gpu", "default_time_s": 600}],
        "accounts": [{"name": "vision"}],
    },
    "principals": [{"name": "ana", "accounts": ["vision"]}],
}
NODES = ("n1", "n2")
MODEL = "NVIDIA A100-SXM4-80GB"
ADMIN = Principal(user="root", role="admin")


def agent_files(tmp: Path, node: str) -> Path:
    """The node's inventory, with its telemetry file beside it; returns the inventory."""
    inventory = tmp / f"{node}.toml"
    inventory.write_text(
        f'[[nodes]]\nnames = "{node}"\ncpu_milli = 8000\nmemory_mib = 16384\n'
        'gpus = { model = "A100-80GB", count = 2 }\n'
    )
    gpus = []
    for i in range(2):
        fault = "xid_last = 79\nxid_count = 1\n" if (node, i) == ("n2", 1) else ""
        gpus.append(
            f'[[gpus]]\nindex = {i}\nuuid = "GPU-{node}-{i}"\nmodel = "{MODEL}"\n'
            f"util_pct = {10 + i}\ntemp_c = {50 + i}\nmem_used_mib = 100\n"
            f"mem_free_mib = 81000\npower_w = 120\n{fault}"
        )
    (tmp / f"{node}.telemetry.toml").write_text("\n".join(gpus))
    return inventory


def prometheus_config(tmp: Path, target: str, token: str) -> Path:
    """The example configuration, scraping ``target`` every second, without Alertmanager."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["scrape_configs"][0]["static_configs"] = [{"targets": [target]}]
    del config["alerting"]
    shutil.copy(DEPLOY / "prometheus" / "gpufleet-rules.yml", tmp)
    (tmp / "gpufleet.token").write_text(token)
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


class Prometheus:
    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """``expr`` evaluated now, or at the Unix time ``at``."""
        params = {"query": expr} if at is None else {"query": expr, "time": str(at)}
        answer = self.http.get("/api/v1/query", params=params).json()
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def scraped_whole(self) -> float:
        """A moment whose latest scrape succeeded, for queries that must see one scrape.

        A failed scrape (a slow answer on a loaded machine) marks every series of the
        target stale until the next one, so queries made one after another "now" could
        see a series vanish between them.
        """

        def moment() -> float | None:
            at = time.time()
            up = self.query('up{job="gpufleet"}', at)
            return at if [s["value"][1] for s in up] == ["1"] else None

        return float(until("a successful scrape", moment))

    def firing(self) -> list[dict[str, Any]]:
        alerts = self.http.get("/api/v1/alerts").json()["data"]["alerts"]
        return [a for a in alerts if a["state"] == "firing"]


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, str]]:
    """Prometheus scraping a controller with two agents and one running job; the job id."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: apt-get install prometheus (.ci/run does)"
    tmp = tmp_path_factory.mktemp("scrape")
    db = next(database("sqlite", tmp))
    config = config_from_dict(CONFIG, "test")
    controller = Controller(
        setup=setup_from_config(config.build("test"), config.to_dict()), db_url=db.url
    )
    controller.start()
    with ExitStack() as stack:
        stack.callback(controller.stop)
        url = stack.enter_context(serve(create_app(controller)))

        def token(user: str, role: str, node: str | None = None) -> str:
            made = controller.create_token(
                principal=ADMIN,
                name=user,
                user=user,
                role=role,  # type: ignore[arg-type]
                node=node,
            )
            return made.token

        for node in NODES:
            env = gpufleet_env(GPUFLEET_AGENT_TOKEN=token(f"node-{node}", "node", node))
            argv = [
                "gpufleet", "agent", "--server", url, "--inventory", str(agent_files(tmp, node)),
                "--node", node, "--state-dir", str(tmp / f"{node}-state"), "--same-user",
            ]  # fmt: skip
            stack.enter_context(process(argv, tmp / f"{node}.log", env))
        user = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token('ana', 'user')}"}
        )
        stack.callback(user.close)
        until("both agents", lambda: len(controller.gpu_readings()) == 2)
        spec = {"command": ["sleep", "300"], "workdir": str(tmp), "gpus_per_node": 1}
        job = str(user.post("/v1/jobs", json=spec).json()["job_id"])
        until("the job to run", lambda: user.get(f"/v1/jobs/{job}").json()["state"] == "RUNNING")
        port = free_port()
        scrape = prometheus_config(tmp, url.removeprefix("http://"), token("prometheus", "metrics"))
        argv = [
            binary,
            f"--config.file={scrape}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        stack.enter_context(process(argv, tmp / "prometheus.log", dict(os.environ)))
        prometheus = Prometheus(f"http://127.0.0.1:{port}")
        stack.callback(prometheus.http.close)
        until("Prometheus", lambda: _ready(prometheus), 30)
        yield prometheus, job
        # Its agent kills it before going: no sleep outlives the test.
        user.post(f"/v1/jobs/{job}/cancel")
        until("the kill", lambda: user.get(f"/v1/jobs/{job}").json()["state"] == "CANCELLED")


def _ready(prometheus: Prometheus) -> bool:
    try:
        return prometheus.http.get("/-/ready").status_code == 200
    except httpx.TransportError:
        return False


def test_every_gpu_of_every_agent_has_its_dcgm_series(scraped: tuple[Prometheus, str]) -> None:
    prometheus, job = scraped

    def four() -> tuple[float, list[dict[str, Any]]] | None:
        at = prometheus.scraped_whole()
        found = prometheus.query("DCGM_FI_DEV_GPU_TEMP", at)
        return (at, found) if len(found) == 4 else None

    at, temps = until("4 GPU temperatures", four)
    got = {(s["metric"]["Hostname"], s["metric"]["gpu"]): s for s in temps}
    assert set(got) == {(n, str(i)) for n in NODES for i in range(2)}
    holders = 0
    for (node, gpu), series in got.items():
        labels = series["metric"]
        assert labels["UUID"] == f"GPU-{node}-{gpu}"
        assert labels["modelName"] == MODEL
        assert labels["device"] == f"nvidia{gpu}"
        assert labels["job"] == "gpufleet"  # the scrape job's, untouched
        assert labels["instance"] == node  # the example's relabelling, for dcgm dashboards
        assert float(series["value"][1]) == 50 + int(gpu)
        if "hpc_job" in labels:
            holders += 1
            assert (labels["hpc_job"], labels["user"], labels["account"]) == (job, "ana", "vision")
    assert holders == 1  # the job's one GPU
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                 "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
                 "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILURE"):  # fmt: skip
        assert len(prometheus.query(name, at)) == 4, name
    xid = prometheus.query("DCGM_FI_DEV_XID_ERRORS > 0", at)
    assert [(s["metric"]["Hostname"], s["metric"]["gpu"], s["value"][1]) for s in xid] == [
        ("n2", "1", "79")
    ]


def test_the_scheduler_series_are_scraped(scraped: tuple[Prometheus, str]) -> None:
    prometheus, _ = scraped
    at = prometheus.scraped_whole()
    running = prometheus.query("gpufleet_jobs_running", at)
    assert [(s["metric"]["partition"], s["metric"]["account"], s["value"][1]) for s in running] == [
        ("gpu", "vision", "1")
    ]
    up = prometheus.query("gpufleet_node_up == 1", at)
    assert sorted(s["metric"]["node"] for s in up) == list(NODES)
    cycles = prometheus.query("gpufleet_scheduler_cycle_duration_seconds_count", at)
    assert cycles and float(cycles[0]["value"][1]) >= 1
    started = prometheus.query("gpufleet_jobs_started_total", at)
    assert [s["value"][1] for s in started] == ["1"]

    # The XID 79 on n2 (GPU fallen off the bus) has the agent's health check drain n2,
    # so the partition's usable GPUs are n1's two: idle but for the job's, if it ran
    # there (it may have started on n2 before the drain).
    def drained() -> float | None:
        at = prometheus.scraped_whole()
        gpus = prometheus.query("gpufleet_partition_gpus", at)
        return at if [s["value"][1] for s in gpus] == ["2"] else None

    at = until("n2 drained", drained)
    held = prometheus.query('DCGM_FI_DEV_GPU_UTIL{hpc_job!="", Hostname="n1"}', at)
    idle = prometheus.query("gpufleet_partition_gpus_idle", at)
    assert [s["value"][1] for s in idle] == [str(2 - len(held))]


def test_the_rules_fire_on_the_scraped_series(scraped: tuple[Prometheus, str]) -> None:
    prometheus, _ = scraped
    alerts = until(
        "the XID alert",
        lambda: [
            a for a in prometheus.firing() if a["labels"]["alertname"] == "GpuXidFallenOffBus"
        ],
        30,
    )
    labels = alerts[0]["labels"]
    assert (labels["Hostname"], labels["gpu"], labels["action"]) == ("n2", "1", "drain")
    assert len(alerts) == 1


def test_the_dashboards_query_the_scraped_series(scraped: tuple[Prometheus, str]) -> None:
    prometheus, job = scraped
    at = prometheus.scraped_whole()
    answered = {}
    for path in BOARDS:
        for expr in expressions(board(path)):
            answered[expr] = prometheus.query(concrete(expr, {"hpc_job": job}), at)  # evaluates
    # The job's panels find its one GPU.
    mine = [expr for expr in answered if "$hpc_job" in expr]
    assert len(mine) == 8
    for expr in mine:
        assert len(answered[expr]) == 1, expr
    assert (
        answered['DCGM_FI_DEV_GPU_UTIL{hpc_job=~"(.*,)?$hpc_job(,.*)?"}'][0]["metric"]["user"]
        == "ana"
    )
    xid = answered['DCGM_FI_DEV_XID_ERRORS{Hostname=~"$Hostname", gpu=~"$gpu"} > 0']
    assert [(s["metric"]["Hostname"], s["value"][1]) for s in xid] == [("n2", "79")]
