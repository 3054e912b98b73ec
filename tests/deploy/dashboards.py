"""The Grafana dashboards of deploy/grafana/, read for the tests: panels, expressions and
variables, and the expressions made concrete for Prometheus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from deploy.conftest import DEPLOY

GRAFANA = DEPLOY / "grafana"
BOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")
# What Grafana puts in place of its variables, for checking the expressions alone.
VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m"}


def board(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel but rows, those inside collapsed rows included."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p["targets"]]


def concrete(expr: str, values: dict[str, str] | None = None) -> str:
    """``expr`` with Grafana's variables replaced: intervals by durations, the
    dashboard's own by ``values``, or else by a regex matching any."""
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    for name, value in (values or {}).items():
        expr = expr.replace(f"${name}", value)
    return re.sub(r"\$\w+", ".*", expr)
