"""Per-job node constraints: --nodelist, --exclude, --constraint, --exclusive and --begin.

Nodes have 8 GPUs each; now is 100 unless a test says otherwise.
"""

from __future__ import annotations

import pytest

from builders import node
from gpufleet.core.constraints import parse_constraint
from gpufleet.core.job import QoS
from gpufleet.core.model import InvalidSpec
from scenario.harness import Scenario, qjob


def labelled() -> Scenario:
    return Scenario(
        [
            node("a").gpus(8).label("ib", "").label("zone", "eu"),
            node("b").gpus(8).label("zone", "us"),
            node("c").gpus(8).label("ib", "").label("zone", "us"),
        ],
        now=100,
    )


def test_nodelist_places_only_on_the_named_nodes() -> None:
    out = labelled().submit(qjob("j").gpus(1).with_(nodelist=("c",))).cycle()
    assert out.starts == {"j": ["c"]}  # first fit would take a


def test_nodelist_naming_no_known_node_is_not_available() -> None:
    out = labelled().submit(qjob("j").gpus(1).with_(nodelist=("zz",))).cycle()
    assert out.reasons == {"j": "ReqNodeNotAvail"}


def test_exclude_keeps_the_job_off_those_nodes() -> None:
    out = labelled().submit(qjob("j").gpus(1).with_(exclude=("a", "b"))).cycle()
    assert out.starts == {"j": ["c"]}


def test_a_busy_named_node_makes_the_job_wait_though_others_are_free() -> None:
    sc = labelled().run(qjob("r").gpus(8).limit(900), start=0, on="c")
    out = sc.submit(qjob("j").gpus(1).with_(nodelist=("c",))).cycle()
    assert out.reasons == {"j": "Resources"}
    assert out.expected_start == {"j": 900}  # when r ends on c, not now on a or b


@pytest.mark.parametrize(
    ("constraint", "where"),
    [
        ("ib", "a"),  # a and c have the ib label; first fit takes a
        ("zone=us", "b"),
        ("ib&zone=us", "c"),
        ("zone=ap|zone=us", "b"),
        ("(zone=eu|zone=us)&ib&zone=us", "c"),
    ],
)
def test_constraint_selects_nodes_by_feature(constraint: str, where: str) -> None:
    out = labelled().submit(qjob("j").gpus(1).with_(constraint=constraint)).cycle()
    assert out.starts == {"j": [where]}


def test_constraint_no_node_has_is_not_available() -> None:
    out = labelled().submit(qjob("j").gpus(1).with_(constraint="zone=ap")).cycle()
    assert out.reasons == {"j": "ReqNodeNotAvail"}


@pytest.mark.parametrize("bad", ["a&", "(a|b", "a b", "|a", "a=b=c"])
def test_a_malformed_constraint_is_refused_at_the_job(bad: str) -> None:
    with pytest.raises(InvalidSpec, match=r"job\.constraint"):
        qjob("j").gpus(1).with_(constraint=bad).job()
    assert parse_constraint("") == ()


def test_constraint_narrows_the_victims_of_a_preemption() -> None:
    sc = labelled()
    sc.preemption = True
    sc.qos = [QoS("normal", preempt=("low",)), QoS("low")]
    # a has the cheapest victim (newest), but only c has ib in zone us.
    sc.run(qjob("va").gpus(8).qos("low").limit(9000), start=90, on="a")
    sc.run(qjob("vb").gpus(8).qos("low").limit(9000), start=0, on="b")
    sc.run(qjob("vc").gpus(8).qos("low").limit(9000), start=0, on="c")
    out = sc.submit(qjob("j").gpus(8).with_(constraint="ib&zone=us")).cycle()
    assert out.preempted == {"vc": "j"} and out.starts == {"j": ["c"]}


# -- exclusive ----------------------------------------------------------------------


def three() -> Scenario:
    return Scenario([node(n).gpus(8) for n in "abc"], now=100)


def test_exclusive_job_goes_only_where_nothing_runs() -> None:
    sc = three().run(qjob("r").gpus(1).limit(900), start=0, on="a")
    out = sc.submit(qjob("x").gpus(1).with_(exclusive=True)).cycle()
    assert out.starts == {"x": ["b"]}  # a has 7 free GPUs but runs r


def test_nothing_else_goes_where_an_exclusive_job_runs() -> None:
    sc = Scenario([node(n).gpus(8) for n in "ab"], now=100)
    sc.run(qjob("x").gpus(1).limit(900), start=0, on="a", exclusive=True)
    sc.run(qjob("r").gpus(8).limit(500), start=0, on="b")
    out = sc.submit(qjob("j").gpus(1).limit(100)).cycle()
    assert out.reasons == {"j": "Resources"}
    assert out.expected_start == {"j": 500}  # b frees at 500; a stays x's until 900


def test_an_exclusive_start_keeps_later_jobs_of_the_cycle_off_its_node() -> None:
    sc = Scenario([node(n).gpus(8) for n in "ab"], now=100)
    sc.run(qjob("r").gpus(8).limit(500), start=0, on="b")
    out = sc.submit(
        qjob("x").gpus(1).submit(1).with_(exclusive=True), qjob("j").gpus(1).submit(2)
    ).cycle()
    assert out.starts == {"x": ["a"]}
    assert out.reasons == {"j": "Resources"}


def test_exclusive_hold_waits_until_every_job_on_the_node_ends() -> None:
    sc = Scenario([node("a").gpus(8)], now=100)
    sc.run(qjob("short").gpus(1).limit(300), start=0, on="a")
    sc.run(qjob("long").gpus(1).limit(800), start=0, on="a")
    out = sc.submit(qjob("x").gpus(1).with_(exclusive=True)).cycle()
    # One GPU would free at 300, but the node is idle only at 800.
    assert out.expected_start == {"x": 800}


def test_exclusive_preemption_empties_the_whole_node() -> None:
    sc = Scenario([node("a").gpus(8)], now=100, preemption=True)
    sc.qos = [QoS("normal", preempt=("low",)), QoS("low")]
    sc.run(qjob("v1").gpus(1).qos("low").limit(9000), start=0, on="a")
    sc.run(qjob("v2").gpus(1).qos("low").limit(9000), start=50, on="a")
    out = sc.submit(qjob("x").gpus(1).with_(exclusive=True)).cycle()
    # One GPU is free and six more too, yet both victims must go.
    assert out.preempted == {"v1": "x", "v2": "x"} and out.starts == {"x": ["a"]}


# -- begin time ---------------------------------------------------------------------


def test_begin_time_keeps_the_job_pending_until_then() -> None:
    sc = three().submit(qjob("j").gpus(1).with_(begin_time=500))
    assert sc.cycle().reasons == {"j": "BeginTime"}
    sc.now = 500
    assert sc.cycle().starts == {"j": ["a"]}


def test_a_job_waiting_for_its_begin_time_does_not_block_a_strict_queue() -> None:
    sc = three()
    sc.backfill = "none"
    out = sc.submit(
        qjob("later").gpus(1).submit(1).with_(begin_time=10_000), qjob("now").gpus(1).submit(2)
    ).cycle()
    assert out.reasons == {"later": "BeginTime"} and out.starts == {"now": ["a"]}
