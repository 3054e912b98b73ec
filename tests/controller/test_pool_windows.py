"""Policy windows change the autoscaler live as in the simulator: a pool capped by day
grows only once the window closes, a controller started inside the window starts capped,
and a cap must name a pool."""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from controller.harness import ADMIN, Cluster, spec
from controller.test_booting_nodes import asked
from controller.test_predict_windows import MONDAY, H, config
from controller.test_scaling import RECORD, calls
from gpufleet.controller.clock import ManualClock
from gpufleet.controller.config import ConfigError, config_from_dict
from gpufleet.controller.setup import setup_from_config
from store.databases import Database

DAY = {"name": "day", "days": ["weekdays"], "start": "08:00", "end": "20:00"}


def document(out: Path, cap: dict[str, int]) -> dict[str, Any]:
    program = [sys.executable, "-c", RECORD, str(out), "0"]
    night_only = {**DAY, "policy": {"autoscale": {"max_nodes": cap}}}
    return {
        **config(autoscale={"pending_s": 0}, windows=[night_only]),
        "pools": [
            {
                "name": "burst", "max_nodes": 2, "cpu_milli": 8000, "memory_mib": 32768,
                "gpus": {"model": "L4", "count": 2},
            }
        ],
        "provider": {
            "kind": "command", "server": "http://ctl:6817", "create": program, "delete": program
        },
    }  # fmt: skip


def test_a_pool_capped_by_day_grows_when_the_window_closes(db: Database, tmp_path: Path) -> None:
    out = tmp_path / "calls.jsonl"
    built = setup_from_config(config_from_dict(document(out, {"burst": 0})).build())
    values = {f.name: getattr(built, f.name) for f in fields(built)}
    c = Cluster(db, ManualClock(MONDAY + 9 * H), **values)  # starts inside the window
    try:
        c.ctl.submit(principal=ADMIN, spec=spec(account="vision"))
        c.ctl.run_cycle_now()
        assert asked(c) == []  # capped at 0 by day
        c.clock.set(MONDAY + 20 * H)
        c.ctl.run_cycle_now()
        assert asked(c) == ["burst-1"]
        calls(out, 1)
    finally:
        c.ctl.stop()


def test_a_cap_must_name_a_pool(tmp_path: Path) -> None:
    bad = document(tmp_path / "calls.jsonl", {"brust": 1})
    bad["policy"]["autoscale"]["max_nodes"] = {"nope": 1}
    with pytest.raises(ConfigError) as e:
        config_from_dict(bad).build()
    assert list(e.value.problems) == [
        "policy.autoscale.max_nodes.nope: unknown pool 'nope'",
        "policy.windows.day.policy.autoscale.max_nodes.brust: unknown pool 'brust'",
    ]
