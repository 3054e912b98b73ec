"""MIG in replays: partitioned GPUs count in the capacity (allocated % never above 100%),
and a trace of MIG jobs only runs under every fragmentation-aware policy."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import node
from gpufleet.core import mig
from gpufleet.core.model import Node, Request
from gpufleet.sim.driver import SimResult
from gpufleet.sim.fill import run_fill
from gpufleet.sim.htmlreport import write_report
from gpufleet.sim.metrics import summarize, write_tables
from gpufleet.sim.openb import TracePod
from gpufleet.sim.profile import SimProfile, profile_from_dict, replay
from gpufleet.sim.traces.record import TraceJob


def fifo(placement: str) -> SimProfile:
    return profile_from_dict(
        {"ordering": {"plugin": "fifo"}, "placement": {"plugin": placement}}, placement
    )


def run(
    nodes: list[Node],
    requests: list[Request],
    out: Path,
    *,
    report: bool = True,
    profile: SimProfile | None = None,
) -> tuple[SimResult, dict[str, float]]:
    """Replay ``requests`` (all submitted at 0, 100 s each) under ``profile`` (FIFO and
    first-fit by default) and write the tables and, with ``report``, report.html."""
    jobs = [
        TraceJob(id=f"j{k}", submit_time=0, duration_s=100, request=r)
        for k, r in enumerate(requests)
    ]
    result = replay(nodes, jobs, profile or fifo("first-fit"))
    summary = summarize(result)
    write_tables(out, result)
    if report:
        write_report(out, [result], [summary], "mig")
    return result, summary


def series_peak(out: Path) -> float:
    with (out / "series.csv").open(newline="") as f:
        return max(float(row["alloc_pct"]) for row in csv.DictReader(f))


def report_alloc(out: Path) -> float:
    """The 'GPU allocated while busy, %' cell of report.html's table."""
    page = (out / "report.html").read_text()
    cell = re.search(r"<th>GPU allocated while busy, %</th><td>([0-9.]+)</td>", page)
    assert cell is not None
    return float(cell.group(1))


def test_one_partitioned_and_one_whole_gpu_all_busy_is_under_100_percent(tmp_path: Path) -> None:
    # The reported case: GPU 0 cut into 7 x 1g.10gb, GPU 1 whole, everything busy.
    # Each 1g slice counts 1000 // 7 = 142 milli, so 7 x 142 + 1000 of 2000 milli.
    nodes = [node("m").gpus(2).mig(",".join(["1g.10gb"] * 7), gpu=0).build()]
    requests = [Request(mig_profile="1g.10gb", mig_count=1)] * 7 + [Request(gpus=1)]
    result, summary = run(nodes, requests, tmp_path)
    assert result.capacity_milli == 2000
    assert summary["gpu_alloc_busy_pct"] == 99.7
    assert series_peak(tmp_path) == 99.7
    assert report_alloc(tmp_path) == 99.70


LAYOUTS = {
    "A100-80GB": ["1g.10gb," * 6 + "1g.10gb", "3g.40gb@0,3g.40gb@4", "4g.40gb,2g.20gb,1g.10gb"],
    "H100-80GB": ["7g.80gb", "1g.20gb,1g.20gb,1g.20gb,1g.20gb", "2g.20gb,2g.20gb,3g.40gb@4"],
}


