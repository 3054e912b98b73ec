"""What bounds a cycle's work: a quiet gate is not asked about every job.

A deep queue must not cost a call per job where nothing can differ. Each
test states the plan the bounded cycle gives and checks it equals the
unbounded one's.
"""

from __future__ import annotations

from dataclasses import replace

from builders import node
from gpufleet.core.cycle import SchedulingProfile, run_cycle
from gpufleet.core.job import Job, Reservation
from gpufleet.core.protocols import Access
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import BoolArray
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
