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
last line; ``--only openb`` or ``--only synthetic`` runs one of them.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Any

from gpufleet.core.model import GPU, Node
from gpufleet.sim.metrics import summarize
from gpufleet.sim.openb import DEFAULT_NODES, DEFAULT_PODS, bundled, load_nodes
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


def synthetic_nodes() -> list[Node]:
    gpus = tuple(GPU(index=i, model="A100-80GB", memory_mib=80 * 1024) for i in range(8))
    return [Node(f"node{i:04d}", 128_000, 1024 * 1024, gpus) for i in range(1024)]


def timed(nodes: list[Node], trace: str, profile: SimProfile) -> tuple[float, dict[str, Any]]:
    jobs = load_trace(trace)
    start = time.perf_counter()
    result = replay(nodes, jobs, profile)
    return time.perf_counter() - start, summarize(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    parser.add_argument("--only", choices=("openb", "synthetic"))
    args = parser.parse_args()
    profile = profile_from_dict(POLICY, "multifactor-easy-default")
    out: dict[str, float | None] = {"openb_replay_s": None, "synthetic_100k_s": None}
    if args.only in (None, "openb"):
        nodes = load_nodes(bundled(DEFAULT_NODES))
        seconds, summary = timed(nodes, f"openb:{bundled(DEFAULT_PODS)}", profile)
        out["openb_replay_s"] = round(seconds, 2)
        print(f"openb: {seconds:.1f} s, {summary['cycles']} cycles", file=sys.stderr)
    if args.only in (None, "synthetic"):
        seconds, summary = timed(synthetic_nodes(), SYNTHETIC, profile)
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
