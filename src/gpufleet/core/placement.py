"""Where a task goes: the placement extension points and the placer that drives them.

For one request the placer works in three steps, as the Kubernetes scheduling
framework does:

1. **Filter.** The built-in fit check (CPU, memory, GPUs of an allowed model
   with enough free milli-GPU and memory, MIG instances of the profile, node
   health) and every ``Filter`` plugin each return a boolean mask over nodes;
   the masks combine with AND.
2. **Options.** Each feasible node yields its candidate placements. A
   fractional request has one option per GPU that could host it (GPUs with the
   same free milli-GPU and memory on a node are one option: the lowest index
   stands for them). Whole-GPU, MIG and CPU-only requests have one option per
   node; the ``GpuPicker`` chooses which GPUs or instances on that node.
3. **Tier.** Each ``Tier`` plugin, in order, charges every option a cost,
   and only the options at the lowest cost go on. A tier outranks every
   scorer: it is for criteria that must not be traded against the others.
4. **Score.** Each ``Scorer`` rates every option left; scores are min-max
   normalised to 0..100 over the options and summed with the profile's
   weights. The highest total wins; ties go to the lowest option index, which
   is the lowest node index, so placement is deterministic.

A gang (``request.nodes`` > 1) is placed node by node inside a ``Statement``
and committed only if every node found room: all or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpufleet.core import fit as fitmod
from gpufleet.core.model import Request
from gpufleet.core.state import Assignment, BoolArray, ClusterState, IntArray

FloatArray = npt.NDArray[np.float64]


class Mode(StrEnum):
    """``now``: place on what is free. ``test``: would it fit an empty cluster?"""

    NOW = "now"
    TEST = "test"


@dataclass
class Options:
    """Candidate placements for one request, one row each.

    ``gpu`` is the GPU index for a fractional request and -1 otherwise.
    """

    node: IntArray
    gpu: IntArray

    def __len__(self) -> int:
        return len(self.node)


class PlacementContext:
    """Per-request facts, worked out once and shared by every plugin.

    Plugins may read everything here and must not mutate it or the state.
    ``gang_nodes`` lists nodes already chosen for earlier members of the same
    gang, so topology scorers can keep a gang together.
    """

    def __init__(
        self,
        state: ClusterState,
        request: Request,
        feasible: BoolArray,
        options: Options,
        gang_nodes: Sequence[int] = (),
    ) -> None:
        self.state = state
        self.request = request
        self.feasible = feasible
        self.options = options
        self.gang_nodes = tuple(gang_nodes)

    @property
    def eligible_gpus(self) -> BoolArray:
        """(nodes x GPUs): which GPUs could take one of the request's per-GPU shares now."""
        return fitmod.eligible_gpus(self.state, self.request, slice(None))

    def gpu_free_after(self) -> IntArray:
        """Free milli-GPU on each option's node after placing there (whole node sum)."""
        st, r = self.state, self.request
        after: IntArray = st.gpu_free_sum[self.options.node] - r.milli_per_gpu * r.gpu_count
        return after

    def cpu_free_after(self) -> IntArray:
        return self.state.cpu_free[self.options.node] - self.request.cpu_milli

    def narrowed(self, keep: BoolArray) -> PlacementContext:
        """The same request with only the options where ``keep`` is true."""
        o = self.options
        return PlacementContext(
            self.state,
            self.request,
            self.feasible,
            Options(o.node[keep], o.gpu[keep]),
            self.gang_nodes,
        )

    def chosen_gpu_free_after(self) -> IntArray:
        """For fractional options: the free milli-GPU left on the chosen GPU."""
        o = self.options
        return self.state.gpu_milli_free[o.node, o.gpu] - self.request.gpu_milli


class Filter(Protocol):
    """May a node host the request? Return a boolean mask over all nodes.

    Reads the context only; pure and idempotent. Masks combine with AND.
    """

    def filter(self, ctx: PlacementContext) -> BoolArray: ...


class Scorer(Protocol):
    """How good is each option? Return one float per option, higher is better.

    Reads the context only; pure and idempotent. The placer normalises each
    scorer's output to 0..100 before weighting, so only the order and the
    relative gaps matter.
    """

    def score(self, ctx: PlacementContext) -> FloatArray: ...


class Tier(Protocol):
    """Which options are worth scoring at all? Return a cost per option, lower is better.

    Only the options within ``TIER_SLACK`` of the lowest cost reach the next
    tier and the scorers. Reads the context only; pure and idempotent.
    """

    def cost(self, ctx: PlacementContext) -> FloatArray: ...


# Costs closer than this count as equal, so floating-point noise in a tier's
# arithmetic does not decide placements.
TIER_SLACK = 1e-9


class GpuPicker(Protocol):
    """Which GPUs on the chosen node a whole-GPU request gets.

    ``free`` holds the indices of the node's GPUs that could host it, ascending;
    return ``count`` of them. Pure and deterministic.
    """

    def pick(self, state: ClusterState, node: int, free: IntArray, count: int) -> IntArray: ...


class LowestIndex:
    """Take the first free GPUs in index order."""

    def pick(self, state: ClusterState, node: int, free: IntArray, count: int) -> IntArray:
        return free[:count]


@dataclass
class PlacementProfile:
    """A named set of filters, tiers, weighted scorers and a GPU picker."""

    name: str
    scorers: Sequence[tuple[Scorer, float]]
    filters: Sequence[Filter] = ()
    picker: GpuPicker = field(default_factory=LowestIndex)
    tiers: Sequence[Tier] = ()


