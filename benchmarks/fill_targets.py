"""Placement targets on openb and its variants: does ``default`` keep its lead over ``fgd``
without turning any kind of pod away?

For the bundled pod list (``openb``), each variant of ``fill_variants.py`` and
the MIG variant of ``fill_mig.py`` (``mig``), the fill runs ``default`` and
``fgd`` on seeds 42-51 and checks, on the mean over seeds:

* ``lead_at_100``: ``default`` minus ``fgd`` at 100% arrived (never below 0);
* ``worst_gap``: the least of ``default`` minus ``fgd`` over arrived levels
  50-130% (at least -0.3);
* ``worst_refusal_excess``: the most, over request types, by which the share
  of a type's pods that ``default`` refuses by 100% arrived exceeds ``fgd``'s,
  in points (at most 2; types with fewer than 10 pods per seed are left out,
  as a few pods make a noisy share);
* ``worst_class_excess`` (reported, not a target): the same over request
  classes, the types pooled by what they ask of the GPUs (``cpu``, ``share``,
  ``1gpu``, ..., one per MIG profile), with ``refused_pct``, each policy's
  share of all arrived pods refused: whether a type's excess is the mix or
  the smallest pods of a class, which a policy leaving more fragments fits
  more often;
* ``seconds_per_run``: the median wall time of a ``default`` run (at most 5).

``--workloads held-out`` checks the variants placement was not developed on
(``fill_variants.HELD_OUT``) instead. ``--nodes all`` fills the same cluster
with its CPU-only nodes too (the bundled ``openb_node_list_all_node.csv``, 1,523
nodes) in place of its 1,213 GPU nodes. ``python benchmarks/fill_targets.py
--json`` prints the result as JSON on its last line; ``--workers`` runs
(workload, policy, seed) on that many processes. ``--quick`` fills every tenth
openb node (``quick.py``) with seed 42 only, for openb and spec33 unless
``--workloads`` says otherwise, on one worker process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import quick  # benchmarks/quick.py, beside this script
from fill_mig import MIG_SHARE, mig_nodes, mig_pods
from fill_variants import HELD_OUT, VARIANTS, constrainable_models
from gpufleet.core.model import Node
from gpufleet.sim.fill import FillRun, run_fill
from gpufleet.sim.openb import ALL_NODES, DEFAULT_NODES, DEFAULT_PODS, TracePod, bundled, load_pods
from gpufleet.sim.report import summarize

MIN_PODS = 10
NODE_LISTS = {"gpu": DEFAULT_NODES, "all": ALL_NODES}


def pods_of(workload: str, nodes: list[Node]) -> list[TracePod]:
    base = load_pods(bundled(DEFAULT_PODS))
    if workload == "openb":
        return base
    if workload == "mig":
        return mig_pods(base, MIG_SHARE, random.Random(7))
    variant = {**VARIANTS, **HELD_OUT}[workload]
    return variant(base, constrainable_models(nodes), random.Random(7))


def one(job: tuple[str, str, int, bool, str]) -> tuple[str, FillRun]:
    workload, policy, seed, small, node_list = job
    nodes = quick.openb_nodes(small, NODE_LISTS[node_list])
    if workload == "mig":
        nodes = mig_nodes(nodes)
    return workload, run_fill(nodes, pods_of(workload, nodes), policy, seed, record=False)


def request_class(kind: str) -> str:
    """The class of a ``sim.fill.request_type``: what it asks of the GPUs, shares pooled."""
    gpus = kind.split()[0]
    return "share" if gpus.startswith("share") else gpus


def pooled(by_type: dict[str, dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Pods arrived and % of them refused per request class (and ``all``), from
    ``refused_by_type``."""
    counts: dict[str, tuple[float, float]] = {}
    for kind, t in by_type.items():
        for c in (request_class(kind), "all"):
            arrived, refused = counts.get(c, (0.0, 0.0))
            counts[c] = (arrived + t["arrived"], refused + t["arrived"] * t["refused_pct"])
    return {c: (arrived, refused / arrived) for c, (arrived, refused) in counts.items()}


