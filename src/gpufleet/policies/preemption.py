"""Preemption: free room for a higher-tier job by stopping the cheapest victims.

A running job may be preempted for a pending one if the pending job's QoS
lists the victim's QoS in ``preempt``, or if the pending job's partition has
a higher ``priority_tier`` than the victim's and the victim's partition is
``preemptible``; ``by`` says which of the two count (Slurm's preempt/qos:
``{"qos"}``, preempt/partition_prio: ``{"partition_tier"}``). A victim
that has run less than its QoS's ``preempt_exempt_s`` is spared
(PreemptExemptTime).

Among the allowed victims the plugin picks the cheapest set that makes the
job fit: the fewest GPU-hours of work lost (since each victim's last
checkpoint when it checkpoints, else since its start), then the fewest jobs.
It works node by node: on each node it adds victims cheapest first until one
task fits, then drops any victim the fit does not need (most expensive
first); a job of N tasks takes the N cheapest nodes. Nodes that could not
beat the best found so far are skipped. The cycle checks the final set once
more and preempts nobody unless the job then fits.

``AttainedServiceVictims`` (``las``) is Tiresias' preemption instead: who may
be stopped is decided by attained GPU service (a later LAS queue than the
waiting job's, after a scheduling quantum), and the same search finds the
cheapest of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar, Literal

import numpy as np

from gpufleet.core.cycle import gpu_hours_at_risk
from gpufleet.core.job import Job, RunningJob
from gpufleet.core.model import MILLI, Request
from gpufleet.core.protocols import PreemptionRequest
from gpufleet.core.snapshot import Snapshot
from gpufleet.policies.priority import LasArgs, waited

PreemptBy = Literal["qos", "partition_tier"]
EITHER: frozenset[PreemptBy] = frozenset(("qos", "partition_tier"))


def may_preempt(
    snapshot: Snapshot, job: Job, victim: Job, by: frozenset[PreemptBy] = EITHER
) -> bool:
    """Does the QoS or the partition tier of ``job``, those ``by`` names, allow
    preempting ``victim``?"""
    if "qos" in by and victim.qos in snapshot.qos[job.qos].preempt:
        return True
    if "partition_tier" not in by:
        return False
    mine, theirs = snapshot.partitions[job.partition], snapshot.partitions.get(victim.partition)
    return theirs is not None and theirs.preemptible and mine.priority_tier > theirs.priority_tier


def exempt(snapshot: Snapshot, victim: Job, now: int) -> bool:
    """Has ``victim`` run for less than its QoS's PreemptExemptTime?"""
    qos = snapshot.qos.get(victim.qos)
    started = victim.start_time if victim.start_time is not None else now
    return qos is not None and now - started < qos.preempt_exempt_s


class CheapestVictims:
    NAME: ClassVar[str] = "preemption"
    clocked: ClassVar[bool] = True  # work at risk and exempt time grow with the clock

    def __init__(self, by: frozenset[PreemptBy] = EITHER) -> None:
        self.by = by

    def allowed(self, req: PreemptionRequest, victim: RunningJob) -> bool:
        """May ``victim`` be stopped for ``req.job``? By QoS or partition tier (those
        ``by`` names), past exempt time."""
        s = req.snapshot
        return may_preempt(s, req.job, victim.job, self.by) and not exempt(s, victim.job, req.now)

    def victims(self, req: PreemptionRequest) -> Sequence[RunningJob]:
        job, now = req.job, req.now
        cands = [r for r in req.running if self.allowed(req, r)]
        if not cands:
            return []
        task = replace(job.request, nodes=1)
        cost = {r.job.id: gpu_hours_at_risk(r, now) for r in cands}
        on_node: defaultdict[int, list[RunningJob]] = defaultdict(list)
        for r in sorted(cands, key=lambda r: (cost[r.job.id], r.job.gpu_milli, r.job.id)):
            for node in {a.node for a in r.assignments}:
                on_node[node].append(r)
        free_now = req.trial([], req.nodes, task)
        reachable = req.trial(cands, req.nodes, task) & ~free_now
        need = job.request.nodes
        # (GPU-hours lost, jobs, node) for each node that can host one task, best first.
        options: list[tuple[float, int, int, tuple[RunningJob, ...]]] = [
            (0.0, 0, int(n), ()) for n in np.flatnonzero(free_now)
        ]
        for node in sorted(
            (int(n) for n in np.flatnonzero(reachable)), key=lambda n: cost[on_node[n][0].job.id]
        ):
            options.sort(key=lambda o: o[:3])
            bound = options[need - 1][0] if len(options) >= need else float("inf")
            if cost[on_node[node][0].job.id] > bound:
                continue
            chosen = self._node_victims(req, int(node), on_node[node], task)
            total = sum(cost[v.job.id] for v in chosen)
            options.append((total, len(chosen), int(node), chosen))
        options.sort(key=lambda o: o[:3])
        if len(options) < need:
            return []
        picked = options[:need]
        victims = list({v.job.id: v for o in picked for v in o[3]}.values())
        mask = np.zeros_like(req.nodes)
        mask[[o[2] for o in picked]] = True
        if int(req.trial(victims, mask, job.request).sum()) < need:
            return []
        return victims

    @staticmethod
    def _node_victims(
        req: PreemptionRequest, node: int, ordered: list[RunningJob], task: Request
    ) -> tuple[RunningJob, ...]:
        """Victims on ``node``: cheapest first until a task fits, then drop the unneeded."""
        mask = np.zeros_like(req.nodes)
        mask[node] = True
        chosen: list[RunningJob] = []
        for v in ordered:
            chosen.append(v)
            if req.trial(chosen, mask, task)[node]:
                break
        for v in reversed(list(chosen)):
            rest = [c for c in chosen if c is not v]
            if req.trial(rest, mask, task)[node]:
                chosen = rest
        return tuple(chosen)


class AttainedServiceVictims(CheapestVictims):
    """Tiresias' preemption: a waiting job stops running jobs of a later LAS queue.

    A running job may be stopped for a waiting one when its queue, by the
    service it has attained including the current run, comes strictly after
    the waiting job's (a starved job counts as the first queue), it has run
    at least ``quantum_s`` in this run (the scheduling quantum, so jobs do not
    swap at every cycle), and it has saved a checkpoint in this run. Tiresias
    suspends a job with its state; here a stopped job resumes from its last
    checkpoint, so one stopped before its first would start over at every
    quantum and never end (a job that does not checkpoint is never stopped).
    Among those, the cheapest set by work lost (``CheapestVictims``) makes room.
    """

    NAME: ClassVar[str] = "las"

    def __init__(self, args: LasArgs, quantum_s: int) -> None:
        self.args = args
        self.quantum_s = quantum_s

    def allowed(self, req: PreemptionRequest, victim: RunningJob) -> bool:
        job, now = req.job, req.now
        started = victim.job.start_time if victim.job.start_time is not None else now
        if now - started < self.quantum_s or victim.job.last_checkpoint is None:
            return False
        theirs = victim.job.gpu_seconds_attained + victim.job.gpu_milli / MILLI * (now - started)
        mine = self.args.level(np.array([job.gpu_seconds_attained]), waited([job], now))
        return bool(self.args.level(np.array([theirs]))[0] > mine[0])
