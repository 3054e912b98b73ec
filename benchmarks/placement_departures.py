"""Placement with departures: what placement does to queueing when jobs also end.

The bundled openb pod list replayed in time (each pod from its creation to its
deletion, ``traces.openb_timed``) on the bundled openb nodes, under one queue
policy (FIFO with EASY backfill) and each placement policy in turn. As
recorded, the trace asks for about 14 GPUs on average over 149 days, of the
cluster's 6,212, so no job ever waits and placement cannot matter.
``--compress F`` divides every submit time by F (durations unchanged), so the
pods arrive F times as fast, and ``--every K`` keeps every K-th node: at 400
and 8 (152 nodes, about 780 GPUs) jobs queue.
Reports mean queueing delay, p95 job completion time and mean GPU allocation
(allocated GPU-seconds over capacity x makespan).

``python benchmarks/placement_departures.py --json`` prints, as its last line,
one object per setting (``x1`` as recorded, ``x400/8`` compressed on an
eighth of the nodes) and placement. ``--quick`` replays the first
300 pods on every tenth node (``quick.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import quick  # benchmarks/quick.py, beside this script
from gpufleet.sim.metrics import summarize
from gpufleet.sim.openb import DEFAULT_PODS, bundled
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces import load_trace

KEYS = ("queue_mean_s", "jct_p95_s", "gpu_alloc_mean_pct", "unschedulable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="best-fit,fgd,default")
    parser.add_argument("--compress", default="1,400", help="F1,F2,...: submit times / F")
    parser.add_argument("--every", default="1,8", help="K1,K2,...: every K-th node, per F")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="300 pods, every tenth node")
    args = parser.parse_args()
    jobs = load_trace(f"openb:{bundled(DEFAULT_PODS)}")[: 300 if args.quick else None]
    nodes = quick.openb_nodes(args.quick)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    settings = zip(args.compress.split(","), args.every.split(","), strict=True)
    for factor, every in ((int(f), int(k)) for f, k in settings):
        name = f"x{factor}" if every == 1 else f"x{factor}/{every}"
        results[name] = {}
        timed = [dataclasses.replace(j, submit_time=j.submit_time // factor) for j in jobs]
        for policy in args.policies.split(","):
            profile = profile_from_dict(
                {
                    "ordering": {"plugin": "fifo"},
                    "backfill": {"mode": "easy"},
                    "placement": {"plugin": policy},
                },
                policy,
            )
            summary = summarize(replay(nodes[::every], timed, profile))
            row = {k: summary[k] for k in KEYS}
            results[name][policy] = row
            if not args.json:
                print(name, policy, row, flush=True)
    print(json.dumps({"results": results}))


if __name__ == "__main__":
    main()
