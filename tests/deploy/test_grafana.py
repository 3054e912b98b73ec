"""The Grafana dashboards in deploy/grafana/: well formed, provisioned, and reading only
series and labels gpufleet serves, in valid PromQL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from deploy.conftest import promtool
from deploy.dashboards import (
    BOARDS,
    DATASOURCE,
    GRAFANA,
    LABEL_VALUES,
    board,
    concrete,
    expressions,
    panels,
)
from deploy.series import metric_names


def test_the_four_dashboards() -> None:
    titles = {board(p)["title"] for p in BOARDS}
    assert titles == {
        "gpufleet / Cluster overview",
        "gpufleet / GPU health",
        "gpufleet / Queue and fairness",
        "gpufleet / Job GPU use",
    }
    uids = [board(p)["uid"] for p in BOARDS]
    assert len(set(uids)) == len(uids) == 4


@pytest.mark.parametrize("path", BOARDS, ids=[p.stem for p in BOARDS])
def test_every_panel_queries_the_chosen_prometheus(path: Path) -> None:
    dashboard = board(path)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(set(ids)) == len(ids)
    for panel in panels(dashboard):
        assert panel["title"] and panel["targets"], panel
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["datasource"] == DATASOURCE


@pytest.mark.parametrize("path", BOARDS, ids=[p.stem for p in BOARDS])
def test_the_panels_read_only_series_gpufleet_serves(
    path: Path, exported: dict[str, frozenset[str]]
) -> None:
    for expr in expressions(board(path)):
        names = metric_names(expr)
        assert names, expr
        assert names <= exported.keys(), (expr, names - exported.keys())


@pytest.mark.parametrize("path", BOARDS, ids=[p.stem for p in BOARDS])
def test_the_variables_list_labels_the_series_have(
    path: Path, exported: dict[str, frozenset[str]]
) -> None:
    for variable in board(path)["templating"]["list"]:
        if variable["type"] != "query":
            continue
        found = LABEL_VALUES.match(variable["query"]["query"])
        assert found, variable["name"]
        (name,) = metric_names(found["selector"])
        assert found["label"] in exported[name], (variable["name"], name)


def test_every_expression_is_valid_promql(tmp_path: Path) -> None:
    # promtool parses rules only: each expression becomes a recording rule.
    exprs = [concrete(e) for p in BOARDS for e in expressions(board(p))]
    exprs += [
        concrete(LABEL_VALUES.match(v["query"]["query"])["selector"])  # type: ignore[index]
        for p in BOARDS
        for v in board(p)["templating"]["list"]
        if v["type"] == "query"
    ]
    rules = {"groups": [{"name": "panels", "rules": [
        {"record": f"panel:{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}  # fmt: skip
    (tmp_path / "panels.yml").write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [promtool(), "check", "rules", "panels.yml"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_the_provisioning_files() -> None:
    dashboards = yaml.safe_load((GRAFANA / "provisioning/dashboards/gpufleet.yml").read_text())
    (provider,) = dashboards["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/gpufleet.yml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
