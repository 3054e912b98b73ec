"""First in, first out: the earliest submission runs first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from gpufleet.core.job import Job
from gpufleet.core.snapshot import FloatArray, Snapshot


class Fifo:
    """Every job has the same priority, so the cycle's tie-break is the order: earlier
    submission first, then lower job id."""

    NAME: ClassVar[str] = "fifo"
    clocked: ClassVar[bool] = False

    def priorities(self, snapshot: Snapshot, pending: Sequence[Job], now: int) -> FloatArray:
        return np.zeros(len(pending))
