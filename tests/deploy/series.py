"""What gpufleet exports, for checking the rules and dashboards that read it.

``exported_series`` scrapes a real controller (SQLite, manual clock, two
agents sending every GPU reading, running and pending jobs, an account
tree) and returns every series name it serves with its labels (and the
scrape's, ``job`` and ``instance``), so a rule or a panel that names a
series or label gpufleet does not export fails its test. ``metric_names``
picks the series names out of a PromQL expression.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from controller.harness import ADMIN, ANA, BOB, Cluster, spec
from gpufleet.adapters.prometheus import exposition
from gpufleet.api.agent_schemas import AgentSync, GpuReading
from gpufleet.core.accounts import Account, AccountTree, User
from store.databases import database

PROMETHEUS_OWN = {"up": frozenset({"job", "instance"})}
"""Series Prometheus makes itself, about each scrape, and their labels."""

FUNCTIONS = frozenset(
    [
        "abs",
        "absent",
        "absent_over_time",
        "avg_over_time",
        "ceil",
        "changes",
        "clamp",
        "clamp_max",
        "clamp_min",
        "count_over_time",
        "day_of_month",
        "day_of_week",
        "day_of_year",
        "days_in_month",
        "delta",
        "deriv",
        "exp",
        "floor",
        "histogram_quantile",
        "holt_winters",
        "hour",
        "idelta",
        "increase",
        "irate",
        "label_join",
        "label_replace",
        "last_over_time",
        "ln",
        "log10",
        "log2",
        "max_over_time",
        "min_over_time",
        "minute",
        "month",
        "predict_linear",
        "present_over_time",
        "quantile_over_time",
        "rate",
        "resets",
        "round",
        "scalar",
        "sgn",
        "sort",
        "sort_desc",
        "sqrt",
        "stddev_over_time",
        "stdvar_over_time",
        "sum_over_time",
        "time",
        "timestamp",
        "vector",
        "year",
    ]
)
KEYWORDS = frozenset(
    [
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "Inf",
        "NaN",
    ]
)


def metric_names(expr: str) -> set[str]:
    """The series an expression reads: its identifiers less functions, keywords, label
    lists and matchers, strings, durations, numbers and Grafana's ``$variables``."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', "", expr)
    expr = re.sub(r"\$\{[^}]*\}|\$\w+", "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"(?<![\w:])\d[\w.]*", "", expr)
    return set(re.findall(r"[A-Za-z_:][\w:]*", expr)) - FUNCTIONS - KEYWORDS


def exported_series(tmp: Path) -> dict[str, frozenset[str]]:
    """Every series name a busy controller serves at ``/metrics`` (and Prometheus' own)
    with the names of its labels."""
    tree = AccountTree(
        [Account("vision"), Account("nlp")], [User("ana", "vision"), User("bob", "nlp")]
    )
    db = next(database("sqlite", tmp))
    cluster = Cluster(db, accounts=tree)
    try:
        cluster.register()
        ctl = cluster.ctl
        ctl.submit(principal=ANA, spec=spec(gpus_per_node=4))
        ctl.submit(principal=BOB, spec=spec(nodes=2, gpus_per_node=4))
        ctl.run_cycle_now()
        for node in ("n1", "n2"):
            gpus = [
                GpuReading(
                    index=i, uuid=f"GPU-{node}-{i}", util_pct=50.0, temp_c=60.0, power_w=300.0
                )
                for i in range(4)
            ]
            ctl.sync_agent(principal=ADMIN, node=node, body=AgentSync(gpus=gpus))
        text = exposition(ctl).decode()
    finally:
        cluster.ctl.stop()
    labels: dict[str, set[str]] = {name: set(known) for name, known in PROMETHEUS_OWN.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels, {"job", "instance"})
    return {name: frozenset(known) for name, known in labels.items()}
