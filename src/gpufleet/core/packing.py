"""What a GPU's free share is worth to the workload: dual prices of share packing.

Fractional tasks pack onto GPUs the way items pack into bins of 1000
milli-GPU. When the mix of share sizes is known (the workload), the best any
scheduler can do is the fractional bin-packing optimum: the linear program
over packing patterns (multisets of share sizes that fit one GPU)

    minimise   sum_p x_p                   (GPUs used)
    subject to sum_p a_sp x_p >= d_s       (every size s is packed)
               x_p >= 0

(Gilmore and Gomory's cutting-stock LP). Its dual assigns each size a
*price* pi_s, the share of a GPU that a task of that size is worth in an
optimal packing: every pattern's prices sum to at most one GPU and the
patterns an optimal packing uses sum to exactly one.

A GPU with ``f`` milli-GPU free is then worth ``K(f)``, the most that sizes
fitting in ``f`` can fetch at those prices (an unbounded knapsack). Placing
a share of size ``s`` on it forgoes

    loss(f, s) = K(f) - pi_s - K(f - s) >= 0

of a GPU: zero when the share is part of some optimal way to finish the GPU,
positive when it spoils the GPU for better-matched sizes (a 320 in the 530
that a 470 leaves, where another 470 would have fitted with 60 to spare).
A fresh GPU is worth ``K(1000) = 1``, so opening one for a size that belongs
in an optimal pattern costs nothing. Sizes whose supply of leftover space
exceeds their demand (the rare 50-160 milli shares beside 810-milli tasks on
openb) get price zero: they are free to go wherever they fit.

The LP is solved by column generation: start from one single-size pattern
per size, and add the pattern the knapsack at the current prices values
above one until none does. Sizes are priced on a grid of ``GRAIN`` milli-GPU,
rounded up: a workload of arbitrary shares then has at most 100 sizes, which
keeps the LP to well under a second, and shares that differ by less than the
grain pack alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numba import njit
from scipy.optimize import linprog

from gpufleet.core.model import MILLI
from gpufleet.core.state import IntArray

FloatArray = npt.NDArray[np.float64]

# Slack for floating-point comparisons of prices, which are fractions of a GPU.
EPS = 1e-9
# A pattern must beat one GPU by more than the LP solver's own tolerance to
# be worth adding; closer than that the prices are optimal as far as HiGHS can tell.
IMPROVES = 1e-7
MAX_ROUNDS = 500
GRAIN = 10


def on_grid(size: int) -> int:
    """``size`` rounded up to the pricing grid."""
    return -(-size // GRAIN) * GRAIN


@dataclass(frozen=True)
class SharePrices:
    """Dual prices of share packing and the value of each free amount.

    ``sizes`` (on the grid) and ``prices`` are aligned; ``value[f]`` is
    ``K(f)`` for ``f`` in 0..``MILLI``; ``gpus`` is the LP optimum, the
    fractional number of GPUs the demand needs.
    """

    sizes: IntArray
    prices: FloatArray
    value: FloatArray
    gpus: float

    def price(self, size: int) -> float:
        """The price of ``size`` (on the grid). A size outside the workload is charged
        the value of the space it takes, ``K(size)``: it displaces what would have fitted."""
        size = on_grid(size)
        i = int(np.searchsorted(self.sizes, size))
        if i < len(self.sizes) and self.sizes[i] == size:
            return float(self.prices[i])
        return float(self.value[size])

    def loss(self, free: IntArray, size: int) -> FloatArray:
        """GPU-fractions forgone by placing ``size`` on GPUs with ``free`` milli-GPU free
        (each ``free`` >= ``size``). A GPU that holds the share but not its size on
        the grid keeps less than the grain beside it: a perfect fit, no loss."""
        f = np.minimum(free, MILLI)
        s = on_grid(size)
        fits = f >= s
        rest = self.value[np.where(fits, f - s, 0)]
        out: FloatArray = np.where(fits, self.value[f] - self.price(size) - rest, 0.0)
        return np.maximum(out, 0.0)


@njit(cache=True, nogil=True)
def _knapsack(sizes: IntArray, prices: FloatArray, capacity: int) -> tuple[FloatArray, IntArray]:
    """Unbounded knapsack: best value for every capacity, and the last size taken
    (-1 where the best is to leave a milli-GPU unused)."""
    value = np.zeros(capacity + 1)
    last = np.full(capacity + 1, -1, dtype=np.int64)
    for f in range(1, capacity + 1):
        value[f] = value[f - 1]
        for k in range(sizes.shape[0]):
            if sizes[k] <= f and prices[k] + value[f - sizes[k]] > value[f] + EPS:
                value[f] = prices[k] + value[f - sizes[k]]
                last[f] = k
    return value, last


def share_prices(demand: Mapping[int, float]) -> SharePrices:
    """Solve the packing LP for ``demand`` (share size in milli-GPU -> how many or how often).

    Sizes must be in 1..``MILLI``; weights must be positive. Sizes are
    rounded up to the grid and their weights added.
    """
    if not demand:
        empty = np.zeros(0, dtype=np.int64)
        return SharePrices(empty, np.zeros(0), np.zeros(MILLI + 1), 0.0)
    if min(demand) < 1 or max(demand) > MILLI:
        raise ValueError(f"share sizes must be in 1..{MILLI} milli-GPU, got {sorted(demand)}")
    if min(demand.values()) <= 0:
        raise ValueError("share demand must be positive for every size")
    gridded: dict[int, float] = {}
    for size, weight in demand.items():
        key = on_grid(size)
        gridded[key] = gridded.get(key, 0.0) + weight
    sizes = np.array(sorted(gridded), dtype=np.int64)
    need = np.array([gridded[int(s)] for s in sizes], dtype=np.float64)
    patterns = [np.where(np.arange(len(sizes)) == i, MILLI // s, 0) for i, s in enumerate(sizes)]
    for _ in range(MAX_ROUNDS):
        a = np.array(patterns, dtype=np.float64).T
        res = linprog(np.ones(len(patterns)), A_ub=-a, b_ub=-need, bounds=(0, None), method="highs")
        if res.status != 0:
            raise RuntimeError(f"the share-packing LP failed: {res.message}")
        prices = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
        value, last = _knapsack(sizes, prices, MILLI)
        pattern = np.zeros(len(sizes), dtype=np.int64)
        f = MILLI
        while f > 0:
            if last[f] < 0:
                f -= 1
            else:
                pattern[last[f]] += 1
                f -= int(sizes[last[f]])
        if value[MILLI] <= 1.0 + IMPROVES or any((pattern == p).all() for p in patterns):
            return SharePrices(sizes, prices, value, float(res.fun))
        patterns.append(pattern)
    raise RuntimeError(f"share-packing prices did not settle in {MAX_ROUNDS} rounds")
