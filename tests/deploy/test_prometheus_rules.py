"""The alert rules in deploy/prometheus/: valid, unit-tested, and about series gpufleet serves.

``promtool test rules`` runs deploy/prometheus/gpufleet-rules.test.yml, which
gives each alert a case where it fires (and cases where it must not).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from deploy.conftest import DEPLOY, promtool
from deploy.series import metric_names
from gpufleet.agent.health import XID_REBOOT, XID_RESET

RULES = DEPLOY / "prometheus" / "gpufleet-rules.yml"
TESTS = DEPLOY / "prometheus" / "gpufleet-rules.test.yml"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    result = run("check", "rules", RULES.name, cwd=RULES.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = run("test", "rules", TESTS.name, cwd=TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_case_where_it_fires() -> None:
    cases = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {
        case["alertname"]
        for test in cases
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in alerts()}


def test_the_rules_read_only_series_gpufleet_serves(
    exported: dict[str, frozenset[str]],
) -> None:
    for rule in alerts():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= exported.keys(), (rule["alert"], names - exported.keys())


def test_the_example_configuration_checks(tmp_path: Path) -> None:
    for path in (DEPLOY / "prometheus").iterdir():
        shutil.copy(path, tmp_path)
    (tmp_path / "gpufleet.token").write_text("gf_secret\n")  # the file the scrape job names
    result = run("check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_the_xid_alerts_list_the_agents_xid_classes() -> None:
    """One source of truth: the agent's classes; only the class that fails the node drains."""
    rules = {rule["alert"]: rule for rule in alerts()}
    for name, codes, action in (
        ("GpuXidHardwareError", XID_RESET, None),
        ("GpuXidFallenOffBus", XID_REBOOT, "drain"),
    ):
        listed = {
            int(x)
            for x in re.findall(r"DCGM_FI_DEV_XID_ERRORS\{[^}]*\} == (\d+)", rules[name]["expr"])
        }
        assert listed == codes, name
        assert rules[name]["labels"].get("action") == action, name


def test_every_selector_matches_the_gpufleet_scrape_job() -> None:
    for rule in alerts():
        for name in metric_names(rule["expr"]):
            selectors = re.findall(rf"\b{name}(\{{[^}}]*\}})?", rule["expr"])
            assert all('job="gpufleet"' in s for s in selectors), (rule["alert"], name)


def test_metric_names_reads_promql() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (job, le) (rate(a_bucket{le="+Inf"}[10m]))) > 5'
        ' and on (job, instance) b > on () group_left () (2 * c{x=~"$v"}) unless d offset 5m'
    )
    assert metric_names(expr) == {"a_bucket", "b", "c", "d"}
