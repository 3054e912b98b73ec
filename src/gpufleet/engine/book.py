"""The job book: the jobs a driver holds, and how a plan changes them.

Both drivers keep one ``JobBook``: the simulator in virtual time, the
controller in wall-clock time. It holds the cluster state, the pending jobs,
the running ones and the victims in their preemption grace time, and it is
the only thing that changes them, so that the two drivers cannot drift
apart in how they carry out a plan. It is pure: every time is an argument,
and it starts nothing. What happens in the world (a run ending, a node
failing, a grace time running out) is the driver's to notice and report.

API (``now`` is the driver's clock in integer seconds)::

    book = JobBook(nodes, qos, partitions, ledger=None, reservations=(), estimates=False,
                   stop_at_once=True)
    book.submit(job, runs=None)            # queue a pending job (runs: how many it had)
    book.restore(running, run=N, signal=None)  # a run already under way (recovery)
    book.withdraw(job_id) -> Job           # take a pending job off the queue
    book.revise(job)                       # a pending job described anew (its estimate)
    book.snapshot(now) -> Snapshot         # what run_cycle reads
    book.apply(plan, now) -> Effects       # carry out run_cycle's plan
    book.finish(job_id, now) -> RunEnd     # a run ended by itself
    book.stop(job_id, now, requeue=...)    # a run cut short: requeue or cancel
    book.checkpoint(job_id, now)           # the run saved its work
    book.node_down(node, now) -> [RunEnd]  # its runs are requeued
    book.node_up(node)
    book.cordon(node, usable)              # keep the placer off a node; its runs go on
    book.mask_gpu(node, gpu, masked)       # keep the placer off one GPU; the node works on
    book.add_node(node); book.remove_node(name)
    book.replace_node(node)                # the same name described anew, where it stands
    book.reconfigured(node, gpu) -> Layout  # a MIG layout change the plan began is done
    book.resume_reconfigure(node, gpu, layout, at)  # one begun before a restart
    book.placements(assignments) -> [Placement]  # names, GPU UUIDs, MIG ids

``apply`` first signals the plan's victims: one with no grace time is
stopped at once (``Effects.stopped``) unless the book was built with
``stop_at_once=False``; any other keeps running until the driver stops it
(``Effects.signalled`` with the deadline, now for no grace time), and the
snapshot names it as signalled, for the job it was preempted for, so later
cycles neither pick it again nor give its room to another job. Then it
starts the plan's jobs; a start whose room a victim in its grace time still
holds is ``deferred`` and the job stays pending. Victims named again, or no
longer running, are skipped. Once the last victim of a deferred job is
gone, the room the plan gave the job is *promised* to it for the next
cycle (``Snapshot.promised``): no other job may take it first.

Last, it takes on the plan's MIG layout changes (``Plan.relayouts``): a
GPU to change first drains (its free instances are held, so no new run
lands there); once nothing runs on it, at this or a later ``apply``, the
change begins (``Effects.relayouts``): the GPU keeps no instances, so it
takes no work, until the driver reports the change done
(``reconfigured``), which gives it the new layout. A GPU's layout thus
never changes under a run. The snapshot names the GPUs draining or being
re-cut, with their targets, and when each GPU's last change was taken on.

A requeued job goes back to the end of the queue as it was submitted, with
the GPU service of the run added to ``gpu_seconds_attained``; a finished or
cancelled job leaves the book. The ledger, when given, is charged for every
run from its start to its end, an end the driver learnt of late included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, TypeVar

import numpy as np

from gpufleet.core.columns import LogMap
from gpufleet.core.job import Job, JobState, Partition, PreemptMode, QoS, Reservation, RunningJob
from gpufleet.core.mig import MigInstance, validate_layout
from gpufleet.core.model import MILLI, Node
from gpufleet.core.plan import Layout, Plan
from gpufleet.core.snapshot import Snapshot
from gpufleet.core.state import Assignment, ClusterState, NotIdle, OverAllocation
from gpufleet.engine.ledger import UsageLedger

Outcome = Literal["finished", "requeued", "cancelled"]
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class Placement:
    """One task's share of a start in the world's names.

    ``gpus`` are indices on the node and ``gpu_uuids`` their UUIDs (empty
    strings where the inventory gave none); ``mig`` are the MIG instances as
    ``"GPU_INDEX:PROFILE@START"``.
    """

    node: str
    gpus: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    gpu_milli: int
    mig: tuple[str, ...]
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Started:
    """A run that began: its number (1 for the first), where, and its expected end."""

    job_id: str
    run: int
    assignments: tuple[Assignment, ...]
    placements: tuple[Placement, ...]
    expected_end: int


@dataclass(frozen=True, slots=True)
class Signalled:
    """A victim told to stop by ``deadline``, then requeued or cancelled, for ``for_job``."""

    job_id: str
    run: int
    deadline: int
    mode: PreemptMode
    for_job: str


@dataclass(frozen=True, slots=True)
class RunEnd:
    """A run that ended: how, when, and the job as it now is.

    ``job`` is the requeued pending job for ``requeued`` (its attained
    service grown by this run), else the job as it ran. ``elapsed`` is
    ``end - start``.
    """

    job_id: str
    run: int
    outcome: Outcome
    start: int
    end: int
    assignments: tuple[Assignment, ...]
    job: Job

    @property
    def elapsed(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Reconfigure:
    """A MIG layout change begun on GPU ``gpu`` of ``node``; ``layout`` is what it will be."""

    node: str
    gpu: int
    layout: Layout


@dataclass(frozen=True)
class Effects:
    """What ``apply`` did, in order: victims stopped or signalled, starts, layout changes."""

    started: list[Started] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    signalled: list[Signalled] = field(default_factory=list)
    stopped: list[RunEnd] = field(default_factory=list)
    relayouts: list[Reconfigure] = field(default_factory=list)


class UnknownJob(KeyError):
    """The job id names no job in the state the call needs (pending or running)."""


class JobBook:
    """Pending and running jobs on a cluster, changed only through its methods.

    ``pending`` and ``running`` are in the order jobs entered them (a
    requeued job enters again at the end); ``signals`` maps each victim in
    its grace time to its signal; ``runs`` counts each known job's runs.
    Read them freely; change them only through the methods.
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        qos: Mapping[str, QoS],
        partitions: Mapping[str, Partition],
        *,
        ledger: UsageLedger | None = None,
        reservations: Sequence[Reservation] = (),
        estimates: bool = False,
        stop_at_once: bool = True,
    ) -> None:
        self.state = ClusterState(nodes)
        # False for a driver whose victims are processes: one with no grace time still
        # has to die, and holds its room until the driver reports it gone.
        self.stop_at_once = stop_at_once
        # A run's expected end: start + estimate (SchedulingProfile.estimates), else + limit.
        self.estimates = estimates
        self.qos = qos
        self.partitions = partitions
        self.reservations = list(reservations)
        self.ledger = ledger
        if ledger is not None:
            ledger.state = self.state
        # Logged, so the snapshot hands them out without copying (core.columns.LogMap).
        self.pending: LogMap[str, Job] = LogMap()
        self.running: LogMap[str, RunningJob] = LogMap()
        self.signals: dict[str, Signalled] = {}
        # A deferred start's room, then, once its victims are gone, promised for one cycle.
        self.deferred: dict[str, tuple[Assignment, ...]] = {}
        self.promised: dict[str, tuple[Assignment, ...]] = {}
        self.runs: dict[str, int] = {}
        self.on_node: list[set[str]] = [set() for _ in self.state.nodes]
        self.cordoned: set[str] = set()
        # Masked GPUs by (node, index): the hold that keeps them, None while a run uses one.
        self.masked: dict[tuple[str, int], Assignment | None] = {}
        self.last_backfill: int | None = None  # when a plan last came from a backfill pass
        # MIG layout changes by (node, GPU): when the last was taken on; the target of each
        # GPU draining (with the hold on its free instances) and of each being re-cut.
        self.mig_changed: dict[tuple[str, int], int] = {}
        self.draining: dict[tuple[str, int], Layout] = {}
        self.drain_holds: dict[tuple[str, int], Assignment] = {}
        self.reconfiguring: dict[tuple[str, int], Layout] = {}

    # -- the queue -------------------------------------------------------------
    def submit(self, job: Job, *, runs: int | None = None) -> None:
        """Queue ``job``; ValueError if a job of that id is pending or running.

        ``runs`` is how many runs the job had before (a driver queueing again
        a job it keeps outside the book): its next start is run ``runs + 1``.
        None keeps the count the book has (0 for a job it never saw).
        """
        if job.id in self.pending or job.id in self.running:
            raise ValueError(f"job {job.id}: already in the book")
        if runs is not None:
            if runs < 0:
                raise ValueError(f"job {job.id}: runs must be 0 or more, got {runs}")
            self.runs[job.id] = runs
        self.pending[job.id] = job

    def restore(self, r: RunningJob, *, run: int = 1, signal: Signalled | None = None) -> None:
        """Put back a run already under way: its allocation, and its signal if in grace time.

        For a driver rebuilding its book (the controller from its store on
        start, a test from a scene). ``r.job.start_time`` is when the run
        started; OverAllocation (changing nothing) if its room is not free.
        """
        job_id = r.job.id
        if job_id in self.pending or job_id in self.running:
            raise ValueError(f"job {job_id}: already in the book")
        if r.job.start_time is None:
            raise ValueError(f"job {job_id}: a run needs its start time")
        if not self._allocate(r.assignments):
            raise OverAllocation(f"job {job_id}: its room is taken")
        self.running[job_id] = r
        self.runs[job_id] = run
        if signal is not None:
            self.signals[job_id] = signal
        if self.ledger is not None:
            self.ledger.start(r, r.job.start_time)
        for a in r.assignments:
            self.on_node[a.node].add(job_id)

    def revise(self, job: Job) -> None:
        """Describe a pending job anew (a new runtime estimate), keeping its place and runs."""
        if job.id not in self.pending:
            raise UnknownJob(job.id)
        self.pending[job.id] = job

    def withdraw(self, job_id: str) -> Job:
        """Take a pending job off the queue (cancelled or held away) and return it."""
        try:
            job = self.pending.pop(job_id)
        except KeyError:
            raise UnknownJob(job_id) from None
        self.deferred.pop(job_id, None)
        self.promised.pop(job_id, None)
        return job

    def snapshot(self, now: int) -> Snapshot:
        """What a cycle at ``now`` reads: reservations not yet over, usage as of ``now``."""
        if self.estimates:
            self._extend_overruns(now)
        return Snapshot(
            state=self.state,
            running=self.running.entries(),
            pending=self.pending.entries(),
            qos=self.qos,
            partitions=self.partitions,
            now=now,
            reservations=[r for r in self.reservations if r.end > now],
            accounts=self.ledger.view(now) if self.ledger is not None else None,
            signalled={v: s.for_job for v, s in self.signals.items()},
            promised=dict(self.promised),
            last_backfill=self.last_backfill,
            mig_changed=self._by_index(self.mig_changed),
            reconfiguring=self._by_index({**self.draining, **self.reconfiguring}),
        )

    def _by_index(self, by_name: dict[tuple[str, int], _V]) -> dict[tuple[int, int], _V]:
        index = self.state.index
        return {(index[n], g): v for (n, g), v in by_name.items() if n in index}

    def _extend_overruns(self, now: int) -> None:
        """A run past its estimated end is expected to run as long again, up to its limit.

        Taken to end now, it would keep a waiting job's planned start at now,
        and with it every node that job needs idle, until it really ends.
        """
        for job_id, r in self.running.items():
            start = r.job.start_time
            if r.expected_end > now or start is None or job_id in self.signals:
                continue
            bound = start + r.job.time_limit_s
            if r.expected_end < bound:
                end = min(bound, now + max(now - start, 1))
                self.running[job_id] = replace(r, expected_end=end)

    # -- carrying out a plan ---------------------------------------------------
    def apply(self, plan: Plan, now: int) -> Effects:
        """Signal or stop the plan's victims, then start its jobs (see the module docstring)."""
        effects = Effects()
        if plan.backfilled:
            self.last_backfill = now
        for p in plan.preemptions:
            r = self.running.get(p.job_id)
            if r is None or p.job_id in self.signals:
                continue
            if p.grace_s == 0 and self.stop_at_once:
                effects.stopped.append(self._end(r, now, _mode_outcome(p.mode)))
                continue
            sig = Signalled(p.job_id, self.runs[p.job_id], now + p.grace_s, p.mode, p.for_job)
            self.signals[p.job_id] = sig
            # Backfill sees the victim let go when its grace time ends.
            self.running[p.job_id] = replace(r, expected_end=sig.deadline)
            effects.signalled.append(sig)
        self.promised.clear()  # each promise lasts the one cycle that just planned
        for job_id, assignments in plan.starts.items():
            started = self._start(job_id, assignments, now)
            if started is None:
                effects.deferred.append(job_id)
                self.deferred[job_id] = tuple(assignments)
            else:
                effects.started.append(started)
        for change in plan.relayouts:
            self._relayout(change.node, change.gpu, change.layout, now)
        self._begin_drained(effects)
        return effects

    def _relayout(self, node: int, gpu: int, layout: Layout, now: int) -> None:
        """Take on a layout change: the GPU drains (its free instances are held, so it
        takes no new work) until nothing runs on it. Ignored while it is already changing."""
        spec = self.state.nodes[node]
        key = (spec.name, gpu)
        if key in self.reconfiguring or key in self.draining:
            return
        if layout is not None:  # a bad layout is refused before the GPU is touched
            validate_layout(spec.gpus[gpu].model, tuple(MigInstance(p, s) for p, s in layout))
        self.draining[key] = layout
        self.mig_changed[key] = now
        self._hold_drains()

    def _hold_drains(self) -> None:
        """Hold every free instance of each draining GPU (a hold grows as its runs end)."""
        st = self.state
        for key in self.draining:
            i = st.index.get(key[0])
            old = self.drain_holds.pop(key, None)
            if old is not None:
                st.release(old)
            if i is None:
                continue
            free = st.mig_free & (st.mig_node == i) & (st.mig_gpu == key[1]) & (st.mig_profile >= 0)
            hold = Assignment(node=i, mig=tuple(int(m) for m in np.flatnonzero(free)))
            st.allocate(hold)
            self.drain_holds[key] = hold

    def _begin_drained(self, effects: Effects) -> None:
        """Begin the change of each draining GPU that nothing runs on any more: it keeps
        no instances, so takes no work, until ``reconfigured``."""
        st = self.state
        for key, layout in list(self.draining.items()):
            hold = self.drain_holds.pop(key, None)
            if hold is not None:
                st.release(hold)
            try:
                st.set_mig_layout(key[0], key[1], ())
            except NotIdle:
                if hold is not None:
                    st.allocate(hold)
                    self.drain_holds[key] = hold
                continue
            except KeyError:  # the node is gone
                pass
            else:
                self.reconfiguring[key] = layout
                effects.relayouts.append(Reconfigure(key[0], key[1], layout))
            del self.draining[key]

    def resume_reconfigure(self, node: str, gpu: int, layout: Layout, at: int) -> None:
        """A layout change begun at ``at``, before the book was rebuilt (a driver that
        restarted): the GPU keeps no instances, so takes no work, until ``reconfigured``.
        KeyError for an unknown node; NotIdle while a run holds the GPU."""
        self.state.set_mig_layout(node, gpu, ())
        self.reconfiguring[(node, gpu)] = layout
        self.mig_changed[(node, gpu)] = at

    def reconfigured(self, node: str, gpu: int) -> Layout:
        """The layout change under way on GPU ``gpu`` of ``node`` is done: the GPU gets its
        new layout (returned). KeyError if none is under way; a node removed meanwhile
        keeps nothing."""
        layout = self.reconfiguring.pop((node, gpu))
        if node in self.state.index:
            self.state.set_mig_layout(node, gpu, layout)
        return layout

    def _start(self, job_id: str, assignments: Sequence[Assignment], now: int) -> Started | None:
        job = self.pending.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        if not self._allocate(assignments):
            return None  # a victim in its grace time still holds what the plan gave this job
        del self.pending[job_id]
        self.deferred.pop(job_id, None)
        run = self.runs.get(job_id, 0) + 1
        self.runs[job_id] = run
        placed = tuple(assignments)
        running = replace(job, state=JobState.RUNNING, start_time=now, last_checkpoint=None)
        length = job.expected_runtime_s if self.estimates else job.time_limit_s
        r = RunningJob(running, placed, now + length)
        self.running[job_id] = r
        if self.ledger is not None:
            self.ledger.start(r, now)
        for a in placed:
            self.on_node[a.node].add(job_id)
        return Started(job_id, run, placed, tuple(self.placements(placed)), r.expected_end)

    def _allocate(self, assignments: Sequence[Assignment]) -> bool:
        """Allocate all of ``assignments``, or none (False) when one does not fit."""
        done: list[Assignment] = []
        try:
            for a in assignments:
                self.state.allocate(a)
                done.append(a)
        except OverAllocation:
            for a in reversed(done):
                self.state.release(a)
            return False
        return True

    # -- runs ending -----------------------------------------------------------
    def finish(self, job_id: str, now: int) -> RunEnd:
        """The run of ``job_id`` ended by itself (done, failed or timed out); it leaves."""
        return self._end(self._running(job_id), now, "finished")

    def stop(self, job_id: str, now: int, *, requeue: bool) -> RunEnd:
        """Cut the run of ``job_id`` short (preempted, cancelled, node lost)."""
        return self._end(self._running(job_id), now, "requeued" if requeue else "cancelled")

    def checkpoint(self, job_id: str, now: int) -> None:
        """The run of ``job_id`` saved its work at ``now`` (preemption weighs what is at risk)."""
        r = self._running(job_id)
        self.running[job_id] = replace(r, job=replace(r.job, last_checkpoint=now))

    def _running(self, job_id: str) -> RunningJob:
        r = self.running.get(job_id)
        if r is None:
            raise UnknownJob(job_id)
        return r

    def _end(self, r: RunningJob, now: int, outcome: Outcome) -> RunEnd:
        job_id = r.job.id
        del self.running[job_id]
        sig = self.signals.pop(job_id, None)
        if self.ledger is not None:
            self.ledger.stop(r, now)
        for a in r.assignments:
            self.state.release(a)
            self.on_node[a.node].discard(job_id)
        if self.masked:
            self._hold_masks()  # a masked GPU this run used is free now
        if self.draining:
            self._hold_drains()
        start = r.job.start_time if r.job.start_time is not None else now
        job = r.job
        if outcome == "requeued":
            attained = job.gpu_seconds_attained + job.gpu_milli / MILLI * (now - start)
            job = replace(
                job,
                state=JobState.PENDING,
                start_time=None,
                last_checkpoint=None,
                gpu_seconds_attained=attained,
                requeued_at=now,
            )
            self.pending[job.id] = job
        if sig is not None:
            self._promise(sig.for_job)
        return RunEnd(job_id, self.runs[job_id], outcome, start, now, r.assignments, job)

    def _promise(self, job_id: str) -> None:
        """The last victim of ``job_id`` is gone: its deferred room is promised to it."""
        room = self.deferred.get(job_id)
        if room is None or job_id not in self.pending:
            return
        if any(s.for_job == job_id for s in self.signals.values()):
            return
        self.promised[job_id] = self.deferred.pop(job_id)

    # -- nodes -----------------------------------------------------------------
    def node_down(self, node: str | int, now: int) -> list[RunEnd]:
        """Mark a node down; its runs are requeued (by job id). [] if it was already down.

        A cordoned node goes down too (its runs end); it is no longer cordoned.
        """
        i = self._node(node)
        name = self.state.nodes[i].name
        if not self.state.healthy[i] and name not in self.cordoned:
            return []
        self.cordoned.discard(name)
        ends = [self._end(self.running[j], now, "requeued") for j in sorted(self.on_node[i])]
        self.state.healthy[i] = False
        self.state.version[i] += 1
        return ends

    def node_up(self, node: str | int) -> None:
        """Mark a node usable again (a cordon ends too)."""
        i = self._node(node)
        self.cordoned.discard(self.state.nodes[i].name)
        self.state.healthy[i] = True
        self.state.version[i] += 1

    def cordon(self, node: str | int, usable: bool) -> None:
        """Keep the placer off a node (``usable=False``), or let it back (True), while
        the runs on it go on: a drain. ``node_down`` still ends them.

        A node that is down stays down when cordoned, and comes back only
        through ``node_up``; a cordon's end brings back a node that is
        cordoned, not one that is down.
        """
        i = self._node(node)
        name = self.state.nodes[i].name
        healthy = bool(self.state.healthy[i])
        if not usable:
            if healthy:
                self.cordoned.add(name)
                self.state.healthy[i] = False
                self.state.version[i] += 1
        elif name in self.cordoned:
            self.cordoned.discard(name)
            self.state.healthy[i] = True
            self.state.version[i] += 1

    def mask_gpu(self, node: str, gpu: int, masked: bool) -> None:
        """Keep the placer off one GPU of ``node`` (``masked``), or let it back; the rest of
        the node keeps working. A GPU in use is held once the runs on it have ended."""
        key = (node, gpu)
        if masked:
            self.masked.setdefault(key, None)
            self._hold_masks()
            return
        held = self.masked.pop(key, None)
        if held is not None:
            self.state.release(held)

    def _hold_masks(self) -> None:
        """Take every masked GPU that is free: all its milli-GPU, or all its MIG instances."""
        st = self.state
        for (name, g), held in self.masked.items():
            i = st.index.get(name)
            if held is not None or i is None or g >= st.gpu_exists.shape[1]:
                continue
            if not st.gpu_exists[i, g]:
                continue
            instances = (st.mig_node == i) & (st.mig_gpu == g)
            hold = Assignment(
                node=i,
                gpus=(g,),
                gpu_milli=int(st.gpu_milli_total[i, g]),
                mig=tuple(int(m) for m in instances.nonzero()[0]),
            )
            try:
                st.allocate(hold)
            except OverAllocation:
                continue  # a run still uses it
            self.masked[(name, g)] = hold

    def add_node(self, node: Node) -> None:
        """A new node, usable at once; ValueError if its name is taken."""
        if node.name in self.state.index:
            raise ValueError(f"node {node.name}: already in the cluster")
        self._rebuild([*self.state.nodes, node])

    def remove_node(self, name: str) -> None:
        """Take a node out of the cluster; ValueError while a run holds it."""
        self._idle(name)
        self._rebuild([n for n in self.state.nodes if n.name != name])
        self.cordoned.discard(name)

    def replace_node(self, node: Node) -> None:
        """Describe the node named ``node.name`` anew, keeping its index (placement ties go
        to the lowest, so a node must not move); ValueError while a run holds it."""
        self._idle(node.name)
        self._rebuild([node if n.name == node.name else n for n in self.state.nodes])

    def _idle(self, name: str) -> None:
        i = self._node(name)
        if self.on_node[i]:
            raise ValueError(f"node {name}: jobs run on it: {', '.join(sorted(self.on_node[i]))}")

    def _node(self, node: str | int) -> int:
        if isinstance(node, int):
            if not 0 <= node < self.state.num_nodes:
                raise KeyError(node)
            return node
        try:
            return self.state.index[node]
        except KeyError:
            raise KeyError(node) from None

    def _rebuild(self, nodes: Sequence[Node]) -> None:
        """A new state over ``nodes``, keeping health and every run's allocation.

        Node and MIG instance indices shift past a removed node, so running
        jobs' assignments are renumbered by name.
        """
        old = self.state
        new = ClusterState(nodes)
        old_mig = _mig_keys(old)
        new_mig = {key: m for m, key in enumerate(_mig_keys(new))}
        for name, i in new.index.items():
            if name in old.index:
                new.healthy[i] = old.healthy[old.index[name]]

        def moved(a: Assignment) -> Assignment:
            node = new.index[old.nodes[a.node].name]
            return replace(a, node=node, mig=tuple(new_mig[old_mig[m]] for m in a.mig))

        for job_id, r in list(self.running.items()):
            placed = tuple(moved(a) for a in r.assignments)
            for a in placed:
                new.allocate(a)
            self.running[job_id] = replace(r, assignments=placed)
        self.state = new
        self.deferred.clear()  # their node indices are stale: the next cycle plans anew
        self.promised.clear()
        self.on_node = [set() for _ in new.nodes]
        for job_id, r in self.running.items():
            for a in r.assignments:
                self.on_node[a.node].add(job_id)
        if self.ledger is not None:
            self.ledger.state = new
        self.masked = dict.fromkeys(self.masked)  # held again in the new state
        self._hold_masks()
        self.drain_holds.clear()
        self._hold_drains()

    # -- names -----------------------------------------------------------------
    def placements(self, assignments: Iterable[Assignment]) -> list[Placement]:
        """Assignments in the world's names: node names, GPU UUIDs and MIG instance ids."""
        st = self.state
        out = []
        for a in assignments:
            node = st.nodes[a.node]
            gpus = a.gpus or tuple(sorted({int(st.mig_gpu[m]) for m in a.mig}))
            mig = tuple(_mig_id(st, m) for m in a.mig)
            out.append(
                Placement(
                    node=node.name,
                    gpus=gpus,
                    gpu_uuids=tuple(node.gpus[g].uuid for g in gpus),
                    gpu_milli=a.gpu_milli,
                    mig=mig,
                    cpu_milli=a.cpu_milli,
                    memory_mib=a.memory_mib,
                )
            )
        return out


def _mode_outcome(mode: PreemptMode) -> Outcome:
    return "requeued" if mode == "requeue" else "cancelled"


def _mig_keys(st: ClusterState) -> list[tuple[str, int, int]]:
    """Each MIG instance as (node name, GPU index, start slice), in the state's order."""
    nodes, gpus, starts = st.mig_node.tolist(), st.mig_gpu.tolist(), st.mig_start.tolist()
    return [(st.nodes[n].name, g, s) for n, g, s in zip(nodes, gpus, starts, strict=True)]


def _mig_id(st: ClusterState, m: int) -> str:
    profile = st.mig_profiles[int(st.mig_profile[m])]
    return f"{int(st.mig_gpu[m])}:{profile}@{int(st.mig_start[m])}"
