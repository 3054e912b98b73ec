"""Preemption scenarios: the cheapest victims, exempt time, tiers, and never in vain.

Costs are GPU-hours lost: GPUs x seconds since the last checkpoint (or the
start) / 3600. Now is 7200 throughout.
"""

from __future__ import annotations

import pytest

from builders import node
from gpufleet.core.job import Partition, QoS
from gpufleet.core.plan import Plan
from scenario.harness import Scenario, qjob

NOW = 7200


def scenario(scavenger_exempt_s: int = 0) -> Scenario:
    return Scenario(
        [node("a").gpus(8), node("b").gpus(8)],
        now=NOW,
        qos=[
            QoS("normal"),
            QoS("high", preempt=("scavenger",)),
            QoS(
                "scavenger", preempt_mode="cancel", grace_s=30, preempt_exempt_s=scavenger_exempt_s
            ),
        ],
        preemption=True,
    )


def test_preemption_picks_the_cheapest_victims() -> None:
    sc = scenario()
    # a: one 8-GPU job since 0 -> 8 x 2 h = 16 GPU-hours.
    sc.run(qjob("big").gpus(8).qos("scavenger").limit(90_000), start=0, on="a")
    # b: a 4-GPU job since 0 (8 GPU-h) and a 4-GPU job checkpointed at 6800
    # (4 x 400 s = 0.44 GPU-h).
    sc.run(qjob("old").gpus(4).qos("scavenger").limit(90_000), start=0, on="b")
    sc.run(
        qjob("ckpt").gpus(4).qos("scavenger").limit(90_000),
        start=0,
        on="b",
        checkpoint_interval_s=400,
        last_checkpoint=6800,
    )
    out = sc.submit(qjob("urgent").gpus(4).qos("high")).cycle()
    assert out.preempted == {"ckpt": "urgent"}
    assert out.starts == {"urgent": ["b"]}
    (p,) = out.plan.preemptions
    assert (p.mode, p.grace_s) == ("cancel", 30)


def test_preemption_respects_exempt_time() -> None:
    sc = scenario(scavenger_exempt_s=1000)
    sc.run(qjob("big").gpus(8).qos("scavenger").limit(90_000), start=0, on="a")  # 16 GPU-h
    sc.run(qjob("old").gpus(4).qos("scavenger").limit(90_000), start=0, on="b")  # 8 GPU-h
    # Only 7200 - 6800 = 400 s old: exempt (< 1000 s), although cheapest.
    sc.run(qjob("young").gpus(4).qos("scavenger").limit(90_000), start=6800, on="b")
    out = sc.submit(qjob("urgent").gpus(4).qos("high")).cycle()
    assert out.preempted == {"old": "urgent"}


def test_fewest_jobs_break_a_cost_tie() -> None:
    sc = scenario()
    # a: two 4-GPU jobs of 1 h each: 4 + 4 = 8 GPU-h. b: one 8-GPU job of 1 h: 8 GPU-h.
    sc.run(qjob("a1").gpus(4).qos("scavenger").limit(90_000), start=3600, on="a")
    sc.run(qjob("a2").gpus(4).qos("scavenger").limit(90_000), start=3600, on="a")
    sc.run(qjob("b1").gpus(8).qos("scavenger").limit(90_000), start=3600, on="b")
    out = sc.submit(qjob("urgent").gpus(8).qos("high")).cycle()
    assert out.preempted == {"b1": "urgent"}


def test_never_preempt_unless_the_job_would_then_fit() -> None:
    sc = scenario()
    # Each node: 4 GPUs of scavenger (preemptible) and 4 of normal (not).
    for n in ("a", "b"):
        sc.run(qjob(f"s-{n}").gpus(4).qos("scavenger").limit(90_000), start=0, on=n)
        sc.run(qjob(f"n-{n}").gpus(4).limit(90_000), start=0, on=n)
    out = sc.submit(qjob("urgent").gpus(8).qos("high")).cycle()  # 4 freeable < 8 needed
    assert out.preempted == {}
    assert out.starts == {}
    assert out.reasons == {"urgent": "Resources"}


def test_a_qos_without_preempt_rights_waits() -> None:
    sc = scenario()
    sc.run(qjob("s").gpus(8).qos("scavenger").limit(90_000), start=0, on="a")
    sc.run(qjob("t").gpus(8).qos("scavenger").limit(90_000), start=0, on="b")
    out = sc.submit(qjob("plain").gpus(8)).cycle()
    assert out.preempted == {}
    assert out.reasons == {"plain": "Resources"}


@pytest.mark.parametrize(("preemptible", "victims"), [(True, {"low": "vip"}), (False, {})])
def test_a_higher_partition_tier_preempts_a_preemptible_partition(
    preemptible: bool, victims: dict[str, str]
) -> None:
    sc = Scenario(
        [node("a").gpus(8)],
        now=NOW,
        partitions=[
            Partition("main", priority_tier=0, preemptible=preemptible),
            Partition("prio", priority_tier=10),
        ],
        preemption=True,
    )
    sc.run(qjob("low").gpus(8).limit(90_000), start=0, on="a")
    out = sc.submit(qjob("vip").gpus(8).partition("prio")).cycle()
    assert out.preempted == victims


