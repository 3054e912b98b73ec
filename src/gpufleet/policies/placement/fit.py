"""Resource-fit scorers: first-fit, best-fit, most- and least-allocated, dot-product."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from gpufleet.core.placement import FloatArray, PlacementContext
from gpufleet.policies.tables import StrictTable


class FirstFit:
    """The lowest-numbered node that fits, and on it the lowest GPU."""

    NAME: ClassVar[str] = "first-fit"

    def score(self, ctx: PlacementContext) -> FloatArray:
        o = ctx.options
        width: int = ctx.state.gpu_exists.shape[1] + 1  # node-major: GPUs stay within a node
        return -(o.node * width + np.maximum(o.gpu, 0)).astype(np.float64)


class BestFit:
    """The tightest fit by GPU: least free milli-GPU left on the node afterwards.

    Ties go to the option leaving the least on the chosen GPU (a fractional
    task joins the fullest GPU it fits on), then to the least free CPU share.
    This GPU-first ordering is the variant that suits GPU clusters: the
    classic weighted sum over all resources lets CPU-heavy nodes attract
    small GPU tasks and strand whole GPUs.
    """

    NAME: ClassVar[str] = "best-fit"

    def score(self, ctx: PlacementContext) -> FloatArray:
        node_left = ctx.gpu_free_after()
        gpu_left = ctx.chosen_gpu_free_after() if ctx.request.gpu_milli else 0 * node_left
        total_cpu = np.maximum(ctx.state.cpu_total[ctx.options.node], 1)
        cpu_share = ctx.cpu_free_after() / total_cpu  # in [0, 1): a tie-break only
        return -(node_left * 1001.0 + gpu_left + cpu_share)


class AllocationArgs(StrictTable):
    strategy: Literal["most", "least"] = "most"


class Allocation:
    """Share of the node allocated after placement, averaged over CPU and GPU.

    ``most`` packs (Kubernetes' MostAllocated, the "packing" policy); ``least``
    spreads (LeastAllocated). Memory is left out on purpose: GPU hosts are
    provisioned with memory to spare and it would dilute the GPU signal.
    """

    NAME: ClassVar[str] = "allocation"

    def __init__(self, args: AllocationArgs | None = None) -> None:
        self.args = args or AllocationArgs()

    def score(self, ctx: PlacementContext) -> FloatArray:
        st, nodes = ctx.state, ctx.options.node
        cpu_used = 1.0 - ctx.cpu_free_after() / np.maximum(st.cpu_total[nodes], 1)
        gpu_total = st.gpu_milli_total[nodes].sum(axis=1)
        gpu_used = np.where(gpu_total > 0, 1.0 - ctx.gpu_free_after() / np.maximum(gpu_total, 1), 1)
        used = (cpu_used + gpu_used) / 2
        return used if self.args.strategy == "most" else -used


class DotProduct:
    """Tetris-style alignment: the smallest dot product of demand and what is left.

    Both vectors are (CPU, GPU) as shares of the node's capacity, measured
    after placement; a small product means the task fills the dimensions the
    node has least of, leaving it balanced.
    """

    NAME: ClassVar[str] = "dot-product"

    def score(self, ctx: PlacementContext) -> FloatArray:
        st, r, nodes = ctx.state, ctx.request, ctx.options.node
        cpu_cap = np.maximum(st.cpu_total[nodes], 1)
        gpu_cap = np.maximum(st.gpu_milli_total[nodes].sum(axis=1), 1)
        demand_cpu = r.cpu_milli / cpu_cap
        demand_gpu = r.milli_per_gpu * r.gpu_count / gpu_cap
        left_cpu = ctx.cpu_free_after() / cpu_cap
        left_gpu = ctx.gpu_free_after() / gpu_cap
        dot: FloatArray = demand_cpu * left_cpu + demand_gpu * left_gpu
        return -dot


class RandomArgs(StrictTable):
    seed: int = 0


class Random:
    """A uniformly random feasible option, from a seeded generator (reproducible)."""

    NAME: ClassVar[str] = "random"

    def __init__(self, args: RandomArgs | None = None) -> None:
        self.rng = np.random.default_rng((args or RandomArgs()).seed)

    def score(self, ctx: PlacementContext) -> FloatArray:
        return self.rng.random(len(ctx.options))
