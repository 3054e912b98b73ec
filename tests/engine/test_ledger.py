"""The usage ledger: loading usage restored from records, and when orderings see usage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, node
from gpufleet.core.accounts import Account, AccountTree, User
from gpufleet.core.job import JobState, QoS, RunningJob
from gpufleet.core.state import Assignment
from gpufleet.engine.ledger import UsageLedger
from gpufleet.policies.fairshare import FairshareArgs, accrue, decay
from scenario.harness import qjob


def ledger() -> UsageLedger:
    tree = AccountTree([Account("a")], [User("u", "a")])
    return UsageLedger(tree, FairshareArgs(), {"normal": QoS("normal")}, recalc_s=300)


def test_load_replaces_the_usage_as_of_its_time() -> None:
    led = ledger()
    led.view(0)
    usage = np.arange(len(led.tree), dtype=np.float64)
    led.load(usage, at=300)
    usage[:] = 0  # the ledger keeps its own copy
    seen = led.view(300).usage  # seen at once, not a recalc period later
    assert seen.tolist() == list(range(len(led.tree)))
    later = led.view(300 + FairshareArgs().half_life_s).usage  # no run: it only decays
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


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(
        st.tuples(st.integers(0, 3000), st.integers(1, 3000), st.sampled_from(["u", "v"])),
        max_size=6,
    ),
    asked=st.lists(st.integers(0, 7000), max_size=12),
)
def test_views_do_not_depend_on_when_usage_was_asked_for(
    runs: list[tuple[int, int, str]], asked: list[int]
) -> None:
    """Two ledgers charged with the same runs show the same usage at each multiple of the
    period, bit for bit, however often one of them was asked in between (by views and
    displays): a replay that skips a cycle sees what one that ran it sees."""
    state = cluster(node("n").gpus(8))
    tree = AccountTree([Account("a")], [User("u", "a"), User("v", "a")])

    def ledger() -> UsageLedger:
        led = UsageLedger(tree, FairshareArgs(), {"normal": QoS("normal")}, recalc_s=300)
        led.state = state
        return led

    quiet, busy = ledger(), ledger()
    events = []
    for k, (start, length, user) in enumerate(runs):
        b = qjob(f"j{k}").gpus(1).user(user, account="a")
        job = b.job(state=JobState.RUNNING, start_time=start)
        r = RunningJob(job, (Assignment(node=0, gpus=(0,), gpu_milli=1000),), start + length)
        events += [(start, 1, r), (start + length, 0, r)]
    events += [(t, 2, None) for t in asked] + [(t, 3, None) for t in range(0, 7200, 300)]
    seen: dict[int, list[bytes]] = {}
    for t, what, r in sorted(events, key=lambda e: (e[0], e[1])):
        if what == 1 and r is not None:
            quiet.start(r, t), busy.start(r, t)
        elif what == 0 and r is not None:
            quiet.stop(r, t), busy.stop(r, t)
        elif what == 2:
            busy.view(t), busy.current(t)
        else:
            seen[t] = [led.view(t).usage.tobytes() for led in (quiet, busy)]
    assert all(a == b for a, b in seen.values())


def test_an_idle_gap_costs_one_step_and_only_decays(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no run charged the usage only decays, in one step however long the gap (a
    trace in epoch seconds starts 1.6e9 s after 0), to what the decay of the whole gap
    gives: the same whichever times it was asked for in between."""
    state = cluster(node("n").gpus(8))
    tree = AccountTree([Account("a")], [User("u", "a")])
    led = UsageLedger(tree, FairshareArgs(), {"normal": QoS("normal")}, recalc_s=300)
    led.state = state
    job = qjob("j").gpus(1).user("u", account="a").job(state=JobState.RUNNING, start_time=0)
    r = RunningJob(job, (Assignment(node=0, gpus=(0,), gpu_milli=1000),), 100)
    led.start(r, 0)
    led.stop(r, 100)
    stopped = led.current(100).usage
    assert stopped.any()
    steps = 0

    def counted(*args: object) -> object:
        nonlocal steps
        steps += 1
        return accrue(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("gpufleet.engine.ledger.accrue", counted)
    gap = 300 * 33_334  # a multiple of the period, 3.8 months on
    asked = led.view(gap // 3).usage.copy()
    later = led.view(gap).usage
    assert steps == 0
    half = FairshareArgs().half_life_s
    assert later.tobytes() == decay(stopped, gap - 100, half).tobytes()
    assert asked.tobytes() == decay(stopped, gap // 3 - gap // 3 % 300 - 100, half).tobytes()
    led.start(r, gap + 7)  # a run charges again, step by step, from the gap's end
    led.view(gap + 900)
    assert steps == 3


def test_a_run_stopped_in_the_past_is_charged_to_its_end_only() -> None:
    """A driver told late of an end (its node's agent was down) stops the run at the
    time it ended: what the ledger charged it since, across a recalc boundary too, is
    taken back, so usage is what it would be had the driver known at once."""
    state = cluster(node("n").gpus(8))
    tree = AccountTree([Account("a")], [User("u", "a"), User("v", "a")])

    def ledger() -> UsageLedger:
        led = UsageLedger(tree, FairshareArgs(), {"normal": QoS("normal")}, recalc_s=300)
        led.state = state
        return led

    def run(user: str, start: int) -> RunningJob:
        b = qjob(user).gpus(2).user(user, account="a")
        job = b.job(state=JobState.RUNNING, start_time=start)
        return RunningJob(job, (Assignment(node=0, gpus=(0, 1), gpu_milli=2000),), start + 1000)

    told, late = ledger(), ledger()
    late_u, other = run("u", 100), run("v", 200)
    for led in (told, late):
        led.start(late_u, 100)
        led.start(other, 200)
    told.stop(late_u, 250)
    late.view(700)  # charged up to 600, past the end, before the end is known
    late.stop(late_u, 250)
    for t in (700, 900, 1300):
        # The same but for the decay of steps cut at other times (a few parts in 1e5).
        assert late.view(t).usage == pytest.approx(told.view(t).usage, rel=1e-4)
    assert late.current(1300).usage == pytest.approx(told.current(1300).usage, rel=1e-4)
