"""Dual prices of share packing, checked against LPs small enough to solve by hand.

Notation: a pattern is a multiset of share sizes that fits one GPU (1000
milli). An optimal packing uses some patterns; each of them prices at exactly
one GPU, and no pattern prices above one.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.model import MILLI
from gpufleet.core.packing import on_grid, share_prices

# 470 x 2, 650 x 1, 320 x 4. The optimum uses three GPUs:
# (470, 470), (650, 320), (320, 320, 320). All three patterns are used, so all
# three are tight: 2 p470 = 1, 3 p320 = 1, p650 + p320 = 1
# -> p470 = 1/2, p320 = 1/3, p650 = 2/3 (unique).
MIX = {470: 2, 650: 1, 320: 4}


def test_prices_of_a_mix_solved_by_hand() -> None:
    p = share_prices(MIX)
    assert p.sizes.tolist() == [320, 470, 650]
    assert p.prices == pytest.approx([1 / 3, 1 / 2, 2 / 3])
    assert p.gpus == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("free", "value"),
    [
        (1000, 1.0),  # a fresh GPU: any optimal pattern
        (680, 2 / 3),  # 650, or 320 + 320
        (530, 1 / 2),  # 470 beats 320
        (350, 1 / 3),  # 320
        (319, 0.0),  # nothing fits
    ],
)
def test_value_of_free_space(free: int, value: float) -> None:
    assert share_prices(MIX).value[free] == pytest.approx(value)


@pytest.mark.parametrize(
    ("free", "size", "loss"),
    [
        # loss(f, s) = K(f) - p_s - K(f - s)
        (350, 320, 0.0),  # finishes a 650's GPU: 1/3 - 1/3 - K(30) = 0
        (530, 320, 1 / 6),  # spoils a 470's GPU: 1/2 - 1/3 - K(210) = 1/6
        (1000, 320, 0.0),  # opens a GPU: 1 - 1/3 - K(680) = 1 - 1/3 - 2/3 = 0
        (1000, 470, 0.0),  # 1 - 1/2 - K(530) = 0
        (680, 470, 1 / 6),  # beside one 320: 2/3 - 1/2 - K(210) = 1/6
        (1000, 700, 1 / 3),  # unseen size, charged K(700) = 2/3: 1 - 2/3 - K(300) = 1/3
    ],
)
def test_loss_table(free: int, size: int, loss: float) -> None:
    got = share_prices(MIX).loss(np.array([free]), size)
    assert got.tolist() == [pytest.approx(loss)]


def test_sizes_beyond_supply_are_free() -> None:
    # 810 x 3 leave three 190 gaps; the one 160 fills one of them without a GPU
    # of its own, so it costs nothing: p160 = 0, p810 = 1, three GPUs.
    p = share_prices({810: 3, 160: 1})
    assert p.prices == pytest.approx([0.0, 1.0])
    assert p.gpus == pytest.approx(3.0)
    # Beside an 810, or on a fresh GPU (an 810 can still join it): no loss.
    # On a GPU that already holds a 160 (840 free), a second 160 leaves 680,
    # too little for an 810: K(840) - 0 - K(680) = 1 - 0 - 0 = one GPU lost.
    assert p.loss(np.array([190, 1000, 840]), 160).tolist() == [0.0, 0.0, 1.0]


def test_no_shares_price_nothing() -> None:
    p = share_prices({})
    assert p.gpus == 0.0
    assert p.loss(np.array([1000, 500]), 250).tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("demand", "message"),
    [({0: 1}, "share sizes"), ({1001: 1}, "share sizes"), ({500: 0}, "positive")],
)
def test_bad_demand_is_refused(demand: dict[int, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        share_prices(demand)


def test_sizes_are_priced_on_a_10_milli_grid() -> None:
    # 315 and 320 are one size, 320, with both weights: 470 x 2, 650 x 1, 320 x 4 as in MIX.
    p = share_prices({470: 2, 650: 1, 315: 2, 320: 2})
    assert p.sizes.tolist() == [320, 470, 650]
    assert p.price(315) == p.price(320) == pytest.approx(1 / 3)
    # 318 free holds a 315 but not a 320: what is left (3) is less than the grain, no loss.
    # 530 free: as for a 320, 1/2 - 1/3 - K(210) = 1/6.
    assert p.loss(np.array([318, 530]), 315).tolist() == pytest.approx([0.0, 1 / 6])


sizes = st.integers(min_value=50, max_value=1000)
demands = st.dictionaries(sizes, st.integers(min_value=1, max_value=40), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(demands)
def test_prices_are_an_optimal_dual(demand: dict[int, int]) -> None:
    p = share_prices(demand)
    # Dual feasible: no pattern is worth more than one GPU.
    assert p.value[MILLI] <= 1 + 1e-6
    # Strong duality: the demand's price is the LP optimum.
    worth = sum(p.price(s) * n for s, n in demand.items())
    assert worth == pytest.approx(p.gpus, rel=1e-6)
    # The optimum is at least the volume and at least one GPU per share over half.
    assert p.gpus >= sum(on_grid(s) * n for s, n in demand.items()) / MILLI - 1e-6
    assert p.gpus >= sum(n for s, n in demand.items() if s > MILLI // 2) - 1e-6


@settings(max_examples=40, deadline=None)
@given(demands, st.integers(min_value=1, max_value=1000))
def test_loss_is_never_negative(demand: dict[int, int], size: int) -> None:
    free = np.arange(size, MILLI + 1)
    assert (share_prices(demand).loss(free, size) >= 0).all()
