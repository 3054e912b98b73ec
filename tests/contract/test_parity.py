"""Two drivers, one core: the simulator and the live controller decide one scenario alike.

The scenario (``contract.scenario``: 30 jobs of 1, 2, 4 and 8 GPUs, GPU
shares, a 2-node gang and CPU-only jobs from five users in three accounts
with unequal shares, on two 8-GPU nodes, under multifactor ordering with
Fair Tree fairshare and EASY backfill) runs through ``sim.driver.Simulation``
and through the controller on a manual clock with two real ``gpufleet
agent`` processes over HTTP on 127.0.0.1. Both must make the same cycles
(the same snapshot in, the same plan out), so every job starts at the same
virtual time, in the same order, on the same nodes and GPUs.

Virtual time meets real processes through release files: a job runs until
the test creates its file. The test drives the live cluster event by event
as the simulator drives its event queue: at each instant (the next arrival,
or the end of a running job by its duration) it sets the clock, releases
the jobs that end then and waits until the controller has their exits,
submits the arrivals, runs one cycle if any job waits (the simulator's rule,
with no periodic cycle: ``interval_s = 0``), and waits until the agents run
every job that started. Time limits equal durations in both, so backfill
plans on the same ends.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from contract.cluster import LiveCluster, Started
from contract.scenario import ARRIVALS, BASE, Cycle, CycleLog, job_id, load_config, trace
from gpufleet.core.cycle import run_cycle
from gpufleet.core.model import Node
from gpufleet.sim.driver import SimConfig, Simulation


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCluster]:
    cluster = LiveCluster(load_config(), tmp_path)
    try:
        yield cluster
    finally:
        cluster.close()


def simulate(live: LiveCluster, nodes: Sequence[Node]) -> dict[str, Started]:
    """Replay the scenario on ``nodes`` in the simulator, set up from what the controller
    runs with."""
    built, setup = live.built, live.setup
    config = SimConfig(interval_s=0, min_gap_s=0, priority_calc_s=setup.priority_calc_s)
    sim = Simulation(
        nodes,
        trace(built),
        built.profile(),
        config=config,
        qos=dict(setup.qos),
        partitions=dict(setup.partitions),
        reservations=setup.reservations,
        shares={a.name: a.shares for a in built.policy.config.accounts},
        fairshare=setup.fairshare,
    )
    result = sim.run()
    assert {r.job.id: r.state for r in result.jobs} == {
        job_id(i): "completed" for i in range(len(ARRIVALS))
    }
    return {
        r.job.id: Started(
            r.first_start - BASE,
            tuple(
                (p.node, tuple(sorted(p.gpus)), p.gpu_uuids)
                for p in sim.book.placements(r.last_assignments)
            ),
        )
        for r in result.jobs
    }


def drive(live: LiveCluster) -> dict[str, Started]:
    """Run the scenario on the live cluster event by event (see the module docstring)."""
    arrivals = list(enumerate(ARRIVALS))
    ends: dict[str, int] = {}  # running job -> its virtual end
    waiting: set[str] = set()
    started: dict[str, Started] = {}
    while arrivals or ends:
        t = min([*ends.values(), *(a.at for _, a in arrivals[:1])])
        live.clock.set(float(BASE + t))
        ending = {j for j, end in ends.items() if end == t}
        live.end(ending)
        for j in ending:
            del ends[j]
        while arrivals and arrivals[0][1].at == t:
            i, arrival = arrivals.pop(0)
            live.submit(arrival, job_id(i))
            waiting.add(job_id(i))
        if not waiting:
            continue
        live.controller.run_cycle_now()
        for j, s in live.started(live.jobs("RUNNING").keys() & waiting).items():
            assert s.start == t, (j, s)
            started[j] = s
            ends[j] = t + ARRIVALS[int(j) - 1].duration
            waiting.discard(j)
            # Each task runs on its node with the GPUs its placement names.
            visible = live.marks_of(j, [node for node, _, _ in s.placements])
            assert visible == {node: ",".join(uuids) for node, _, uuids in s.placements}, j
    finals = {j: (v["state"], v["exit_code"]) for j, v in live.jobs("COMPLETED").items()}
    assert finals == {job_id(i): ("COMPLETED", 0) for i in range(len(ARRIVALS))}
    return started


def first_difference(sim: list[Cycle], live: list[Cycle]) -> str:
    """The first cycle the drivers made differently, and in what; "" when none."""
    for s, c in zip(sim, live, strict=False):
        if not s.same_decisions(c) or not _close(s.usage, c.usage):
            fields = [
                f"{name}:\n  simulator {getattr(s, name)}\n  controller {getattr(c, name)}"
                for name in Cycle.__dataclass_fields__
                if getattr(s, name) != getattr(c, name)
            ]
            return f"cycle at t={s.now} (simulator) / t={c.now} (controller): " + "\n".join(fields)
    if len(sim) != len(live):
        return f"{len(sim)} cycles in the simulator, {len(live)} in the controller"
    return ""


def _close(a: tuple[float, ...] | None, b: tuple[float, ...] | None) -> bool:
    """Usage sums the same charges, perhaps in another order: equal to rounding."""
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-6) for x, y in zip(a, b, strict=True)
    )


def start_order(log: CycleLog) -> list[tuple[int, str]]:
    """(virtual time, job) of every start, in the order the cycles' plans made them."""
    return [(c.now, job) for c in log.cycles for job, _ in c.starts]


def test_simulator_and_controller_make_the_same_plans(
    live: LiveCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim_log, live_log = CycleLog(run_cycle), CycleLog(run_cycle)
    monkeypatch.setattr("gpufleet.sim.driver.run_cycle", sim_log)
    monkeypatch.setattr("gpufleet.controller.service.run_cycle", live_log)

    # The simulator replays on the cluster file's nodes with the GPU UUIDs the agents report.
    expected = simulate(live, live.registered_nodes())
    observed = drive(live)

    # The scenario exercises what it claims: fairshare usage and backfill's planned starts.
    assert any(c.usage and any(c.usage) for c in sim_log.cycles)
    assert any(c.expected_start for c in sim_log.cycles)
    assert first_difference(sim_log.cycles, live_log.cycles) == ""
    assert start_order(live_log) == start_order(sim_log)
    assert {j: s.start for j, s in observed.items()} == {j: s.start for j, s in expected.items()}
    assert observed == expected
