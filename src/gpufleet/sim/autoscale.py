"""Autoscaling in the simulator: the simulated provider, and cost against JCT.

``SimProvider`` is the ``engine.fleet.Provider`` of a replay: a node asked
for comes up ``boot_s`` later (a ``NODE_BOOT`` event), and one deleted
before then never does. The replay driver (``sim.driver``) asks its
``Fleet`` after each instant that may change the answer and bills each
pool node from its request to its deletion.

``compare`` replays one trace on one cluster several times: once with every
pool fixed at its ``max_nodes`` (the cluster an operator would buy for the
peak) and once per autoscaler setting (``idle_s`` x ``pending_s``), and
reports each run's cost (GPU-hours billed x price), GPU-hours, mean JCT and
nodes created; ``write_curve`` writes them as JSON, CSV and a cost-against-
JCT plot.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.core.model import Node
from gpufleet.core.pools import NodePool
from gpufleet.engine.fleet import Fleet
from gpufleet.policies.autoscale import AutoscaleArgs, autoscaler
from gpufleet.sim.events import EventQueue, Kind

if TYPE_CHECKING:
    from gpufleet.sim.driver import SimResult

FIXED = "fixed"
"""The name of the run with every pool fixed at its maximum size."""


class SimProvider:
    """Nodes appear ``boot_s`` after they are asked for (an event on the replay's queue)."""

    def __init__(self, queue: EventQueue) -> None:
        self.queue = queue
        self.booting: dict[str, Node] = {}

    def create(self, pool: NodePool, node: Node, now: int) -> None:
        self.booting[node.name] = node
        self.queue.push(now + pool.boot_s, Kind.NODE_BOOT, node.name)

    def delete(self, pool: NodePool, name: str, now: int) -> None:
        self.booting.pop(name, None)  # one still booting never comes up

    def booted(self, name: str) -> Node | None:
        """The node whose boot event came, or None if it was deleted meanwhile."""
        return self.booting.pop(name, None)


def fleet_for(pools: Sequence[NodePool], args: AutoscaleArgs | None) -> Fleet:
    """A fleet over ``pools`` run by the ``[autoscale]`` table's plugin (its defaults
    without one)."""
    return Fleet(pools, autoscaler(args))


def fixed(pools: Sequence[NodePool]) -> list[NodePool]:
    """The pools held at their maximum size: what the autoscaler is compared with."""
    return [replace(p, min_nodes=p.max_nodes) for p in pools]


@dataclass(frozen=True)
class Point:
    """One run of the comparison."""

    policy: str
    idle_s: int | None
    pending_s: int | None
    cost: float
    gpu_hours: float
    mean_jct_s: float
    jobs: int
    nodes_created: int

    @property
    def label(self) -> str:
        if self.idle_s is None:
            return self.policy
        return f"{self.policy} idle {self.idle_s} s, pending {self.pending_s} s"


def point(policy: str, args: AutoscaleArgs | None, result: SimResult) -> Point:
    """A run's point from its result (which must have had a fleet)."""
    from gpufleet.sim.metrics import summarize  # it reads the driver, which reads this module

    assert result.fleet is not None
    summary = summarize(result)
    return Point(
        policy=policy,
        idle_s=args.idle_s if args else None,
        pending_s=args.pending_s if args else None,
        cost=round(result.fleet.cost, 4),
        gpu_hours=round(result.fleet.gpu_hours, 4),
        mean_jct_s=round(summary["jct_mean_s"] or 0.0, 2),
        jobs=summary["completed"],
        nodes_created=result.fleet.created,
    )


def ratios(points: Sequence[Point]) -> dict[str, dict[str, float]]:
    """Each autoscaled run's cost and mean JCT over the fixed run's."""
    base = next(p for p in points if p.policy == FIXED)
    return {
        p.label: {
            "cost_ratio": round(p.cost / base.cost, 4) if base.cost else 0.0,
            "jct_ratio": round(p.mean_jct_s / base.mean_jct_s, 4) if base.mean_jct_s else 0.0,
        }
        for p in points
        if p.policy != FIXED
    }


def curve_json(points: Sequence[Point]) -> dict[str, object]:
    """The runs (with their labels) and the ratios, as ``autoscale.json`` holds them."""
    return {"runs": [asdict(p) | {"label": p.label} for p in points], "ratios": ratios(points)}


def write_curve(points: Sequence[Point], out: Path, title: str) -> list[Path]:
    """``autoscale.json``, ``autoscale.csv`` and ``autoscale.png`` (cost against mean
    JCT, one point per run, the autoscaled ones joined by idle time) in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "autoscale.json", out / "autoscale.csv", out / "autoscale.png"]
    rows = [asdict(p) | {"label": p.label} for p in points]
    paths[0].write_text(json.dumps(curve_json(points), indent=2) + "\n")
    with paths[1].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for pending in sorted({p.pending_s for p in points if p.pending_s is not None}):
        line = sorted(
            (p for p in points if p.pending_s == pending), key=lambda p: p.idle_s or 0
        )
        ax.plot(
            [p.mean_jct_s / 60 for p in line],
            [p.cost for p in line],
            marker="o",
            label=f"autoscaled, pending {pending} s",
        )
        for p in line:
            ax.annotate(f"idle {p.idle_s} s", (p.mean_jct_s / 60, p.cost), fontsize=7)
    for p in points:
        if p.policy == FIXED:
            ax.scatter([p.mean_jct_s / 60], [p.cost], marker="s", color="black", label=FIXED)
    ax.set_xlabel("mean JCT, minutes")
    ax.set_ylabel("cost (GPU-hours x price)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths[2], dpi=120)
    plt.close(fig)
    return paths


def settings(
    idle: Sequence[int], pending: Sequence[int], base: AutoscaleArgs
) -> list[AutoscaleArgs]:
    """The autoscaler's settings of a comparison: every idle time by every pending time."""
    return [base.model_copy(update={"idle_s": i, "pending_s": p}) for p in pending for i in idle]
