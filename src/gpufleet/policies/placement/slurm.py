"""Slurm's node choice (``select/cons_tres``), for replays of a Slurm cluster."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from gpufleet.core.consecutive import consecutive_nodes
from gpufleet.core.placement import FloatArray, PlacementContext


class ConsTres:
    """The nodes ``core.consecutive`` picks for the whole job (a gang's members
    placed before count as still free), the lowest first; the lowest GPUs on them
    (the placer's default picker), as Slurm takes GPUs."""

    NAME: ClassVar[str] = "cons-tres"

    def score(self, ctx: PlacementContext) -> FloatArray:
        st, r, nodes = ctx.state, ctx.request, ctx.options.node
        usable, cpus = ctx.feasible.copy(), st.cpu_free.copy()
        taken = list(ctx.gang_nodes)
        usable[taken] = True
        cpus[taken] += r.cpu_milli
        picked = np.zeros(st.num_nodes, dtype=np.bool_)
        picked[consecutive_nodes(usable, cpus, r.nodes, r.cpu_milli, st.removed)] = True
        # Another node only if the pick failed (nodes an earlier member took).
        return np.where(picked[nodes], 0.0, -float(st.num_nodes)) - nodes
