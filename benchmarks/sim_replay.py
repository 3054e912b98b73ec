"""How fast does the simulator replay a trace through the full scheduling cycle?

* **openb replay**: the bundled openb pod list (8,152 pods) replayed in time
  (creation to deletion) on the bundled 1,213 openb GPU nodes, with
  multifactor priority (Fair Tree fairshare), EASY backfill and the default
  placement; a cycle at most once a minute of virtual time (``min_gap_s``).
* **synthetic 100k**: 100,000 jobs from the shipped seeded generator
  (``synthetic:n_jobs=100000,seed=1,gpus_total=8192``) on 1,024 nodes x 8
  A100-80GB GPUs, same profile.
* **peak RSS** of the process after both.

Times cover the replay itself (``Simulation.run``, trace loading excluded).
``python benchmarks/sim_replay.py --json`` prints the result as JSON on its
last line; ``--only openb`` or ``--only synthetic`` runs one of them. ``--quick``
replays the first 300 openb pods on every tenth openb node (``quick.py``) and
500 synthetic jobs on 32 nodes, under the same keys.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Any

import quick  # benchmarks/quick.py, beside this script
from gpufleet.core.model import GPU, Node
from gpufleet.sim.metrics import summarize
from gpufleet.sim.openb import DEFAULT_PODS, bundled
from gpufleet.sim.profile import SimProfile, profile_from_dict, replay
from gpufleet.sim.traces import load_trace

POLICY: dict[str, Any] = {
    "ordering": {"plugin": "multifactor", "multifactor": {"fairshare": {"algorithm": "fair_tree"}}},
    "backfill": {"mode": "easy"},
    "placement": {"plugin": "default"},
    # Event-triggered cycles at most once a minute of virtual time, as a
    # controller batches a burst of submissions; the periodic cycle also runs each minute.
    "sim": {"interval_s": 60, "min_gap_s": 60},
}
SYNTHETIC = "synthetic:n_jobs=100000,seed=1,gpus_total=8192"
QUICK_SYNTHETIC = "synthetic:n_jobs=500,seed=1,gpus_total=256"
QUICK_OPENB_PODS = 300


def synthetic_nodes(count: int) -> list[Node]:
    gpus = tuple(GPU(index=i, model="A100-80GB", memory_mib=80 * 1024) for i in range(8))
    return [Node(f"node{i:04d}", 128_000, 1024 * 1024, gpus) for i in range(count)]


def timed(
    nodes: list[Node], trace: str, profile: SimProfile, first: int | None = None
) -> tuple[float, dict[str, Any]]:
    """Seconds to replay the trace's ``first`` jobs (all by default), and the summary."""
    jobs = load_trace(trace)[:first]
    start = time.perf_counter()
    result = replay(nodes, jobs, profile)
    return time.perf_counter() - start, summarize(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--only", choices=("openb", "synthetic"))
    parser.add_argument("--quick", action="store_true", help="300 openb pods, 500 synthetic jobs")
    args = parser.parse_args()
    profile = profile_from_dict(POLICY, "multifactor-easy-default")
    out: dict[str, float | None] = {"openb_replay_s": None, "synthetic_100k_s": None}
    if args.only in (None, "openb"):
        nodes = quick.openb_nodes(args.quick)
        first = QUICK_OPENB_PODS if args.quick else None
        seconds, summary = timed(nodes, f"openb:{bundled(DEFAULT_PODS)}", profile, first)
        out["openb_replay_s"] = round(seconds, 2)
        print(f"openb: {seconds:.1f} s, {summary['cycles']} cycles", file=sys.stderr)
    if args.only in (None, "synthetic"):
        trace = QUICK_SYNTHETIC if args.quick else SYNTHETIC
        seconds, summary = timed(synthetic_nodes(32 if args.quick else 1024), trace, profile)
        out["synthetic_100k_s"] = round(seconds, 2)
        print(f"synthetic: {seconds:.1f} s, {summary['cycles']} cycles", file=sys.stderr)
    # ru_maxrss is in KiB on Linux
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
