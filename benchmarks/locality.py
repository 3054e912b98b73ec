"""How often does placement make the best locality choice to be had, with departures?

A topology-rich cluster: 8 nodes of 8 GPUs, bridged as 4 NVLink pairs
(GPUs 0-1, 2-3, ...) over 2 NUMA nodes (GPUs 0-3 and 4-7), under three
switches of 3, 2 and 3 nodes. Each seed draws 200 requests from a mix of
1-GPU tasks, half-GPU shares, 2- and 4-GPU tasks and gangs of 2 x 4 and
2 x 8 GPUs; each request stays for 5 to 40 arrivals, and the requests whose
time is up leave before the next one arrives.

Before placing a request, the best locality to be had is worked out from the
free GPUs alone, independently of any policy:

* a 2- or 4-GPU task: one NVLink domain if some feasible node has that many
  free GPUs in one domain, else one NUMA node if one has, else spread;
* a gang: one switch if some switch has as many feasible nodes as the gang
  has members.

A placement is *best* when it reaches that class (the same NVLink domain or
NUMA node for all the task's GPUs; all the gang's nodes under one switch).
Requests that fit nowhere are not counted. ``python benchmarks/locality.py
--json`` prints, as its last line, the share of best choices per policy and
request kind, over seeds 1-5. ``--quick`` runs seed 1 with 60 requests.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter

import numpy as np

from gpufleet.core.model import GPU, Node, Request
from gpufleet.core.placement import Placer
from gpufleet.core.state import Assignment, ClusterState
from gpufleet.policies.registry import placement_profile

SWITCHES = ("sw1",) * 3 + ("sw2",) * 2 + ("sw3",) * 3
KINDS: dict[str, tuple[Request, float]] = {
    "1gpu": (Request(gpus=1, cpu_milli=8000, memory_mib=65536), 0.30),
    "share": (Request(gpu_milli=500, cpu_milli=4000, memory_mib=32768), 0.15),
    "2gpu": (Request(gpus=2, cpu_milli=16000, memory_mib=131072), 0.20),
    "4gpu": (Request(gpus=4, cpu_milli=32000, memory_mib=262144), 0.15),
    "gang2x4": (Request(gpus=4, nodes=2, cpu_milli=32000, memory_mib=262144), 0.10),
    "gang2x8": (Request(gpus=8, nodes=2, cpu_milli=64000, memory_mib=524288), 0.10),
}
JUDGED = ("2gpu", "4gpu", "gang2x4", "gang2x8")


def cluster() -> list[Node]:
    return [
        Node(
            name=f"n{i}",
            cpu_milli=128_000,
            memory_mib=1024 * 1024,
            gpus=tuple(
                GPU(j, "A100-80GB", 80 * 1024, nvlink_domain=j // 2, numa=j // 4) for j in range(8)
            ),
            switch=switch,
        )
        for i, switch in enumerate(SWITCHES)
    ]


def feasible_free(state: ClusterState, r: Request) -> list[np.ndarray]:
    """Per node that could take one member now, the indices of its whole free GPUs."""
    out = []
    for i in range(state.num_nodes):
        free = np.flatnonzero(state.gpu_milli_free[i] == 1000)
        room = state.cpu_free[i] >= r.cpu_milli and state.mem_free[i] >= r.memory_mib
        out.append(free if room and len(free) >= r.gpus else np.zeros(0, dtype=np.int64))
    return out


def gpu_class(state: ClusterState, node: int, gpus: np.ndarray | tuple[int, ...]) -> int:
    """0: one NVLink domain, 1: one NUMA node, 2: spread."""
    g = list(gpus)
    if len(set(state.gpu_nvlink[node, g].tolist())) == 1:
        return 0
    return 1 if len(set(state.gpu_numa[node, g].tolist())) == 1 else 2


def best_class(state: ClusterState, r: Request) -> int:
    free = feasible_free(state, r)
    if r.nodes > 1:
        hosts = Counter(SWITCHES[i] for i, f in enumerate(free) if len(f))
        return 0 if any(n >= r.nodes for n in hosts.values()) else 1
    best = 2
    for i, f in enumerate(free):
        if len(f):
            domains = Counter(state.gpu_nvlink[i, f].tolist())
            numas = Counter(state.gpu_numa[i, f].tolist())
            if max(domains.values()) >= r.gpus:
                return 0
            if max(numas.values()) >= r.gpus:
                best = 1
    return best


def achieved(state: ClusterState, r: Request, done: list[Assignment]) -> int:
    if r.nodes > 1:
        return 0 if len({SWITCHES[a.node] for a in done}) == 1 else 1
    return gpu_class(state, done[0].node, done[0].gpus)


def run(policy: str, seed: int, requests: int = 200) -> tuple[Counter[str], Counter[str]]:
    rng = random.Random(seed)
    names = list(KINDS)
    kinds = rng.choices(names, weights=[KINDS[k][1] for k in names], k=requests)
    placer = Placer(placement_profile(policy, workload=[KINDS[k][0] for k in kinds], seed=seed))
    state = ClusterState(cluster())
    running: list[tuple[int, list[Assignment]]] = []
    best: Counter[str] = Counter()
    counted: Counter[str] = Counter()
    for step, kind in enumerate(kinds):
        for item in [x for x in running if x[0] <= step]:
            running.remove(item)
            for a in item[1]:
                state.release(a)
        r = KINDS[kind][0]
        target = best_class(state, r) if kind in JUDGED else 0
        done = placer.place(state, r)
        if done is None:
            continue
        running.append((step + rng.randint(5, 40), done))
        if kind in JUDGED:
            counted[kind] += 1
            best[kind] += achieved(state, r, done) <= target
    return best, counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="topology,default,best-fit,fgd")
    parser.add_argument("--seeds", help="S1,S2,... (default 1,2,3,4,5; 1 with --quick)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="seed 1, 60 requests")
    args = parser.parse_args()
    seeds = [int(s) for s in (args.seeds or ("1" if args.quick else "1,2,3,4,5")).split(",")]
    requests = 60 if args.quick else 200
    results: dict[str, dict[str, float]] = {}
    for policy in args.policies.split(","):
        best: Counter[str] = Counter()
        counted: Counter[str] = Counter()
        for seed in seeds:
            b, c = run(policy, seed, requests)
            best.update(b)
            counted.update(c)
        results[policy] = {k: round(100 * best[k] / counted[k], 1) for k in JUDGED if counted[k]}
        results[policy]["all"] = round(100 * sum(best.values()) / sum(counted.values()), 1)
        if not args.json:
            print(policy, results[policy], flush=True)
    print(json.dumps({"best_locality_pct": results, "seeds": seeds}))


if __name__ == "__main__":
    main()
