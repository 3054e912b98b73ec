"""What ``gpufleet sim fill --out`` writes, checked against the trace files alone.

The placement check reads only the CSV files (no gpufleet code), so anyone can
re-run it on a placements file: no GPU over 1000 milli-GPU, no node over its
CPU or memory, every task shaped as its pod asked and on an allowed model. The
allocation curve in ``curves.csv`` is rebuilt from the placements file too.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest

from gpufleet.cli.main import main
from gpufleet.core.model import Request
from gpufleet.sim.fill import FillRun, request_type
from gpufleet.sim.openb import DEFAULT_NODES, DEFAULT_PODS, bundled
from gpufleet.sim.report import summarize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NODES = FIXTURES / "nodes.csv"
PODS = FIXTURES / "pods.csv"


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def check_placements(nodes_csv: Path, pods_csv: Path, placements_csv: Path) -> None:
    """Assert the placements respect every capacity and the shape each pod asked for."""
    nodes = {row["sn"]: row for row in read(nodes_csv)}
    pods = {row["name"]: row for row in read(pods_csv)}
    gpu_used: defaultdict[tuple[str, int], int] = defaultdict(int)
    cpu_used: defaultdict[str, int] = defaultdict(int)
    mem_used: defaultdict[str, int] = defaultdict(int)
    with placements_csv.open(newline="") as handle:
        reader = csv.reader(handle)
        assert next(reader) == ["pod", "node", "gpus", "gpu_milli", "cpu_milli", "memory_mib"]
        rows = list(reader)
    assert rows
    for pod_name, node_name, gpus, gpu_milli, cpu, mem in rows:
        pod = pods[pod_name]
        assert (int(cpu), int(mem)) == (int(pod["cpu_milli"]), int(pod["memory_mib"]))
        if not node_name:  # left unplaced
            assert gpus == ""
            continue
        node = nodes[node_name]
        indices = [int(g) for g in gpus.split("|")] if gpus else []
        assert len(indices) == int(pod["num_gpu"])
        if indices:
            assert int(gpu_milli) == int(pod["gpu_milli"])
            allowed = pod["gpu_spec"].split("|") if pod["gpu_spec"] else [node["model"]]
            assert node["model"] in allowed
        for g in indices:
            assert 0 <= g < int(node["gpu"])
            gpu_used[node_name, g] += int(gpu_milli)
        cpu_used[node_name] += int(cpu)
        mem_used[node_name] += int(mem)
    assert max(gpu_used.values()) <= 1000
    for name, used in cpu_used.items():
        assert used <= int(nodes[name]["cpu_milli"])
    for name, used in mem_used.items():
        assert used <= int(nodes[name]["memory_mib"])


def gpu_capacity(nodes_csv: Path) -> int:
    return 1000 * sum(int(row["gpu"]) for row in read(nodes_csv))


def replay_allocation(nodes_csv: Path, pods_csv: Path, placements_csv: Path) -> list[float]:
    """The allocation curve, rebuilt from the placements file (one row per pod, in arrival
    order): at each whole percent of capacity arrived, the % of capacity allocated."""
    capacity = gpu_capacity(nodes_csv)
    pods = {row["name"]: row for row in read(pods_csv)}
    curve: list[float] = []
    arrived = allocated = 0
    for row in read(placements_csv):
        assert len(curve) <= 130, "a pod came after the run's last level"
        pod = pods[row["pod"]]
        arrived += int(pod["num_gpu"]) * int(pod["gpu_milli"])
        if row["gpus"]:
            allocated += len(row["gpus"].split("|")) * int(row["gpu_milli"])
        while arrived * 100 >= len(curve) * capacity and len(curve) <= 130:
            curve.append(100 * allocated / capacity)
    return curve


def replay_refusals(nodes_csv: Path, pods_csv: Path, placements_csv: Path) -> Refusals:
    """From the placements file alone: pods refused so far at each arrived level, the
    level of the first refusal (when that pod came), and the pods arrived and refused by
    100% arrived (the pod that takes arrivals to 100% among them)."""
    capacity = gpu_capacity(nodes_csv)
    pods = {row["name"]: row for row in read(pods_csv)}
    curve: list[int] = []
    arrived = refused = 0
    first: int | None = None
    at_100 = (0, 0)
    for pods_in, row in enumerate(read(placements_csv), start=1):
        pod = pods[row["pod"]]
        came_at = arrived
        arrived += int(pod["num_gpu"]) * int(pod["gpu_milli"])
        if not row["node"]:
            refused += 1
            first = came_at * 100 // capacity if first is None else first
        while arrived * 100 >= len(curve) * capacity and len(curve) <= 130:
            at_100 = (pods_in, refused) if len(curve) == 100 else at_100
            curve.append(refused)
    return curve, first, at_100


Refusals = tuple[list[int], int | None, tuple[int, int]]


def test_out_writes_curves_plot_and_placements(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    trace = ["--nodes", str(NODES), "--pods", str(PODS)]
    args = ["--policy", "best-fit,random", "--seeds", "42-43", "--workers", "1", "--json"]
    status = main(["sim", "fill", *trace, *args, "--out", str(out)])
    assert status == 0
    results = json.loads(capsys.readouterr().out.splitlines()[-1])["results"]
    names = {"curves.csv", "fill.png"} | {
        f"placements-{p}-{s}.csv" for p in ("best-fit", "random") for s in (42, 43)
    }
    assert {p.name for p in out.iterdir()} == names
    assert (out / "fill.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with (out / "curves.csv").open(newline="") as handle:
        reader = csv.reader(handle)
        assert next(reader) == ["policy", "seed", "metric", *(str(k) for k in range(131))]
        rows = {(p, int(s), m): [float(x) for x in xs] for p, s, m, *xs in reader}
    curves = {k: v for k, v in rows.items() if k[2] in ("alloc_pct", "frag_pct")}
    # 2 policies x 2 seeds x 2 metrics.
    assert len(curves) == 8
    for policy, seed in {k[:2] for k in curves}:
        placements = out / f"placements-{policy}-{seed}.csv"
        refused_curve = replay_refusals(NODES, PODS, placements)[0]
        assert refused_curve[-1] > 0, "the fixture must refuse some pods by 130%"
        assert rows[policy, seed, "refused"] == refused_curve
        by_type = [v for k, v in rows.items() if k[:2] == (policy, seed) and ":" in k[2]]
        assert [sum(c) for c in zip(*by_type, strict=True)] == refused_curve
    for policy, r in results.items():
        # One seed's counts per summary are means: both seeds' totals add up.
        per_seed = [
            replay_refusals(NODES, PODS, out / f"placements-{policy}-{s}.csv") for s in (42, 43)
        ]
        types = r["refused_by_type"].values()
        assert sum(t["arrived"] for t in types) * 2 == sum(a for _, _, (a, _) in per_seed)
        assert sum(t["refused"] for t in types) * 2 == sum(f for _, _, (_, f) in per_seed)
        for _, first, (_, refused) in per_seed:  # a refusal by 100% came before 100%
            assert (refused > 0) == (first is not None and first < 100)
        firsts = sorted(130 if f is None else f for _, f, _ in per_seed)
        assert r["first_refusal_pct"] == firsts[0]  # the lower median of two
    for (policy, seed, metric), curve in curves.items():
        assert len(curve) == 131
        assert all(0 <= x <= 100 for x in curve)
        if metric == "alloc_pct":
            # No departures: allocation never falls as load arrives.
            assert curve == sorted(curve)
            placements = out / f"placements-{policy}-{seed}.csv"
            check_placements(NODES, PODS, placements)
            replayed = replay_allocation(NODES, PODS, placements)
            assert curve == pytest.approx(replayed, abs=1e-3)
    for policy, r in results.items():
        assert r["per_seed_at_100"] == [
            pytest.approx(curves[policy, s, "alloc_pct"][100], abs=1e-3) for s in (42, 43)
        ]


def run(policy: str, seed: int, alloc: list[float], frag: float, seconds: float) -> FillRun:
    return FillRun(policy, seed, alloc, [frag] * len(alloc), seconds, arrivals=0, placed=0)


def test_summary_arithmetic() -> None:
    # Curves over 0..130%; the gap is the first k with allocation <= k - 1.
    on_diagonal = [float(k) for k in range(131)]
    gap_at_90 = [float(min(k, 89.5)) for k in range(131)]  # 89.5 <= 90 - 1 at k = 90
    gap_at_95 = [float(min(k, 94)) for k in range(131)]  # 94 <= 95 - 1 at k = 95
    summaries = summarize(
        [
            run("a", 1, gap_at_90, frag=2.0, seconds=1.0),
            run("a", 2, gap_at_95, frag=4.0, seconds=5.0),
            run("a", 3, on_diagonal, frag=6.0, seconds=2.0),
            run("b", 1, on_diagonal, frag=0.0, seconds=3.0),
        ]
    )
    assert [s.policy for s in summaries] == ["a", "b"]
    a, b = summaries
    assert a.per_seed_at_100 == [89.5, 94.0, 100.0]
    assert a.alloc_pct_at_100 == pytest.approx(283.5 / 3)  # (89.5 + 94 + 100) / 3
    assert a.alloc_pct_at_130 == pytest.approx(313.5 / 3)  # (89.5 + 94 + 130) / 3
    assert a.frag_pct_at_100 == pytest.approx(4.0)  # (2 + 4 + 6) / 3
    assert a.seconds_per_run == 2.0  # median of 1, 5, 2
    assert a.first_gap_level == 95  # lower median of 90, 95, never
    assert b.first_gap_level is None  # its only seed never trails


@pytest.mark.slow  # one full openb run: about 1,200 nodes and 8,000 arrivals
def test_openb_best_fit(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["--policy", "best-fit", "--seeds", "42", "--json", "--out", str(tmp_path)]
    status = main(["sim", "fill", *args])
    assert status == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])["results"]["best-fit"]
    # The FGD paper reports 92.86% for best fit (mean of seeds 42-51).
    assert result["alloc_pct_at_100"] > 90
    nodes, pods = bundled(DEFAULT_NODES), bundled(DEFAULT_PODS)
    placements = tmp_path / "placements-best-fit-42.csv"
    check_placements(nodes, pods, placements)
    curve = next(row for row in read(tmp_path / "curves.csv") if row["metric"] == "alloc_pct")
    replayed = replay_allocation(nodes, pods, placements)
    assert [float(curve[str(k)]) for k in range(131)] == pytest.approx(replayed, abs=1e-3)


@pytest.mark.parametrize(
    ("asked", "label"),
    [
        # openb's largest pods: 8 GPUs, over 96 cores and 600 GiB.
        (Request(gpus=8, cpu_milli=100_000, memory_mib=700 * 1024), "8gpu cpu<=256 mem<=1024G"),
        (Request(gpus=8, cpu_milli=64_000, memory_mib=256 * 1024), "8gpu cpu<=64 mem<=256G"),
        (Request(gpu_milli=500, cpu_milli=4000, memory_mib=4096), "share<=500 cpu<=4 mem<=4G"),
        (Request(gpu_milli=501, cpu_milli=4001, memory_mib=4097), "share<=750 cpu<=16 mem<=16G"),
        (Request(gpu_milli=810, cpu_milli=1000), "share<1000 cpu<=1 mem<=0G"),
        (Request(cpu_milli=32_000, memory_mib=100), "cpu cpu<=64 mem<=1G"),
        (
            Request(mig_profile="1g.10gb", mig_count=2, cpu_milli=500),
            "mig:1g.10gbx2 cpu<=1 mem<=0G",
        ),
    ],
)
def test_request_types(asked: Request, label: str) -> None:
    assert request_type(asked) == label
