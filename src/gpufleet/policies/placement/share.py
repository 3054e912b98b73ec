"""Share packing: put a fractional task where an optimal packing of the workload would.

A tier (``core.placement.Tier``): for a fractional request, each GPU option
costs the share of a GPU forgone by putting the task there, priced by the
workload's own mix of share sizes (``core.packing``). Only the options that
forgo least are scored further, so a 320-milli task finishes the 350 left
beside a 650 rather than spoiling the 530 beside a 470, while the scorers
still choose among equally good GPUs by node (fragmentation, CPU, topology).
Whole-GPU, MIG and CPU-only requests cost nothing here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from gpufleet.core.model import Request
from gpufleet.core.packing import SharePrices, share_prices
from gpufleet.core.placement import FloatArray, PlacementContext
from gpufleet.core.workload import or_typical


class SharePacking:
    NAME: ClassVar[str] = "share-packing"

    def __init__(self, workload: Sequence[Request]) -> None:
        """Price shares by ``workload``'s, or by ``core.workload.TYPICAL``'s where the
        fragmentation scorers would fall back to it too."""
        shares = Counter(r.gpu_milli for r in or_typical(workload) if r.gpu_milli)
        self.prices: SharePrices = share_prices(shares)

    def cost(self, ctx: PlacementContext) -> FloatArray:
        r, o = ctx.request, ctx.options
        if not r.gpu_milli:
            return np.zeros(len(o))
        return self.prices.loss(ctx.state.gpu_milli_free[o.node, o.gpu], r.gpu_milli)
