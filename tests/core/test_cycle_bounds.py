"""What bounds a cycle's work: a quiet gate is not asked about every job, the
queue depth (default_queue_depth) and the planned-start limit (bf_max_job_test).

A deep queue must not cost a call per job where nothing can differ, and a
bound that does not bind must not change the plan.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import node
from gpufleet.core.cycle import SchedulingProfile, run_cycle
from gpufleet.core.job import Job, Reservation
from gpufleet.core.protocols import Access
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import BoolArray
from gpufleet.policies.backfill import Backfill, BackfillArgs
from gpufleet.policies.reservations import Reservations
from scenario.harness import Scenario, qjob


class CountingGate(Reservations):
    """The reservations gate, counting the jobs it is asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def access(self, snapshot: Snapshot, job: Job, partition_nodes: BoolArray, now: int) -> Access:
        self.asked.append(job.id)
        return super().access(snapshot, job, partition_nodes, now)


def deep_queue(reservations: list[Reservation]) -> Scenario:
    # One 8-GPU node, busy until 3600; 40 one-GPU jobs wait (EASY backfill, so every job
    # reaches the gate), the last naming a reservation.
    sc = Scenario([node("a").gpus(8)], reservations=reservations)
    sc.run(qjob("busy").gpus(8).limit(3600), start=0, on="a")
    sc.submit(*(qjob(f"j{i:02d}").gpus(1).submit(i) for i in range(39)))
    sc.submit(qjob("r").gpus(1).submit(39).with_(reservation="maint"))
    return sc


def with_gate(sc: Scenario, gate: Reservations) -> SchedulingProfile:
    return replace(sc.profile(), gate=gate)


def test_a_quiet_gate_is_asked_only_about_jobs_naming_a_reservation() -> None:
    sc = deep_queue([])
    gate = CountingGate()
    plan = run_cycle(sc.snapshot(), with_gate(sc, gate))
    assert gate.asked == ["r"]
    # j00 waits for resources, the rest behind it; "r" names a reservation that is gone.
    assert plan.reasons == sc.cycle().reasons
    assert plan.reasons["j00"] == "Resources"
    assert plan.reasons["j38"] == "Priority"
    assert plan.reasons["r"] == "Reservation"


def test_a_gate_with_reservations_is_asked_about_every_job_it_reaches() -> None:
    sc = deep_queue([Reservation("maint", start=7200, end=9000, nodes=("a",))])
    gate = CountingGate()
    run_cycle(sc.snapshot(), with_gate(sc, gate))
    assert len(gate.asked) == 40


def backlog() -> Scenario:
    # Node a: 8 GPUs, 4 held until 3600. big1 and big2 (8 GPUs each) cannot start; small
    # (1 GPU, 60 s) fits beside the running job and ends long before big1's planned start.
    sc = Scenario([node("a").gpus(8)])
    sc.run(qjob("run").gpus(4).limit(3600), start=0, on="a")
    sc.submit(qjob("big1").gpus(8).submit(1), qjob("big2").gpus(8).submit(2))
    sc.submit(qjob("small").gpus(1).limit(60).submit(3))
    return sc


@pytest.mark.parametrize(
    ("depth", "starts", "reasons"),
    [
        # Every job considered: small backfills.
        (0, ["small"], {"big1": "Resources", "big2": "Priority"}),
        # Depth 3 reaches small too: the same plan.
        (3, ["small"], {"big1": "Resources", "big2": "Priority"}),
        # Depth 2 stops before small: it neither starts nor gets a reason (it keeps its last).
        (2, [], {"big1": "Resources", "big2": "Priority"}),
    ],
)
def test_queue_depth_bounds_the_jobs_a_cycle_considers(
    depth: int, starts: list[str], reasons: dict[str, str]
) -> None:
    sc = backlog()
    plan = run_cycle(sc.snapshot(), replace(sc.profile(), queue_depth=depth))
    assert sorted(plan.starts) == starts
    assert plan.reasons == reasons


def test_conservative_backfill_plans_at_most_max_job_test_starts() -> None:
    # Four 8-GPU jobs wait behind a full node; conservative would plan each, the limit 2 plans two.
    sc = Scenario([node("a").gpus(8)], backfill="conservative")
    sc.run(qjob("run").gpus(8).limit(3600), start=0, on="a")
    sc.submit(*(qjob(f"w{i}").gpus(8).submit(i) for i in range(4)))
    bf = Backfill(BackfillArgs(mode="conservative", resolution_s=1, max_job_test=2))
    plan = run_cycle(sc.snapshot(), replace(sc.profile(), backfill=bf))
    assert plan.expected_start == {"w0": 3600, "w1": 7200}
    unbounded = run_cycle(sc.snapshot(), sc.profile())
    assert unbounded.expected_start == {"w0": 3600, "w1": 7200, "w2": 10800, "w3": 14400}


def test_a_backfill_pass_of_its_own_walks_past_the_queue_depth() -> None:
    # Slurm's default_queue_depth bounds its main scheduler; the backfill thread tests up
    # to bf_max_job_test. With depth 2, small (third in line) backfills in a pass only.
    sc = backlog()
    bf = Backfill(BackfillArgs(resolution_s=1, interval_s=30))
    profile = replace(sc.profile(), backfill=bf, queue_depth=2)
    passing = run_cycle(sc.snapshot(), profile)
    assert passing.backfilled
    assert sorted(passing.starts) == ["small"]
    snapshot = sc.snapshot()
    main = run_cycle(replace(snapshot, last_backfill=snapshot.now - 10), profile)
    assert not main.backfilled
    assert main.starts == {}
    assert "small" not in main.reasons  # beyond the main pass's depth
