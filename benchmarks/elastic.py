"""Elastic and predictive scheduling: the figures of runtime prediction, MIG re-partitioning
and autoscaling, each measured in the simulator on its own seeded workload.

* ``elastic_predict.py``: ``pred_jct_over_oracle`` (target at most 1.15) and
  ``pred_jct_over_limits`` (at most 0.7): mean JCT of SJF by learnt runtime
  estimates over SJF by the true runtimes, and over SJF by the users' limits.
* ``elastic_mig.py``: ``mig_wait_ratio`` (at most 0.5): MIG jobs' mean wait
  with the re-partitioning planner over the best static layout's.
* ``elastic_autoscale.py``: ``autoscale_cost_ratio`` (at most 0.7) and
  ``autoscale_jct_ratio`` (at most 1.2): the autoscaler's cost and mean JCT
  over a cluster fixed at the pool's maximum size.

Each module's docstring documents its workload; ``measure(quick)`` returns
its figures. ``python benchmarks/elastic.py --json`` prints the five
figures as one JSON object on its last line, with ``parts``: each module's
figures as it returned them and the ``seconds`` it took; stderr says which
targets are met. ``--quick`` runs each module on its small input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import elastic_autoscale  # benchmarks/, beside this script
import elastic_mig
import elastic_predict

PARTS: dict[str, Callable[[bool], dict[str, float]]] = {
    "predict": elastic_predict.measure,
    "mig": elastic_mig.measure,
    "autoscale": elastic_autoscale.measure,
}
TARGETS = {
    "pred_jct_over_oracle": 1.15,
    "pred_jct_over_limits": 0.7,
    "mig_wait_ratio": 0.5,
    "autoscale_cost_ratio": 0.7,
    "autoscale_jct_ratio": 1.2,
}
"""Each figure's target: at most this."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--quick", action="store_true", help="each part on its small input")
    args = parser.parse_args()
    out: dict[str, float] = {}
    parts: dict[str, dict[str, float]] = {}
    for name, measure in PARTS.items():
        began = time.perf_counter()
        figures = measure(args.quick)
        parts[name] = {**figures, "seconds": round(time.perf_counter() - began, 1)}
        for key in TARGETS.keys() & figures.keys():
            value, target = figures[key], TARGETS[key]
            verdict = "met" if value <= target else "not met"
            print(f"{key}: {value:.3f} (target at most {target}: {verdict})", file=sys.stderr)
            out[key] = value
    missing = [key for key in TARGETS if key not in out]
    if missing:
        raise SystemExit(f"elastic: no figure for {', '.join(missing)}")
    result = {**{key: out[key] for key in TARGETS}, "parts": parts}
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))

if __name__ == "__main__":
    main()
