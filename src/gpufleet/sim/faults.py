"""Random node failures for the simulator: exponential up and down times, seeded.

Each node fails after an exponentially distributed time with mean ``mtbf_s``
(the mean time between failures of one node) and is repaired after another
with mean ``mttr_s``: the memoryless model reliability studies of GPU
clusters fit to their failure logs. Draws come from one seeded numpy
Generator in the order the driver asks, and the driver asks in event order,
so a seed gives the same failures every time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


class FaultModel:
    """Failure and repair times; every time is whole seconds, at least 1."""

    def __init__(self, mtbf_s: float, mttr_s: float, seed: int) -> None:
        if mtbf_s <= 0 or mttr_s <= 0:
            raise ValueError(f"mtbf_s and mttr_s: must be more than zero, got {mtbf_s}, {mttr_s}")
        self.mtbf_s = mtbf_s
        self.mttr_s = mttr_s
        self.rng = np.random.default_rng(seed)

    def first_failures(self, nodes: int) -> npt.NDArray[np.int64]:
        """When each of ``nodes`` healthy nodes first fails, from time 0."""
        draws = self.rng.exponential(self.mtbf_s, size=nodes)
        return np.maximum(1, np.ceil(draws)).astype(np.int64)

    def fail_after(self) -> int:
        """Seconds from a repair to the node's next failure."""
        return max(1, int(np.ceil(self.rng.exponential(self.mtbf_s))))

    def repair_after(self) -> int:
        """Seconds from a failure to the repair."""
        return max(1, int(np.ceil(self.rng.exponential(self.mttr_s))))
