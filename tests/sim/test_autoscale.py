"""Autoscaling in the simulator: nodes boot, take work, idle out and bill."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpufleet.core.model import GPU, Node, Request
from gpufleet.core.pools import NodePool
from gpufleet.sim.autoscale import fixed
from gpufleet.sim.profile import ProfileError, profile_from_dict, replay
from gpufleet.sim.traces.record import TraceJob
from gpufleet.sim.traces.synthetic import WorkloadShape, generate

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Node("t", 32_000, 256 * 1024, tuple(GPU(i, "L4", 24 * 1024) for i in range(4)))
POOL = NodePool("gpu", TEMPLATE, min_nodes=0, max_nodes=2, boot_s=100, price_gpu_hour=1.5)
PROFILE = profile_from_dict(
    {"ordering": {"plugin": "fifo"}, "autoscale": {"pending_s": 30, "idle_s": 200}}, "as"
)


def job(jid: str, at: int, gpus: int, duration: int) -> TraceJob:
    return TraceJob(
        id=jid, submit_time=at, duration_s=duration, request=Request(gpus=gpus),
        time_limit_s=2 * duration,
    )  # fmt: skip


def test_a_node_boots_for_waiting_work_and_idles_out() -> None:
    r = replay([], [job("a", 0, 4, 1000)], PROFILE, pools=[POOL])
    (rec,) = r.jobs
    # demand at 0 ripens at 30 s, the node is asked for then and boots 100 s later
    assert rec.first_start == 130 and rec.end == 1130
    # the replay ends with the last job: nothing is left to delete it for
    assert r.fleet is not None and (r.fleet.created, r.fleet.deleted) == (1, 0)
    # billed from 30 s to the end of the replay, 1130 s: 1100 s x 4 GPUs x 1.5 per GPU-h
    assert r.fleet.cost == pytest.approx(1100 / 3600 * 4 * 1.5)
    # utilisation is measured against the pool at full size: 2 nodes x 4 GPUs
    assert r.capacity_milli == 2 * 4 * 1000


def test_idle_node_goes_then_a_new_one_boots() -> None:
    jobs = [job("a", 0, 4, 100), job("b", 2000, 4, 100)]
    r = replay([], jobs, PROFILE, pools=[POOL])
    b = next(x for x in r.jobs if x.trace.id == "b")
    # a ends at 230; its node idles out at 430, so b waits 30 s and a 100 s boot again
    assert b.first_start == 2130
    assert r.fleet is not None and r.fleet.created == 2


def test_growth_follows_demand_up_to_max() -> None:
    jobs = [job(f"j{k}", 0, 4, 600) for k in range(3)]
    r = replay([], jobs, PROFILE, pools=[POOL])
    starts = sorted(x.first_start for x in r.jobs)
    # two nodes at most: two jobs at 130, the third when one ends (730)
    assert starts == [130, 130, 730]
    assert r.fleet is not None and r.fleet.created == 2


def test_fixed_pool_is_up_from_the_start_and_bills_throughout() -> None:
    r = replay([], [job("a", 0, 4, 1000)], PROFILE, pools=fixed([POOL]))
    assert r.jobs[0].first_start == 0
    # two nodes x 1000 s x 4 GPUs x 1.5
    assert r.fleet is not None and r.fleet.cost == pytest.approx(2 * 1000 / 3600 * 4 * 1.5)
    assert r.fleet.created == 0


def test_a_job_only_a_pool_node_fits_is_not_unschedulable() -> None:
    small = [Node("cpu1", 8000, 65536)]
    r = replay(small, [job("g", 0, 4, 50)], PROFILE, pools=[POOL])
    assert r.jobs[0].state == "completed"


def test_a_job_no_node_can_hold_grows_nothing() -> None:
    r = replay([], [job("big", 0, 8, 50)], PROFILE, pools=[POOL])
    assert r.jobs[0].state == "unschedulable"
    assert r.fleet is not None and r.fleet.created == 0


def test_daily_swing_moves_arrivals_toward_the_peak() -> None:
    shape = WorkloadShape(daily_swing=0.9, peak_hour=14)
    flat = generate(4000, seed=3, gpus_total=64)
    daily = generate(4000, seed=3, gpus_total=64, shape=shape)
    assert [j.duration_s for j in flat] == [j.duration_s for j in daily]
    hours = np.array([j.submit_time % 86_400 // 3600 for j in daily])
    peak, trough = np.sum((hours >= 12) & (hours < 16)), np.sum((hours >= 0) & (hours < 4))
    # rate at the peak is (1 + 0.9) / (1 - 0.9) = 19x the trough's; allow for noise
    assert peak > 5 * trough
    assert daily == sorted(daily, key=lambda j: j.submit_time)


def gpufleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_cli_writes_the_curve(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = gpufleet(
        "sim", "autoscale", "--cluster", "examples/elastic-cluster.toml",
        "--profile", "examples/autoscale.toml",
        "--trace", "synthetic:n_jobs=60,seed=1,gpus_total=64,load=0.5,daily_swing=0.9",
        "--idle", "300,1800", "--pending", "60", "--out", str(out), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout.splitlines()[-1])
    runs = payload["runs"]
    assert [(r["policy"], r["idle_s"]) for r in runs] == [
        ("fixed", None), ("demand", 300), ("demand", 1800)
    ]  # fmt: skip
    assert all(r["jobs"] == 60 for r in runs)
    # a shorter idle time never costs more on the same trace and pending time
    assert runs[1]["cost"] <= runs[2]["cost"] < runs[0]["cost"]
    assert set(payload["ratios"]) == {runs[1]["label"], runs[2]["label"]}
    assert sorted(p.name for p in out.iterdir()) == [
        "autoscale.csv", "autoscale.json", "autoscale.png"
    ]  # fmt: skip
    assert (out / "autoscale.csv").read_text().count("\n") == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "examples/cluster.toml"], "--cluster: examples/cluster.toml declares no"),
        (["--cluster", "examples/elastic-cluster.toml", "--idle", "5m"], "--idle: '5m' is not"),
        (["--cluster", "examples/elastic-cluster.toml", "--pending", "1,1"], "--pending: 1 is"),
    ],
)
def test_cli_bad_input_is_one_line(args: list[str], message: str) -> None:
    done = gpufleet("sim", "autoscale", "--trace", "synthetic:n_jobs=5,seed=1", *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_a_window_caps_a_pool_by_the_hour() -> None:
    h = 3600
    day = {
        "name": "day", "days": ["weekdays"], "start": "08:00", "end": "20:00",
        "policy": {"autoscale": {"max_nodes": {"gpu": 1}}},
    }  # fmt: skip
    capped = profile_from_dict(
        {
            "ordering": {"plugin": "fifo"},
            "autoscale": {"pending_s": 30, "idle_s": 200},
            "windows": [day],
            "sim": {"time_origin": "2026-03-02T00:00:00Z"},  # a Monday
        },
        "capped",
    )
    jobs = [job(k, 9 * h, 4, 1000) for k in "ab"] + [job(k, 21 * h, 4, 1000) for k in "cd"]
    r = replay([], jobs, capped, pools=[POOL])
    starts = {x.trace.id: x.first_start for x in r.jobs}
    # by day one node (asked at +30 s, up 100 s later): b waits for a's end on it;
    # at night the pool's own max, 2: both boot at once
    assert starts == {"a": 9 * h + 130, "b": 9 * h + 1130, "c": 21 * h + 130, "d": 21 * h + 130}
    assert r.fleet is not None and r.fleet.created == 3


def test_a_cap_on_an_unknown_pool_is_refused_as_live(tmp_path: Path) -> None:
    window = (
        '[sim]\ntime_origin = "epoch"\n[[windows]]\nname = "night"\nstart = "20:00"\n'
        "[windows.policy.autoscale.max_nodes]\nghost = 1\n"
    )
    for table, key in (
        ("[autoscale.max_nodes]\nghost = 2\n", "autoscale.max_nodes.ghost"),
        (window, "windows.night.policy.autoscale.max_nodes.ghost"),
    ):
        profile = tmp_path / "ghost.toml"
        profile.write_text(f'extends = "{ROOT / "examples" / "autoscale.toml"}"\n{table}')
        cluster = ROOT / "examples" / "elastic-cluster.toml"
        done = gpufleet(
            "sim", "run", "--cluster", str(cluster), "--profile", str(profile),
            "--trace", "synthetic:n_jobs=5,seed=1,gpus_total=8",
        )  # fmt: skip
        assert done.returncode == 2
        expected = f"error: {profile}: {key}: unknown pool 'ghost' (the cluster's pools: gpu)\n"
        assert done.stderr == expected
    # any replay with pools checks them, whoever calls it
    ghost = profile_from_dict({"autoscale": {"max_nodes": {"ghost": 1}}}, "as")
    with pytest.raises(ProfileError, match=r"^as: autoscale\.max_nodes\.ghost: unknown pool"):
        replay([], [], ghost, pools=[POOL])