def test_a_gang_preempts_on_as_many_nodes_as_it_needs() -> None:
    sc = scenario()
    sc.run(qjob("x").gpus(8).qos("scavenger").limit(90_000), start=0, on="a")  # 16 GPU-h
    sc.run(qjob("y").gpus(8).qos("scavenger").limit(90_000), start=3600, on="b")  # 8 GPU-h
    out = sc.submit(qjob("gang").gpus(8).gang(2).qos("high")).cycle()
    assert out.preempted == {"x": "gang", "y": "gang"}
    assert out.starts == {"gang": ["a", "b"]}


def grace_scene() -> Scenario:
    """a: a cheap scavenger (1 h, 8 GPU-h); b: an older one (2 h, 16 GPU-h). Grace 30 s."""
    sc = scenario()
    sc.run(qjob("cheap").gpus(8).qos("scavenger").limit(90_000), start=3600, on="a")
    sc.run(qjob("dear").gpus(8).qos("scavenger").limit(90_000), start=0, on="b")
    return sc.submit(qjob("urgent").gpus(8).qos("high"))


def test_a_victim_in_its_grace_time_is_not_picked_again_and_keeps_its_room() -> None:
    sc = grace_scene()
    first = sc.step()
    assert first.preempted == {"cheap": "urgent"}
    assert first.effects is not None and first.effects.deferred == ["urgent"]
    assert sc.snapshot().signalled == {"cheap": "urgent"}
    # 10 s later cheap still runs. urgent is planned into cheap's room again,
    # neither signalling cheap twice nor taking dear as well; next, behind
    # urgent, cannot have cheap's room and preempts dear instead.
    sc.submit(qjob("next").gpus(8).qos("high").submit(NOW))
    again = sc.step(NOW + 10)
    assert again.preempted == {"dear": "next"}
    assert again.starts == {"urgent": ["a"], "next": ["b"]}
    assert again.effects is not None and again.effects.deferred == ["urgent", "next"]


def test_the_room_goes_to_the_job_once_the_victim_is_gone() -> None:
    sc = grace_scene()
    sc.step()
    assert sc.book is not None
    # During the grace time a job arrives that comes first in the queue (an
    # earlier submit time) and cannot preempt: it must not take the room.
    sc.submit(qjob("early").gpus(8).submit(-1))
    sc.book.stop("cheap", NOW + 30, requeue=False)  # the grace time ran out: cancelled
    assert sc.snapshot().promised.keys() == {"urgent"}
    out = sc.step(NOW + 30)
    assert out.starts == {"urgent": ["a"]} and out.preempted == {}
    assert out.reasons == {"early": "Resources"}
    assert out.effects is not None and [s.job_id for s in out.effects.started] == ["urgent"]
    assert sc.snapshot().promised == {}


def test_a_promise_lasts_one_cycle() -> None:
    sc = grace_scene()
    sc.step()
    assert sc.book is not None
    sc.book.stop("cheap", NOW + 30, requeue=False)
    sc.book.apply(Plan(), NOW + 30)  # a cycle that did not start urgent (say, it was held)
    assert sc.snapshot().promised == {}


def test_the_room_is_the_jobs_even_behind_a_job_that_blocks_a_strict_queue() -> None:
    sc = Scenario(
        [node("a").gpus(8), node("b").gpus(8)],
        now=NOW,
        qos=[
            QoS("normal"),
            QoS("high", preempt=("scavenger",)),
            QoS("scavenger", preempt_mode="requeue", grace_s=30),
        ],
        backfill="none",
        preemption=True,
    )
    sc.run(qjob("cheap").gpus(8).qos("scavenger").limit(90_000), start=3600, on="a")
    sc.run(qjob("dear").gpus(8).qos("scavenger").limit(90_000), start=0, on="b")
    sc.submit(qjob("urgent").gpus(8).qos("high").submit(NOW))
    assert sc.step().preempted == {"cheap": "urgent"}
    assert sc.book is not None
    # In the grace time a job ahead of urgent waits for resources, which without
    # backfill stops the partition: urgent is still planned into cheap's room.
    sc.submit(qjob("early").gpus(8).submit(-1))
    out = sc.step(NOW + 10)
    assert out.starts == {"urgent": ["a"]} and out.preempted == {}
    assert out.reasons == {"early": "Resources"}
    # cheap, requeued, ranks above urgent too (submitted at 0), and cannot have the room.
    sc.book.stop("cheap", NOW + 30, requeue=True)
    out = sc.step(NOW + 30)
    assert out.starts == {"urgent": ["a"]} and out.preempted == {}
    assert out.reasons == {"early": "Resources", "cheap": "Priority"}
    assert out.effects is not None and [s.job_id for s in out.effects.started] == ["urgent"]
