"""Golden replays: the simulator's results over small traces, pinned.

Each case replays a trace under a profile and compares every job's first
start, end, final state, run count and the digest of its last placement,
and the summary metrics, with ``fixtures/golden/CASE.json``. Any change to
how the simulator or the cycle decides shows up here; a deliberate change
regenerates the fixtures with ``GPUFLEET_GOLDEN_UPDATE=1 pytest
tests/sim/test_golden.py`` and says why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpufleet.core.model import Node
from gpufleet.sim.driver import SimResult
from gpufleet.sim.metrics import summarize
from gpufleet.sim.openb import DEFAULT_NODES, bundled, load_nodes
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces import load_trace
from gpufleet.sim.traces.record import TraceJob

HERE = Path(__file__).parent
GOLDEN = HERE / "fixtures" / "golden"
TRACES = HERE / "traces" / "fixtures"
UPDATE = os.environ.get("GPUFLEET_GOLDEN_UPDATE") == "1"

FIFO_STRICT = {
    "ordering": {"plugin": "fifo"},
    "placement": {"plugin": "first-fit"},
    "sim": {"interval_s": 600},
}
FAIRSHARE_BACKFILL = {
    "ordering": {"plugin": "multifactor"},
    "placement": {"plugin": "best-fit"},
    "backfill": {"mode": "easy", "resolution_s": 60},
    "accounts": [{"name": "acct0", "shares": 3.0}, {"name": "acct1", "shares": 1.0}],
    "sim": {"interval_s": 600},
}
PREEMPTION = {
    "ordering": {"plugin": "multifactor"},
    "placement": {"plugin": "best-fit"},
    "backfill": {"mode": "conservative", "resolution_s": 60},
    "preemption": {"enabled": True},
    "sim": {"interval_s": 600, "checkpoint_interval_s": 900},
}
FAULTS = {**PREEMPTION, "sim": {**PREEMPTION["sim"], "mtbf_s": 400_000, "mttr_s": 1800, "seed": 3}}
SYNTHETIC = "synthetic:n_jobs=200,seed=7,gpus_total=64,load=1.5,accounts=3,users=12"


def nodes8x8() -> list[Node]:
    return load_nodes(HERE / "fixtures" / "nodes8x8.csv")


def openb_nodes() -> list[Node]:
    return load_nodes(bundled(DEFAULT_NODES))[:12]


def openb_jobs() -> list[TraceJob]:
    return load_trace(f"openb:{bundled('openb_pod_list_default.csv')}")[:300]


CASES: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    "synthetic-fifo-strict": (nodes8x8, lambda: load_trace(SYNTHETIC), FIFO_STRICT),
    "synthetic-fairshare-backfill": (nodes8x8, lambda: load_trace(SYNTHETIC), FAIRSHARE_BACKFILL),
    "synthetic-preemption-faults": (nodes8x8, lambda: load_trace(SYNTHETIC), FAULTS),
    "openb-fairshare-backfill": (openb_nodes, openb_jobs, FAIRSHARE_BACKFILL),
    "openb-preemption": (openb_nodes, openb_jobs, PREEMPTION),
    "tiresias-fifo-strict": (
        nodes8x8,
        lambda: load_trace(f"tiresias:{TRACES / 'tiresias.csv'}"),
        FIFO_STRICT,
    ),
    "swf-preemption": (nodes8x8, lambda: load_trace(f"swf:{TRACES / 'tiny.swf'}"), PREEMPTION),
    "generic-fairshare-backfill": (
        nodes8x8,
        lambda: load_trace(f"generic:{TRACES / 'generic.csv'}"),
        FAIRSHARE_BACKFILL,
    ),
}


def digest(result: SimResult) -> dict[str, Any]:
    """What the fixture pins: per-job outcome and the summary (wall time left out)."""
    jobs = {}
    for r in result.jobs:
        placed = repr(sorted((a.node, a.gpus, a.gpu_milli, a.mig) for a in r.last_assignments))
        jobs[r.job.id] = [
            r.first_start,
            r.end,
            r.state,
            r.run,
            r.preemptions,
            r.failures,
            hashlib.sha256(placed.encode()).hexdigest()[:12],
        ]
    summary = {k: v for k, v in summarize(result).items() if k != "wall_s"}
    return {"jobs": jobs, "summary": _rounded(summary)}


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in values.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    make_nodes, make_jobs, policy = CASES[case]
    result = replay(make_nodes(), make_jobs(), profile_from_dict(policy, case))
    got = digest(result)
    path = GOLDEN / f"{case}.json"
    if UPDATE:
        path.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
    want = json.loads(path.read_text())
    assert got["summary"] == want["summary"]
    assert got["jobs"] == want["jobs"]
