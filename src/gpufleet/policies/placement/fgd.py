"""Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).

Place each task where it increases the node's expected GPU fragmentation, as
measured against the workload's own mix of task types, the least.

The published scheduler reports each node's change through a sigmoid as an
integer score 0..100, the Kubernetes score range: ``floor(100 * sigmoid(delta /
1000))`` with ``delta`` in milli-GPU. That rounding is part of the method's
behaviour, not a detail: changes within about 40 milli-GPU of each other tie,
and the tie-break (here the lowest node index, which packs) then decides. On
the openb trace the rounded scores fill about 0.6 points more of the cluster
than the exact change, so ``resolution="paper"`` is the default and
``"exact"`` is kept for measures whose scale differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from gpufleet.core.fragmentation import (
    GPU,
    FragmentationMeter,
    LastPlaces,
    Workload,
    competing,
    node_pressure,
    runs_out_first,
    stranded,
)
from gpufleet.core.model import Request
from gpufleet.core.placement import FloatArray, PlacementContext
from gpufleet.core.state import ClusterState
from gpufleet.core.workload import or_typical
from gpufleet.policies.tables import StrictTable


class FragmentationArgs(StrictTable):
    """How fragmentation is measured and scored.

    ``memory``: a task type also needs its host memory to fit (the paper
    checks CPU and GPU only). ``fit_weight`` and ``capacity_weight`` blend the
    paper's measure (does one more task of a type fit?) with the capacity
    measure (how much could repeated tasks of a share type take, bounded by GPU
    slots, CPU and memory together?); see ``core.fragmentation``. ``popularity``:
    keep only the most common task types covering this share of all tasks.
    ``scarcity_weight``: charge a GPU task for the GPU, CPU and memory it takes
    on nodes that types able to go to few nodes depend on
    (``core.fragmentation.node_pressure``: model, CPU, memory or GPU count
    narrow where a type fits), in milli-GPU per milli-GPU of excess pressure.
    ``stranding_weight``: charge GPU capacity that the node's free CPU and memory
    could no longer carry at the workload's ratios (``core.fragmentation.stranded``),
    in milli-GPU per milli-GPU stranded. ``last_place_weight``: charge a task for
    the places it takes from types short of them (``core.fragmentation.LastPlaces``),
    in milli-GPU per milli-GPU of expected work turned away. Where the workload
    would exhaust CPU or memory before GPUs (``core.fragmentation.runs_out_first``),
    node pressure fades as that resource fills, stranding is measured at every
    task's ratio (``core.fragmentation.competing``), and only CPU-only tasks pay
    for the places of GPU types they take.
    """

    memory: bool = False
    fit_weight: float = Field(1.0, ge=0)
    capacity_weight: float = Field(0.0, ge=0)
    scarcity_weight: float = Field(0.0, ge=0)
    stranding_weight: float = Field(0.0, ge=0)
    last_place_weight: float = Field(0.0, ge=0)
    popularity: float = Field(1.0, gt=0, le=1)
    resolution: Literal["paper", "exact"] = "paper"


class FragmentationGradient:
    NAME: ClassVar[str] = "fgd"

    def __init__(self, workload: Sequence[Request], args: FragmentationArgs | None = None) -> None:
        """Measure against ``workload``: typical requests, ``core.workload.TYPICAL`` if
        it has none that fragmentation models (an empty one, or MIG requests only)."""
        self.workload = or_typical(workload)
        self.args = args or FragmentationArgs()
        self._meter: FragmentationMeter | None = None
        self._places: LastPlaces | None = None
        self._excess: FloatArray = np.zeros((0, 3))
        self._scale: FloatArray = np.ones(3)
        self._first = GPU
        self._strand: Workload | None = None

    def meter(self, state: ClusterState) -> FragmentationMeter:
        """The fragmentation meter of ``state`` (kept while the state is the same object
        and keeps its shape)."""
        m = self._meter
        if m is None or m.state is not state or m.epoch != state.epoch:
            workload = Workload.from_requests(
                self.workload,
                state.models,
                memory=self.args.memory,
                fit_weight=self.args.fit_weight,
                capacity_weight=self.args.capacity_weight,
                popularity=self.args.popularity,
            )
            m = self._meter = FragmentationMeter(state, workload)
            # Where CPU (or memory) runs out before GPUs, CPU-only tasks draw on the
            # CPU beside free GPUs too (cpu4x in docs/placement.md).
            self._first = runs_out_first(workload, state)
            self._strand = competing(workload) if self._first != GPU else workload
            if self.args.last_place_weight:
                self._places = LastPlaces(state, workload, m.model, self.workload)
            # Only pressure above the cluster's costs: a bonus for nodes below it
            # pulled GPU work onto the smallest nodes.
            self._excess = np.maximum(node_pressure(workload, state, m.model) - 1.0, 0.0)
            gpu = float(state.gpu_milli_total.sum())
            # CPU and memory in GPU units: a share of the cluster's CPU is worth
            # the same share of its GPU capacity.
            self._scale = gpu / np.maximum([gpu, state.cpu_total.sum(), state.mem_total.sum()], 1.0)
        return m

    def score(self, ctx: PlacementContext) -> FloatArray:
        meter = self.meter(ctx.state)
        o = ctx.options
        delta: FloatArray = meter.per_node()[o.node] - meter.after(o.node, o.gpu, ctx.request)
        r = ctx.request
        if self.args.scarcity_weight and r.gpu_count:
            # Resources taken where some types' demand exceeds the cluster's mean
            # cost that much more, in the same milli-GPU units as the gain.
            # CPU-only tasks are left out: charged too, they moved onto nodes where
            # they strand GPUs (cpu4x in docs/placement.md).
            taken = np.array([r.gpu_count * r.milli_per_gpu, r.cpu_milli, r.memory_mib])
            weight = self.args.scarcity_weight * self._fade(ctx.state)
            delta -= weight * (self._excess[o.node] @ (taken * self._scale))
        if self.args.last_place_weight and self._places is not None:
            # Every task, CPU-only ones too (only they where CPU runs out first): it
            # pays only for places it removes.
            lost = self._places.cost(o.node, o.gpu, r, meter.digests())
            delta -= self.args.last_place_weight * lost
        if self.args.stranding_weight:
            strand = self._strand or meter.workload
            delta -= self.args.stranding_weight * self._stranding(ctx, strand)
        if self.args.resolution == "exact":
            return delta
        rounded: FloatArray = np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))
        return rounded

    def _fade(self, state: ClusterState) -> float:
        """How much node pressure still counts: fully while GPUs run out first; else the
        share of the first-exhausted resource still free, to the fourth power. Kept in
        full it cost cpu4x its lead; dropped, the large tasks lost the large nodes to
        smaller GPU tasks, which go there to strand less (cpu4x in docs/placement.md).
        CPU-only tasks pay no pressure: the last-places term keeps them off."""
        if self._first == GPU:
            return 1.0
        free, total = [(state.cpu_free, state.cpu_total), (state.mem_free, state.mem_total)][
            self._first - 1
        ]
        live = ~state.removed
        return (float(free[live].sum()) / max(float(total[live].sum()), 1.0)) ** 4

    @staticmethod
    def _stranding(ctx: PlacementContext, workload: Workload) -> FloatArray:
        """How much more GPU capacity each option's node strands after the placement."""
        st, r, node = ctx.state, ctx.request, ctx.options.node
        gpu, cpu, mem = st.gpu_free_sum[node], st.cpu_free[node], st.mem_free[node]
        before = stranded(gpu, cpu, mem, workload)
        after = stranded(
            gpu - r.gpu_count * r.milli_per_gpu, cpu - r.cpu_milli, mem - r.memory_mib, workload
        )
        grown: FloatArray = after - before
        return grown
