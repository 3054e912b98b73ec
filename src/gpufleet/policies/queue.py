"""First in, first out: the earliest submission runs first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from gpufleet.core.job import Job
from gpufleet.core.snapshot import FloatArray, Snapshot


class Fifo:
    """Priority is minus the submit time, so earlier jobs come first (ties: job id)."""

    NAME: ClassVar[str] = "fifo"

    def priorities(self, snapshot: Snapshot, pending: Sequence[Job], now: int) -> FloatArray:
        return -np.fromiter((j.submit_time for j in pending), dtype=np.float64, count=len(pending))
