"""Gangs start whole or not at all; reservations keep outsiders off their nodes."""

from __future__ import annotations

import pytest

from builders import node
from gpufleet.core.job import Reservation
from scenario.harness import Scenario, qjob


def test_a_gang_is_all_or_nothing() -> None:
    sc = Scenario([node("a").gpus(8), node("b").gpus(8), node("c").gpus(8)], now=0)
    sc.run(qjob("r").gpus(8).limit(500), start=0, on="c")
    out = sc.submit(
        qjob("g3").gpus(8).gang(3).submit(1),  # only a and b are free: no partial start
        qjob("g2").gpus(8).gang(2).limit(400).submit(2),  # ends at 400 <= 500: backfills
    ).cycle()
    assert out.starts == {"g2": ["a", "b"]}
    assert out.expected_start == {"g3": 500}
    assert out.reasons == {"g3": "Resources"}


def test_a_gang_at_the_head_is_not_starved_by_small_jobs() -> None:
    sc = Scenario([node("a").gpus(8), node("b").gpus(8)], now=0)
    sc.run(qjob("r").gpus(8).limit(500), start=0, on="b")
    sc.submit(qjob("gang").gpus(8).gang(2).submit(1))
    # A stream of one-GPU jobs that would each outlive the hold at 500.
    sc.submit(*(qjob(f"s{i}").gpus(1).limit(1000).submit(2 + i) for i in range(8)))
    out = sc.cycle()
    assert out.expected_start == {"gang": 500}
    assert out.starts == {}


def reserved(**kw: object) -> Scenario:
    res = Reservation("train", start=100, end=5000, nodes=("a",), users=("bob",), **kw)  # type: ignore[arg-type]
    return Scenario([node("a").gpus(8), node("b").gpus(8)], now=0, reservations=[res])


@pytest.mark.parametrize(
    ("now", "job", "outcome"),
    [
        # An outsider fits on a only if it ends by 100.
        (0, qjob("j").gpus(8).limit(100), ("start", ["a"])),
        (0, qjob("j").gpus(16 // 2).gang(2).limit(101), ("wait", "Resources")),
        # bob, inside the reservation, before its start: waits for it.
        (0, qjob("j").gpus(8).user("bob").with_(reservation="train"), ("wait", "Reservation")),
        # bob inside the window: runs on a; alice naming it is not admitted.
        (200, qjob("j").gpus(8).user("bob").with_(reservation="train"), ("start", ["a"])),
        (200, qjob("j").gpus(8).with_(reservation="train"), ("wait", "Reservation")),
        # bob's job must end inside the window: 200 + 4801 > 5000.
        (
            200,
            qjob("j").gpus(8).user("bob").limit(4801).with_(reservation="train"),
            ("wait", "Resources"),
        ),
        # After the window, a is everyone's again.
        (5000, qjob("j").gpus(8).gang(2), ("start", ["a", "b"])),
    ],
)
def test_a_reservation_blocks_outsiders(now: int, job: object, outcome: tuple[str, object]) -> None:
    sc = reserved()
    sc.now = now
    out = sc.submit(job).cycle()  # type: ignore[arg-type]
    kind, value = outcome
    if kind == "start":
        assert out.starts == {"j": value}
    else:
        assert out.starts == {}
        assert out.reasons == {"j": value}


def test_a_maintenance_reservation_admits_nobody() -> None:
    sc = reserved(maintenance=True)
    sc.now = 200
    out = sc.submit(
        qjob("named").gpus(8).user("bob").with_(reservation="train").submit(1),
        qjob("other").gpus(8).gang(2).submit(2),
    ).cycle()
    assert out.starts == {}
    assert out.reasons == {"named": "Reservation", "other": "Resources"}
    assert out.expected_start == {"other": 5000}  # after the maintenance window


def test_a_gpu_count_reservation_holds_whole_nodes() -> None:
    res = Reservation("r", start=0, end=1000, gpus=10, accounts=("ops",))
    sc = Scenario([node(n).gpus(8) for n in "abc"], now=0, reservations=[res])
    # 10 GPUs -> nodes a (8) and b (16 >= 10): only c is left to outsiders.
    out = sc.submit(
        qjob("in").gpus(8).gang(2).limit(900).user("eve", "ops").with_(reservation="r").submit(1),
        qjob("out").gpus(8).submit(2),
        qjob("out2").gpus(8).submit(3),
    ).cycle()
    assert out.starts == {"in": ["a", "b"], "out": ["c"]}
    assert out.reasons == {"out2": "Resources"}