def compare(runs: list[FillRun]) -> dict[str, Any]:
    by = {s.policy: s for s in summarize(runs)}
    mine, theirs = by["default"], by["fgd"]
    curves = {
        p: [statistics.fmean(r.at(k) for r in runs if r.policy == p) for k in range(50, 131)]
        for p in ("default", "fgd")
    }
    excess = [
        t["refused_pct"] - theirs.refused_by_type[k]["refused_pct"]
        for k, t in mine.refused_by_type.items()
        if t["arrived"] >= MIN_PODS
    ]
    worst_type = max(
        (k for k, t in mine.refused_by_type.items() if t["arrived"] >= MIN_PODS),
        key=lambda k: (
            mine.refused_by_type[k]["refused_pct"] - theirs.refused_by_type[k]["refused_pct"]
        ),
    )
    mine_c, theirs_c = pooled(mine.refused_by_type), pooled(theirs.refused_by_type)
    by_class = {
        c: pct - theirs_c[c][1]
        for c, (arrived, pct) in mine_c.items()
        if c != "all" and arrived >= MIN_PODS
    }
    worst_class = max(by_class, key=by_class.__getitem__)
    return {
        "default_at_100": round(mine.alloc_pct_at_100, 3),
        "fgd_at_100": round(theirs.alloc_pct_at_100, 3),
        "lead_at_100": round(mine.alloc_pct_at_100 - theirs.alloc_pct_at_100, 3),
        "worst_gap": round(min(a - b for a, b in zip(*curves.values(), strict=True)), 3),
        "worst_refusal_excess": round(max(excess), 2),
        "worst_type": worst_type,
        "worst_class_excess": round(by_class[worst_class], 2),
        "worst_class": worst_class,
        "refused_pct": {"default": round(mine_c["all"][1], 2), "fgd": round(theirs_c["all"][1], 2)},
        "default_first_refusal_pct": mine.first_refusal_pct,
        "fgd_first_refusal_pct": theirs.first_refusal_pct,
        "seconds_per_run": round(mine.seconds_per_run, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads",
        help="W1,W2,... (default openb and every variant; held-out: fill_variants.HELD_OUT's)",
    )
    parser.add_argument("--seeds", help="FIRST-LAST (default 42-51; 42 with --quick)")
    parser.add_argument("--workers", type=int, help="processes (default: CPUs; 1 with --quick)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--nodes", choices=NODE_LISTS, default="gpu", help="openb's GPU nodes (default) or all"
    )
    parser.add_argument("--quick", action="store_true", help="1/10 nodes, 1 seed, 2 workloads")
    args = parser.parse_args()
    seeds = quick.fill_seeds(args.seeds, args.quick)
    everything = ",".join(["openb", *VARIANTS, "mig"])
    named = args.workloads or ("openb,spec33" if args.quick else everything)
    workloads = list(HELD_OUT) if named == "held-out" else named.split(",")
    known = {"openb", "mig", *VARIANTS, *HELD_OUT}
    unknown = [w for w in workloads if w not in known]
    if unknown:
        parser.error(f"--workloads: unknown workload {unknown[0]!r}")
    policies = ("default", "fgd")
    jobs = [(w, p, s, args.quick, args.nodes) for w in workloads for p in policies for s in seeds]
    runs: dict[str, list[FillRun]] = {w: [] for w in workloads}
    workers = args.workers or (1 if args.quick else os.cpu_count() or 1)
    with ProcessPoolExecutor(workers) as pool:
        for workload, run in pool.map(one, jobs):
            runs[workload].append(run)
    results = {w: compare(runs[w]) for w in workloads}
    if not args.json:
        for w, r in results.items():
            print(w, r, flush=True)
    met = all(
        r["lead_at_100"] >= 0 and r["worst_gap"] >= -0.3 and r["worst_refusal_excess"] <= 2
        for r in results.values()
    )
    print(json.dumps({"results": results, "seeds": seeds, "targets_met": met}))


if __name__ == "__main__":
    main()
