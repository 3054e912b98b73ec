"""The usage ledger: loading usage restored from records."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.core.accounts import Account, AccountTree, User
from gpufleet.core.job import QoS
from gpufleet.engine.ledger import UsageLedger
from gpufleet.policies.fairshare import FairshareArgs


def ledger() -> UsageLedger:
    tree = AccountTree([Account("a")], [User("u", "a")])
    return UsageLedger(tree, FairshareArgs(), {"normal": QoS("normal")}, recalc_s=300)


def test_load_replaces_the_usage_as_of_its_time() -> None:
    led = ledger()
    led.view(0)
    usage = np.arange(len(led.tree), dtype=np.float64)
    led.load(usage, at=100)
    usage[:] = 0  # the ledger keeps its own copy
    seen = led.view(100).usage  # seen at once, not a recalc period later
    assert seen.tolist() == list(range(len(led.tree)))
    later = led.view(100 + FairshareArgs().half_life_s).usage  # no run: it only decays
    assert later[1:] == pytest.approx(seen[1:] / 2)


@pytest.mark.parametrize("bad", [[1.0], [-1.0, 0.0, 0.0], [float("nan"), 0.0, 0.0]])
def test_load_refuses_usage_that_does_not_fit(bad: list[float]) -> None:
    led = ledger()
    with pytest.raises(ValueError):
        led.load(bad, at=0)


@pytest.mark.parametrize(
    ("recalc_s", "first", "same", "new"),
    [
        (300, 170, [170, 299], 300),  # the next multiple, not 170 + 300
        (300, 300, [300, 599], 600),
        (300, 0, [0, 299], 300),
        (0, 170, [], 171),  # 0: every view is fresh
    ],
)
def test_views_change_at_multiples_of_the_recalc_period(
    recalc_s: int, first: int, same: list[int], new: int
) -> None:
    """As multifactor's ``calc_period_s`` moves priorities at its multiples, so that a
    period of the same length recomputes usage and priorities at once (Slurm's one
    decay thread), and a replay wakes once per period, not twice."""
    tree = AccountTree([Account("a")], [User("u", "a")])
    led = UsageLedger(tree, FairshareArgs(), {"normal": QoS("normal")}, recalc_s=recalc_s)
    led.load(np.ones(len(tree)), at=0)
    seen = led.view(first)
    assert led.next_view() == (first - first % recalc_s + recalc_s if recalc_s else first)
    for t in same:
        assert led.view(t) is seen
    fresh = led.view(new)
    assert fresh is not seen
    assert fresh.usage[1] < seen.usage[1]  # decayed since