@st.composite
def mig_clusters(draw: st.DrawFn) -> tuple[list[Node], list[Request]]:
    """A few nodes, each GPU whole or partitioned, and jobs of every kind that fit them."""
    nodes = []
    profiles: set[str] = set()
    for i in range(draw(st.integers(1, 3))):
        model = draw(st.sampled_from(sorted(LAYOUTS)))
        b = node(f"n{i}").model(model).gpus(draw(st.integers(1, 4)))
        for gpu in range(draw(st.integers(0, 2))):
            layout = draw(st.sampled_from(LAYOUTS[model]))
            b = b.mig(layout, gpu=gpu)
            profiles |= {i.profile for i in mig.parse_layout(model, layout)}
        nodes.append(b.build())
    kinds = [
        st.builds(Request, gpus=st.integers(1, 4)),
        st.builds(Request, gpu_milli=st.integers(1, 999)),
    ]
    if profiles:
        kinds.append(
            st.builds(Request, mig_profile=st.sampled_from(sorted(profiles)), mig_count=st.just(1))
        )
    requests = draw(st.lists(st.one_of(kinds), min_size=1, max_size=24))
    return nodes, requests


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mig_clusters())
@pytest.mark.parametrize("policy", ["first-fit", "best-fit", "fgd", "default"])
def test_allocated_percent_never_exceeds_100(
    policy: str, tmp_path: Path, drawn: tuple[list[Node], list[Request]]
) -> None:
    # Fragmentation-aware policies measure MIG-free GPUs only; whichever places the
    # jobs, a MIG slice counts its compute share and a partitioned GPU no more.
    nodes, requests = drawn
    result, summary = run(nodes, requests, tmp_path, report=False, profile=fifo(policy))
    assert max(s.alloc_milli for s in result.samples) <= result.capacity_milli
    assert summary["gpu_alloc_busy_pct"] is None or summary["gpu_alloc_busy_pct"] <= 100
    assert series_peak(tmp_path) <= 100


@settings(max_examples=15, deadline=None)
@given(mig_clusters())
@pytest.mark.parametrize("policy", ["best-fit", "fgd", "default"])
def test_the_fill_never_allocates_and_fragments_more_than_the_capacity(
    policy: str, drawn: tuple[list[Node], list[Request]]
) -> None:
    # The fill's fragmentation counts free milli-GPU on GPUs without MIG only, and its
    # allocation MIG slices by their compute share: together at most every GPU.
    nodes, requests = drawn
    pods = [TracePod(f"p{k}", r) for k, r in enumerate(requests)]
    run = run_fill(nodes, pods, policy, seed=1, record=False)
    assert max(run.alloc_pct) <= 100
    assert all(a + f <= 100 + 1e-9 for a, f in zip(run.alloc_pct, run.frag_pct, strict=True))


@pytest.mark.parametrize("policy", ["fgd", "default"])
def test_a_trace_of_mig_jobs_only_runs_on_several_nodes(policy: str, tmp_path: Path) -> None:
    # Two nodes could take each job, so the policy's scorers run; fragmentation
    # leaves MIG out and must measure against the typical mix rather than stop.
    nodes = [node(f"m{i}").gpus(2).mig("3g.40gb,3g.40gb", gpu=0).build() for i in range(2)]
    jobs = [
        TraceJob(
            id=f"j{k}",
            submit_time=k,
            duration_s=100,
            request=Request(mig_profile="3g.40gb", mig_count=1),
        )
        for k in range(6)
    ]
    result = replay(nodes, jobs, fifo(policy))
    assert [r.state for r in result.jobs] == ["completed"] * 6
    assert max(s.alloc_milli for s in result.samples) == 4 * (3000 // 7)


@pytest.mark.parametrize("policy", ["best-fit", "fgd", "default"])
def test_the_fill_counts_mig_pods_and_partitioned_gpus(policy: str) -> None:
    # GPU 0 in seven 1g slices, GPU 1 whole: at most 7 x 142 + 1000 of 2000 milli.
    nodes = [node("m").gpus(2).mig(",".join(["1g.10gb"] * 7), gpu=0).build()]
    pods = [TracePod(f"mig{k}", Request(mig_profile="1g.10gb", mig_count=1)) for k in range(7)]
    run = run_fill(nodes, [*pods, TracePod("whole", Request(gpus=1))], policy, seed=3)
    assert max(run.alloc_pct) <= 99.7
    # A pod list of MIG pods only fills too: 15 pods of 142 milli arrive by 100% of
    # 2000 milli, the seven slices take seven of them.
    only = run_fill(nodes, pods, policy, seed=3)
    kind = "mig:1g.10gbx1 cpu<=0 mem<=0G"
    assert (only.arrived_by_type, only.refused_by_type) == ({kind: 15}, {kind: 8})
    assert only.at(100) == 49.7
