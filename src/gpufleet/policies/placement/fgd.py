"""Fragmentation Gradient Descent (Weng et al., USENIX ATC'23).

Place each task where it increases the node's expected GPU fragmentation, as
measured against the workload's own mix of task types, the least. The
published scheduler squashes the change through a sigmoid into integer scores
0..100 and then breaks the many resulting ties at random; this plugin keeps
the exact change, so it is deterministic and loses no resolution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from gpufleet.core.fragmentation import FragmentationMeter, Workload
from gpufleet.core.model import Request
from gpufleet.core.placement import FloatArray, PlacementContext
from gpufleet.core.state import ClusterState


class FragmentationArgs(BaseModel):
    """``memory``: a task type also needs host memory to fit (the paper looks at CPU and GPU)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    memory: bool = False


class FragmentationGradient:
    NAME: ClassVar[str] = "fgd"

    def __init__(self, workload: Sequence[Request], args: FragmentationArgs | None = None) -> None:
        if not workload:
            raise ValueError("fgd needs a workload (a list of typical requests) to measure against")
        self.workload = tuple(workload)
        self.args = args or FragmentationArgs()
        self._meter: FragmentationMeter | None = None

    def meter(self, state: ClusterState) -> FragmentationMeter:
        """The fragmentation meter of ``state`` (kept while the state is the same object)."""
        if self._meter is None or self._meter.state is not state:
            workload = Workload.from_requests(self.workload, state.models, memory=self.args.memory)
            self._meter = FragmentationMeter(state, workload)
        return self._meter

    def score(self, ctx: PlacementContext) -> FloatArray:
        meter = self.meter(ctx.state)
        o = ctx.options
        before = meter.per_node()[o.node]
        return before - meter.after(o.node, o.gpu, ctx.request)  # type: ignore[no-any-return]