class Statement:
    """An undo log: tentative allocations that are committed or discarded together."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.done: list[Assignment] = []

    def allocate(self, a: Assignment) -> None:
        self.state.allocate(a)
        self.done.append(a)

    def commit(self) -> list[Assignment]:
        done, self.done = self.done, []
        return done

    def discard(self) -> None:
        for a in reversed(self.done):
            self.state.release(a)
        self.done = []


def normalise(raw: FloatArray) -> FloatArray:
    """Min-max scale to 0..100; a constant score carries no preference."""
    lo, hi = float(raw.min()), float(raw.max())
    if hi - lo <= 1e-12 * max(1.0, abs(hi)):
        return np.zeros(len(raw), dtype=np.float64)
    scaled: FloatArray = (raw - lo) * (100.0 / (hi - lo))
    return scaled


class Placer:
    """Drives a PlacementProfile over the cluster state."""

    def __init__(self, profile: PlacementProfile) -> None:
        self.profile = profile

    def fit(self, state: ClusterState, r: Request, mode: Mode) -> tuple[BoolArray, Options]:
        """The built-in resource fit: the feasible node mask and the options on those nodes."""
        empty = mode is Mode.TEST
        if not r.mig_profile:
            feasible, nodes, gpus = fitmod.fit(state, r, empty)
            return feasible, Options(nodes, gpus)
        cpu = state.cpu_total if empty else state.cpu_free
        mem = state.mem_total if empty else state.mem_free
        feasible = (cpu >= r.cpu_milli) & (mem >= r.memory_mib) & state.healthy
        feasible &= self._mig_count(state, r, empty) >= r.mig_count
        nodes = np.flatnonzero(feasible)
        return feasible, Options(nodes, np.full(len(nodes), -1, dtype=np.int64))

    def _mig_count(self, state: ClusterState, r: Request, empty: bool) -> IntArray:
        match = fitmod.mig_instances(state, r, empty=empty)
        return np.bincount(state.mig_node[match], minlength=state.num_nodes)

    def context(
        self, state: ClusterState, r: Request, mode: Mode, gang_nodes: Sequence[int] = ()
    ) -> PlacementContext:
        feasible, options = self.fit(state, r, mode)
        if self.profile.filters or gang_nodes:
            if self.profile.filters:
                pre = PlacementContext(state, r, feasible.copy(), options, gang_nodes)
                for f in self.profile.filters:
                    feasible &= f.filter(pre)
            if gang_nodes:
                feasible[list(gang_nodes)] = False
            keep = feasible[options.node]
            options = Options(options.node[keep], options.gpu[keep])
        return PlacementContext(state, r, feasible, options, gang_nodes)

    def choose(self, ctx: PlacementContext) -> int:
        """Index of the best option (ties to the lowest); -1 if there is none."""
        if len(ctx.options) == 0:
            return -1
        index = np.arange(len(ctx.options))
        for tier in self.profile.tiers:
            if len(index) == 1:
                break
            cost = tier.cost(ctx)
            keep = cost <= cost.min() + TIER_SLACK
            if not keep.all():
                ctx, index = ctx.narrowed(keep), index[keep]
        return int(index[self._best(ctx)])

    def _best(self, ctx: PlacementContext) -> int:
        """Index of the highest-scoring option in ``ctx`` (ties to the lowest)."""
        k = len(ctx.options)
        scorers = self.profile.scorers
        if k == 1 or not scorers:
            return 0
        if len(scorers) == 1 and scorers[0][1] > 0:
            # One scorer with a positive weight: normalising cannot change its order.
            return int(np.argmax(scorers[0][0].score(ctx)))
        total = np.zeros(k, dtype=np.float64)
        for scorer, weight in scorers:
            total += weight * normalise(scorer.score(ctx))
        return int(np.argmax(total))

    def assignment(self, ctx: PlacementContext, option: int) -> Assignment:
        state, r = ctx.state, ctx.request
        node = int(ctx.options.node[option])
        if r.gpu_milli:
            gpus: tuple[int, ...] = (int(ctx.options.gpu[option]),)
        elif r.gpus:
            free = np.flatnonzero(fitmod.eligible_gpus(state, r, node))
            gpus = tuple(int(g) for g in self.profile.picker.pick(state, node, free, r.gpus))
        else:
            gpus = ()
        mig: tuple[int, ...] = ()
        if r.mig_profile:
            free_inst = np.flatnonzero(
                fitmod.mig_instances(state, r, empty=False) & (state.mig_node == node)
            )
            # Lowest GPU, then lowest slot: instance indices follow the order
            # layouts were set in (``ClusterState.set_mig_layout`` appends).
            order = np.lexsort((state.mig_start[free_inst], state.mig_gpu[free_inst]))
            mig = tuple(int(i) for i in free_inst[order][: r.mig_count])
        return Assignment(
            node=node,
            gpus=gpus,
            gpu_milli=r.milli_per_gpu if gpus else 0,
            gpu_memory_mib=r.gpu_memory_mib,
            cpu_milli=r.cpu_milli,
            memory_mib=r.memory_mib,
            mig=mig,
        )

    def place(self, state: ClusterState, r: Request) -> list[Assignment] | None:
        """Place every member of the request now, or nothing at all."""
        stmt = Statement(state)
        chosen: list[int] = []
        for _ in range(r.nodes):
            ctx = self.context(state, r, Mode.NOW, chosen)
            best = self.choose(ctx)
            if best < 0:
                stmt.discard()
                return None
            a = self.assignment(ctx, best)
            stmt.allocate(a)
            chosen.append(a.node)
        return stmt.commit()

    def fits_empty(self, state: ClusterState, r: Request) -> bool:
        """Would the request fit if the cluster were idle (``test`` mode)? Filters apply."""
        ctx = self.context(state, r, Mode.TEST)
        return int(ctx.feasible.sum()) >= r.nodes
