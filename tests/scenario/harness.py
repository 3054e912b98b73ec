"""A scenario harness for the scheduling cycle: cluster, jobs, profile and clock in;
starts, preemptions, planned starts and pending reasons out.

The scene lives in an ``engine.JobBook``, as in both drivers: ``cycle()``
asks for the plan only; ``step()`` also lets the book carry it out and
reports its effects, so a scenario can run several cycles.

    sc = Scenario(nodes=[node("a").gpus(8)], now=100)
    sc.run(qjob("big").gpus(8).limit(3600), end=1000, on="a")
    sc.submit(qjob("next").gpus(8))
    out = sc.cycle()
    assert out.reasons == {"next": "Resources"}

Running jobs are placed on the node(s) named by ``on`` (first fit there) so
a scenario states exactly where the load is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Self

import numpy as np

from builders import JobBuilder, NodeBuilder, cluster
from gpufleet.core.cycle import NodeMask, SchedulingProfile, run_cycle
from gpufleet.core.job import Job, JobState, Partition, QoS, Reservation, RunningJob
from gpufleet.core.placement import PlacementProfile, Placer
from gpufleet.core.plan import Plan
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import ClusterState
from gpufleet.engine.book import Effects, JobBook
from gpufleet.policies.backfill import Backfill, BackfillArgs
from gpufleet.policies.limits import PartitionLimits, QosLimits
from gpufleet.policies.migplan import MigArgs, MigPlanner
from gpufleet.policies.placement.fit import FirstFit
from gpufleet.policies.preemption import CheapestVictims
from gpufleet.policies.queue import Fifo
from gpufleet.policies.reservations import Reservations


class QueuedJobBuilder(JobBuilder):
    """A job: the request builder plus who, where, and how long. Defaults keep tests short."""

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self._id = job_id
        self._user = "alice"
        self._account = "research"
        self._qos = "normal"
        self._partition = "main"
        self._submit = 0
        self._limit = 3600
        self._extra: dict[str, object] = {}

    def user(self, name: str, account: str = "") -> Self:
        self._user = name
        self._account = account or self._account
        return self

    def qos(self, name: str) -> Self:
        self._qos = name
        return self

    def partition(self, name: str) -> Self:
        self._partition = name
        return self

    def submit(self, t: int) -> Self:
        self._submit = t
        return self

    def limit(self, seconds: int) -> Self:
        self._limit = seconds
        return self

    def with_(self, **fields: object) -> Self:
        """Any other Job field: hold, dependencies, reservation, constraints, checkpoints..."""
        self._extra.update(fields)
        return self

    def job(self, **state: object) -> Job:
        return Job(
            id=self._id,
            user=self._user,
            account=self._account,
            qos=self._qos,
            partition=self._partition,
            request=self.build(),
            submit_time=self._submit,
            time_limit_s=self._limit,
            **{**self._extra, **state},  # type: ignore[arg-type]
        )


def qjob(job_id: str) -> QueuedJobBuilder:
    return QueuedJobBuilder(job_id)


@dataclass
class Outcome:
    """A plan in the scenario's terms: node names instead of indices."""

    plan: Plan
    starts: dict[str, list[str]]
    preempted: dict[str, str]
    expected_start: dict[str, int]
    reasons: dict[str, str]
    effects: Effects | None = None


@dataclass
class Scenario:
    nodes: list[NodeBuilder]
    now: int = 0
    qos: list[QoS] = field(default_factory=lambda: [QoS("normal")])
    partitions: list[Partition] = field(default_factory=lambda: [Partition("main")])
    reservations: list[Reservation] = field(default_factory=list)
    backfill: Literal["none", "easy", "conservative"] = "easy"
    preemption: bool = False
    resolution_s: int = 1
    backfill_interval_s: int = 0
    repartition: MigArgs | None = None
    book: JobBook | None = None

    def _book(self) -> JobBook:
        if self.book is None:
            self.book = JobBook(
                cluster(*self.nodes).nodes,
                {q.name: q for q in self.qos},
                {p.name: p for p in self.partitions},
                reservations=self.reservations,
            )
        return self.book

    @property
    def state(self) -> ClusterState:
        return self._book().state

    @property
    def pending(self) -> list[Job]:
        return list(self._book().pending.values())

    @property
    def running(self) -> list[RunningJob]:
        return list(self._book().running.values())

    def run(
        self, b: QueuedJobBuilder, *, start: int, on: str | tuple[str, ...], **state: object
    ) -> Self:
        """``b`` has run since ``start`` on the named node(s); it ends at start + its limit."""
        book = self._book()
        st = book.state
        names = (on,) if isinstance(on, str) else on
        mask = np.zeros(st.num_nodes, dtype=np.bool_)
        mask[[st.index[n] for n in names]] = True
        job = b.job(state=JobState.RUNNING, start_time=start, **state)
        pin = Placer(PlacementProfile("pin", [(FirstFit(), 1.0)], [NodeMask(mask)]))
        placed = pin.place(st, job.request)
        assert placed is not None, f"{job.id} does not fit on {names}"
        for a in placed:  # the book allocates what it restores
            st.release(a)
        book.restore(RunningJob(job, tuple(placed), start + job.time_limit_s))
        return self

    def submit(self, *builders: QueuedJobBuilder) -> Self:
        for b in builders:
            self._book().submit(b.job())
        return self

    def snapshot(self) -> Snapshot:
        return self._book().snapshot(self.now)

    def profile(self) -> SchedulingProfile:
        backfill = None
        if self.backfill != "none":
            backfill = Backfill(
                BackfillArgs(
                    mode=self.backfill,
                    resolution_s=self.resolution_s,
                    interval_s=self.backfill_interval_s,
                )
            )
        return SchedulingProfile(
            ordering=Fifo(),
            placement=PlacementProfile("first-fit", [(FirstFit(), 1.0)]),
            admission=[PartitionLimits(), QosLimits()],
            gate=Reservations(),
            backfill=backfill,
            preemption=CheapestVictims() if self.preemption else None,
            repartition=MigPlanner(self.repartition) if self.repartition else None,
        )

    def cycle(self) -> Outcome:
        """The plan of one cycle now; the scene does not change."""
        snap = self.snapshot()
        return self._outcome(run_cycle(snap, self.profile()))

    def step(self, at: int | None = None) -> Outcome:
        """One cycle at ``at`` (default: now), carried out by the book."""
        self.now = self.now if at is None else at
        out = self.cycle()
        out.effects = self._book().apply(out.plan, self.now)
        return out

    def _outcome(self, plan: Plan) -> Outcome:
        names = [n.name for n in self._book().state.nodes]
        return Outcome(
            plan=plan,
            starts={j: sorted(names[a.node] for a in asg) for j, asg in plan.starts.items()},
            preempted={p.job_id: p.for_job for p in plan.preemptions},
            expected_start=dict(plan.expected_start),
            reasons=dict(plan.reasons),
        )
