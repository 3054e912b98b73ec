"""The parity scenario: its configuration, its jobs, and a record of every cycle.

Both drivers read the same two files: ``parity-controller.toml`` (server,
policy, principals) and ``parity-nodes.toml`` (the cluster file the
controller declares, each agent registers its node from, and the simulator
replays on). Times are virtual seconds from the scenario's start; the
drivers see them from ``BASE`` on, a plausible Unix time.

``CycleLog`` wraps ``core.cycle.run_cycle`` in a driver's module and keeps,
per cycle, what the snapshot held and what the plan decided, so that the two
drivers' cycles can be compared one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufleet.adapters.tomlfile import read_toml
from gpufleet.controller.config import Built, ControllerConfig, config_from_dict
from gpufleet.core.accounts import AccountUsage
from gpufleet.core.cycle import Plan, SchedulingProfile, Snapshot
from gpufleet.core.job import Job, RunningJob
from gpufleet.core.model import Request
from gpufleet.sim.traces.record import TraceJob

FIXTURES = Path(__file__).parents[1] / "fixtures"
CONTROLLER_FILE = FIXTURES / "parity-controller.toml"
NODES_FILE = FIXTURES / "parity-nodes.toml"
BASE = 1_700_000_000


def load_config() -> ControllerConfig:
    """The controller's configuration with the cluster file's nodes declared."""
    document = {**read_toml(CONTROLLER_FILE), **read_toml(NODES_FILE)}
    return config_from_dict(document, CONTROLLER_FILE.name)


@dataclass(frozen=True)
class Arrival:
    """One job of the scenario: when it comes, whose it is, its shape and how long it runs.

    ``mem_gib`` and ``cpus`` are per node; a gang of ``nodes`` takes
    ``gpus`` on each. Its time limit is its duration, so that backfill plans
    on exact ends in both drivers.
    """

    at: int
    user: str
    duration: int
    gpus: int = 0
    gpu_milli: int = 0
    nodes: int = 1
    cpus: int = 2
    mem_gib: int = 16
    qos: str = "normal"

    @property
    def request(self) -> Request:
        return Request(
            cpu_milli=self.cpus * 1000,
            memory_mib=self.mem_gib * 1024,
            gpus=self.gpus,
            gpu_milli=self.gpu_milli,
            nodes=self.nodes,
        )


def _a(at: int, user: str, duration: int, **shape: int | str) -> Arrival:
    return Arrival(at, user, duration, **shape)  # type: ignore[arg-type]


# Job N (1-based) is the N-th arrival: the controller numbers submissions the same way.
# The first burst fills both nodes; the gang then needs the whole cluster and holds it
# (EASY backfill lets only jobs that end before its start jump ahead); vision's four
# shares against infra's one make later bursts favour whoever has used less.
ARRIVALS: tuple[Arrival, ...] = (
    _a(0, "alice", 1200, gpus=8, cpus=16, mem_gib=128),
    _a(0, "carol", 600, gpus=4, cpus=8, mem_gib=64),
    _a(0, "bob", 900, gpus=2, cpus=4),
    _a(0, "dave", 300, gpus=1),
    _a(0, "erin", 600, cpus=8, mem_gib=32),
    _a(0, "carol", 600, gpu_milli=500, cpus=1, mem_gib=8),
    _a(0, "alice", 300, gpus=4, cpus=8, mem_gib=64),
    _a(0, "bob", 600, gpus=8, cpus=16, mem_gib=128),
    _a(120, "dave", 600, gpus=8, nodes=2, cpus=16, mem_gib=128),
    _a(120, "erin", 300, gpus=1),
    _a(120, "alice", 300, gpus=1),
    _a(120, "carol", 900, gpus=2, cpus=4),
    _a(120, "bob", 300, cpus=4, mem_gib=8),
    _a(600, "erin", 600, gpus=4, cpus=8, mem_gib=64),
    _a(600, "alice", 600, gpus=4, cpus=8, mem_gib=64),
    _a(600, "bob", 300, gpus=2, cpus=4),
    _a(600, "carol", 300, gpu_milli=250, cpus=1, mem_gib=4),
    _a(600, "dave", 900, gpus=1),
    _a(600, "alice", 1200, gpus=8, cpus=16, mem_gib=128, qos="high"),
    _a(900, "erin", 300, gpus=2, cpus=4),
    _a(900, "bob", 600, gpus=1),
    _a(900, "carol", 300, gpus=4, cpus=8, mem_gib=64),
    _a(900, "dave", 600, cpus=16, mem_gib=64),
    _a(1500, "alice", 600, gpus=2, cpus=4),
    _a(1500, "bob", 300, gpus=8, cpus=16, mem_gib=128),
    _a(1500, "carol", 600, gpus=1),
    _a(1500, "dave", 300, gpus=4, cpus=8, mem_gib=64),
    _a(1500, "erin", 900, gpus=1),
    _a(1500, "erin", 300, gpus=2, cpus=4),
    _a(1500, "alice", 300, gpu_milli=500, cpus=1, mem_gib=8),
)


def job_id(index: int) -> str:
    """The id of the ``index``-th (0-based) arrival in both drivers."""
    return str(index + 1)


def trace(built: Built) -> list[TraceJob]:
    """The scenario as the simulator reads it; each user charges its default account."""
    return [
        TraceJob(
            id=job_id(i),
            submit_time=BASE + a.at,
            duration_s=a.duration,
            time_limit_s=a.duration,
            request=a.request,
            user=a.user,
            account=built.principals[a.user].default_account or "",
            partition=built.default_partition,
            priority_class=a.qos,
        )
        for i, a in enumerate(ARRIVALS)
    ]


@dataclass(frozen=True)
class Cycle:
    """One cycle as a driver ran it: the snapshot's jobs and usage, and the plan.

    ``now`` is virtual; ``starts`` keeps the plan's order (the queue's
    order), each start as (node name, GPU indices, milli-GPU, milli-CPU,
    MiB) per task; ``expected_start`` (virtual) and ``expected_nodes`` are
    backfill's plans for jobs that wait; ``usage`` is the fairshare usage per association of the
    account tree (``names``), None without fairshare.
    """

    now: int
    pending: tuple[Job, ...]
    running: tuple[RunningJob, ...]
    names: tuple[str, ...]
    usage: tuple[float, ...] | None
    starts: tuple[tuple[str, tuple[tuple[str, tuple[int, ...], int, int, int], ...]], ...]
    expected_start: tuple[tuple[str, int], ...]
    expected_nodes: tuple[tuple[str, tuple[str, ...]], ...]
    reasons: tuple[tuple[str, str], ...]
    preemptions: int

    def same_decisions(self, other: Cycle) -> bool:
        """Equal but for usage, which may differ in the last bits (sums in another order)."""
        return (self.now, self.pending, self.running, self.names) == (
            other.now,
            other.pending,
            other.running,
            other.names,
        ) and self.plan == other.plan

    @property
    def plan(self) -> tuple[object, ...]:
        return (
            self.starts,
            self.expected_start,
            self.expected_nodes,
            self.reasons,
            self.preemptions,
        )


RunCycle = Callable[[Snapshot, SchedulingProfile, int, Plan | None], Plan]


class CycleLog:
    """A stand-in for ``run_cycle`` that calls it and records each cycle (see ``Cycle``)."""

    def __init__(self, real: RunCycle) -> None:
        self.real = real
        self.cycles: list[Cycle] = []

    def __call__(
        self, snapshot: Snapshot, profile: SchedulingProfile, now: int, settled: Plan | None = None
    ) -> Plan:
        # Read the snapshot first: the driver changes its state once the plan is applied.
        pending = tuple(sorted(snapshot.pending, key=lambda j: j.id))
        running = tuple(sorted(snapshot.running, key=lambda r: r.job.id))
        accounts = snapshot.accounts if isinstance(snapshot.accounts, AccountUsage) else None
        plan = self.real(snapshot, profile, now, settled)
        nodes = snapshot.state.nodes
        self.cycles.append(
            Cycle(
                now=now - BASE,
                pending=pending,
                running=running,
                names=tuple(accounts.tree.names) if accounts is not None else (),
                usage=tuple(float(u) for u in accounts.usage) if accounts is not None else None,
                starts=tuple(
                    (
                        job,
                        tuple(
                            (nodes[a.node].name, a.gpus, a.gpu_milli, a.cpu_milli, a.memory_mib)
                            for a in assignments
                        ),
                    )
                    for job, assignments in plan.starts.items()
                ),
                expected_start=tuple((j, t - BASE) for j, t in sorted(plan.expected_start.items())),
                expected_nodes=tuple(
                    (j, tuple(nodes[i].name for i in ns))
                    for j, ns in sorted(plan.expected_nodes.items())
                ),
                reasons=tuple(sorted(plan.reasons.items())),
                preemptions=len(plan.preemptions),
            )
        )
        return plan
