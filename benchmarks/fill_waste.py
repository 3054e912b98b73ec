"""Where the free GPU capacity sits at 100% arrived, and what an offline packing would leave.

For each seed, the fill runs under ``--policy`` until arrived requests reach
the cluster's capacity (the point the fill's headline number is taken at),
and the free milli-GPU is split three ways:

* ``beside_large_share``: free on GPUs that hold one share of 800 milli or
  more, which only the smallest shares can still use;
* ``stranded``: free on GPUs of nodes whose free CPU or memory no GPU task in
  the pod list could get, or that no share in the pod list fits;
* ``other``: the rest (free space some arriving task could still use).

``offline_bound`` packs the same arrived shares offline, largest first, each
into the GPU it fills most tightly (best-fit-decreasing), and gives every
other GPU to a whole-GPU task: the allocation that packing would reach,
``100 - waste``. It ignores CPU and memory, and online policies can beat it
slightly when late shares find no room and leave their GPU to a whole-GPU task.

``python benchmarks/fill_waste.py --json`` prints, as its last line, the mean
and per-seed figures in percent of GPU capacity. ``--quick`` fills every tenth
openb node (``quick.py``) with seed 42 only.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics

import numpy as np

import quick  # benchmarks/quick.py, beside this script
from gpufleet.core.model import MILLI, Node, Request
from gpufleet.core.placement import Placer
from gpufleet.core.state import ClusterState
from gpufleet.policies.registry import placement_profile
from gpufleet.sim.fill import sample_arrivals
from gpufleet.sim.openb import DEFAULT_PODS, TracePod, bundled, load_pods

LARGE_SHARE = 800


def offline_waste(shares: list[int]) -> int:
    """Milli-GPU left unused when ``shares`` are packed best-fit-decreasing."""
    gaps: list[int] = []  # free milli of each opened GPU, kept sorted
    for s in sorted(shares, reverse=True):
        k = bisect.bisect_left(gaps, s)
        if k == len(gaps):
            bisect.insort(gaps, MILLI - s)
        else:
            bisect.insort(gaps, gaps.pop(k) - s)
    return sum(gaps)


def free_split(state: ClusterState, held: np.ndarray, requests: list[Request]) -> dict[str, float]:
    """Free milli-GPU by where it sits, in percent of capacity (module docstring)."""
    gpu_tasks = [r for r in requests if r.gpu_count]
    min_cpu = min(r.cpu_milli for r in gpu_tasks)
    min_mem = min(r.memory_mib for r in gpu_tasks)
    min_share = min((r.gpu_milli for r in gpu_tasks if r.gpu_milli), default=MILLI)
    free = np.where(state.gpu_exists, state.gpu_milli_free, 0)
    starved = (state.cpu_free < min_cpu) | (state.mem_free < min_mem)
    beside_large = (held >= LARGE_SHARE) & (held < MILLI)
    stranded = ~beside_large & (starved[:, None] | (free < min_share))
    cap = state.gpu_milli_capacity
    parts = {
        "free": free,
        "beside_large_share": free[beside_large],
        "stranded": free[stranded],
        "other": free[~beside_large & ~stranded],
    }
    return {k: 100.0 * float(v.sum()) / cap for k, v in parts.items()}


def one_seed(nodes: list[Node], pods: list[TracePod], policy: str, seed: int) -> dict[str, float]:
    requests = [p.request for p in pods]
    state = ClusterState(nodes)
    cap = state.gpu_milli_capacity
    placer = Placer(placement_profile(policy, workload=requests, seed=seed))
    # The largest share each GPU holds alone (0 once two shares or a whole task share it).
    held = np.zeros(state.gpu_exists.shape, dtype=np.int64)
    arrived = allocated = 0
    shares: list[int] = []
    for i in sample_arrivals(pods, cap, seed):
        r = requests[i]
        arrived += r.total_gpu_milli
        shares += [r.gpu_milli] if r.gpu_milli else []
        for a in placer.place(state, r) or []:
            allocated += a.gpu_milli * len(a.gpus)
            for g in a.gpus:
                held[a.node, g] = a.gpu_milli if held[a.node, g] == 0 else MILLI
        if arrived >= cap:
            break
    out = {"alloc": 100.0 * allocated / cap, **free_split(state, held, requests)}
    out["offline_bound"] = 100.0 - 100.0 * offline_waste(shares) / cap
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="default")
    parser.add_argument("--seeds", help="FIRST-LAST (default 42-51; 42 with --quick)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="every tenth node, seed 42")
    args = parser.parse_args()
    seeds = quick.fill_seeds(args.seeds, args.quick)
    nodes = quick.openb_nodes(args.quick)
    pods = load_pods(bundled(DEFAULT_PODS))
    per_seed = {s: one_seed(nodes, pods, args.policy, s) for s in seeds}
    keys = next(iter(per_seed.values())).keys()
    mean = {k: round(statistics.mean(v[k] for v in per_seed.values()), 2) for k in keys}
    if not args.json:
        for s, v in per_seed.items():
            print(s, {k: round(x, 2) for k, x in v.items()}, flush=True)
    rounded = {s: {k: round(x, 2) for k, x in v.items()} for s, v in per_seed.items()}
    print(json.dumps({"policy": args.policy, "mean": mean, "per_seed": rounded}))


if __name__ == "__main__":
    main()
