"""MIG re-partitioning: which GPUs the planner re-cuts, to what, and how often.

A scenario table (cluster, what runs, what waits -> the layouts proposed),
then the rules every proposal keeps (hypothesis), then the book carrying
changes out: a busy GPU drains and changes only once its runs are gone.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import NodeBuilder, node
from gpufleet.core import mig
from gpufleet.core.plan import Layout
from gpufleet.policies.migplan import MigArgs, recut_for
from scenario.harness import QueuedJobBuilder, Scenario, qjob

ON = MigArgs(repartition=True, min_interval_s=600, drain=True)
SEVEN_1G = ",".join(["1g.10gb"] * 7)
L7x1G = tuple(("1g.10gb", s) for s in range(7))


def waiting(profile: str, count: int = 1, n: int = 1) -> list[QueuedJobBuilder]:
    return [qjob(f"{profile}-{k}").mig(profile, count) for k in range(n)]


@dataclass
class Case:
    name: str
    nodes: list[NodeBuilder]
    jobs: list[QueuedJobBuilder]
    want: dict[tuple[str, int], Layout]  # (node, GPU) -> proposed layout
    running: list[tuple[QueuedJobBuilder, str]] = field(default_factory=list)
    args: MigArgs = ON


CASES = [
    Case(  # nothing waits: nothing changes, however badly cut
        "quiet", [node("a").gpus(2).mig(SEVEN_1G)], [], {}
    ),
    Case(  # two 7g jobs, two idle GPUs cut 7 x 1g: both become 7g
        "day-to-night",
        [node("a").gpus(2).mig(SEVEN_1G)],
        waiting("7g.80gb", n=2),
        {("a", 0): (("7g.80gb", 0),), ("a", 1): (("7g.80gb", 0),)},
    ),
    Case(  # one 7g job: one GPU (the first) is enough; the other keeps its 1g slices
        "only-what-waits",
        [node("a").gpus(2).mig(SEVEN_1G)],
        waiting("7g.80gb"),
        {("a", 0): (("7g.80gb", 0),)},
    ),
    Case(  # 9 x 1g wait on two GPUs cut 3g + 3g: the first serves 7 as 7 x 1g; the second
        # serves the other 2 with any layout of two 1g, and 7 x 1g keeps the most slices in
        # the asked profile (7, against 3g@0 + 1g x 4's 4)
        "night-to-day",
        [node("a").gpus(2).mig("3g.40gb@0,3g.40gb@4")],
        waiting("1g.10gb", n=9),
        {("a", 0): L7x1G, ("a", 1): L7x1G},
    ),
    Case(  # a 3g and three 1g: one GPU serves all 6 slices as 3g + 1g x 3 (3g@4 + 1g x 4
        # serves the same 6 but keeps a 1g more: 7 slices in asked profiles beat 6)
        "mixed-demand",
        [node("a").gpus(1).mig("7g.80gb")],
        [*waiting("3g.40gb"), *waiting("1g.10gb", n=3)],
        {("a", 0): (*L7x1G[:4], ("3g.40gb", 4))},
    ),
    Case(  # a free instance of the asked profile serves: no change
        "free-instance-serves",
        [node("a").gpus(2).mig("3g.40gb@0,3g.40gb@4", gpu=0).mig(SEVEN_1G, gpu=1)],
        waiting("3g.40gb", n=2),
        {},
    ),
    Case(  # a whole-GPU job and an idle MIG GPU: MIG goes off
        "back-to-whole",
        [node("a").gpus(1).mig(SEVEN_1G)],
        [qjob("w").gpus(1)],
        {("a", 0): None},
    ),
    Case(  # an idle GPU with MIG off is cut for MIG jobs
        "whole-to-mig",
        [node("a").gpus(1)],
        waiting("3g.40gb", n=2),
        {("a", 0): (("3g.40gb", 0), ("3g.40gb", 4))},
    ),
    Case(  # a model without MIG is never cut (nor is a node that is down: see below)
        "no-mig-model",
        [node("v").gpus(2).model("V100M32")],
        waiting("1g.10gb"),
        {},
    ),
    Case(  # GPU 0 runs a 1g job: GPU 1 (idle) comes first, GPU 0 is left to drain only
        # if more is asked than GPU 1 serves; one 7g asks no more
        "idle-before-busy",
        [node("a").gpus(2).mig(SEVEN_1G)],
        waiting("7g.80gb"),
        {("a", 1): (("7g.80gb", 0),)},
        running=[(qjob("r").mig("1g.10gb"), "a")],
    ),
    Case(  # both GPUs busy: the less busy one (1 slice against 2) drains for the 7g
        "drain-least-busy",
        [node("a").mig(SEVEN_1G).gpus(2)],
        waiting("7g.80gb"),
        {("a", 1): (("7g.80gb", 0),)},
        running=[(qjob("r2").mig("1g.10gb", 7), "a"), (qjob("r1").mig("1g.10gb"), "a")],
    ),
    Case(  # 1g jobs wait on a busy GPU cut 1g x 5 + 2g: 7 x 1g would serve 7 slices, its own
        # layout 5 once empty; less than twice as much, not worth draining for
        "no-drain-for-a-small-gain",
        [node("a").mig("1g.10gb,1g.10gb,1g.10gb,1g.10gb,2g.20gb@4,1g.10gb@6").gpus(1)],
        waiting("1g.10gb", n=9),
        {},
        running=[(qjob("r").mig("2g.20gb"), "a")],
    ),
    Case(  # the same GPU while 7g jobs wait: its layout serves none of them, so it drains
        "drain-for-what-it-cannot-serve",
        [node("a").mig("1g.10gb,1g.10gb,1g.10gb,1g.10gb,2g.20gb@4,1g.10gb@6").gpus(1)],
        waiting("7g.80gb"),
        {("a", 0): (("7g.80gb", 0),)},
        running=[(qjob("r").mig("2g.20gb"), "a")],
    ),
    Case(  # without drain, busy GPUs are left alone
        "no-drain",
        [node("a").mig(SEVEN_1G).gpus(2)],
        waiting("7g.80gb"),
        {},
        running=[(qjob("r2").mig("1g.10gb", 7), "a"), (qjob("r1").mig("1g.10gb"), "a")],
        args=MigArgs(repartition=True),  # drain is off by default
    ),
    Case(  # a job held by a limit (here a hold) asks for nothing
        "held-asks-nothing",
        [node("a").gpus(1).mig(SEVEN_1G)],
        [qjob("h").mig("7g.80gb").with_(hold=True)],
        {},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_planner_scenarios(case: Case) -> None:
    sc = Scenario(nodes=case.nodes, now=10_000, repartition=case.args)
    for b, on in case.running:
        sc.run(b.limit(7200), start=9_000, on=on)
    sc.submit(*case.jobs)
    plan = sc.cycle().plan
    names = [n.name for n in sc.state.nodes]
    got = {(names[r.node], r.gpu): r.layout for r in plan.relayouts}
    assert got == case.want
    for r in plan.relayouts:  # every proposal is one the hardware supports
        if r.layout is not None:
            model = sc.state.nodes[r.node].gpus[r.gpu].model
            mig.validate_layout(model, tuple(mig.MigInstance(p, s) for p, s in r.layout))


def test_a_gpu_changed_recently_waits_out_the_interval() -> None:
    sc = Scenario(nodes=[node("a").gpus(1).mig(SEVEN_1G)], now=0, repartition=ON)
    sc.submit(*waiting("7g.80gb"))
    first = sc.step()
    assert [r.layout for r in first.plan.relayouts] == [(("7g.80gb", 0),)]
    assert first.effects is not None and len(first.effects.relayouts) == 1
    sc.book.reconfigured("a", 0)  # type: ignore[union-attr]
    # The 7g job now starts; 1g jobs arrive, but the GPU changed 100 s ago (< 600).
    assert sc.step(at=100).starts == {"7g.80gb-0": ["a"]}
    sc.book.finish("7g.80gb-0", 200)  # type: ignore[union-attr]
    sc.submit(*waiting("1g.10gb", n=3))
    assert sc.step(at=300).plan.relayouts == []
    assert [r.layout for r in sc.step(at=600).plan.relayouts] == [L7x1G]


def test_a_node_that_is_down_is_not_cut() -> None:
    sc = Scenario(nodes=[node("a").gpus(1).mig(SEVEN_1G)], now=0, repartition=ON)
    sc.submit(*waiting("7g.80gb"))
    sc._book().node_down("a", 0)
    assert sc.cycle().plan.relayouts == []


def test_recut_for_cuts_every_gpu_of_a_model_that_offers_the_profile() -> None:
    nodes = [node("a").gpus(2).mig(SEVEN_1G).build(), node("v").gpus(1).model("V100M32").build()]
    cut = recut_for(nodes, "3g.40gb")
    assert [g.mig for g in cut[0].gpus] == [(("3g.40gb", 0), ("3g.40gb", 4))] * 2
    assert cut[1] == nodes[1]


LAYOUT_TEXT = [
    "",
    SEVEN_1G,
    "3g.40gb@0,3g.40gb@4",
    "4g.40gb,2g.20gb,1g.10gb",
    "7g.80gb",
    "2g.20gb,2g.20gb,3g.40gb@4",
    "1g.20gb,1g.20gb,1g.20gb,1g.20gb",
]
PROFILES = ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


@st.composite
def scenes(draw: st.DrawFn) -> Scenario:
    """One or two nodes of 2 GPUs, each whole or cut; MIG and whole jobs running and waiting."""
    nodes = []
    for n in range(draw(st.integers(1, 2))):
        b = node(f"n{n}").gpus(2).model(draw(st.sampled_from(["A100-80GB", "H100-80GB"])))
        for g in range(2):
            text = draw(st.sampled_from(LAYOUT_TEXT))
            if text:
                b = b.mig(text, gpu=g)
        nodes.append(b)
    sc = Scenario(nodes=nodes, now=draw(st.integers(0, 5000)), repartition=ON)
    k = 0
    for b in nodes:
        for _ in range(draw(st.integers(0, 3))):
            r = qjob(f"r{k}").limit(draw(st.integers(60, 7200)))
            r = r.mig(draw(st.sampled_from(PROFILES))) if draw(st.booleans()) else r.gpus(1)
            k += 1
            with contextlib.suppress(AssertionError):  # it does not fit: the scene runs less
                sc.run(r, start=0, on=b.build().name)
    for j in range(draw(st.integers(0, 6))):
        w = qjob(f"w{j}")
        if draw(st.booleans()):
            w = w.mig(draw(st.sampled_from(PROFILES)), draw(st.integers(1, 3)))
        else:
            w = w.gpus(1)
        sc.submit(w)
    return sc


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_every_proposal_is_supported_and_no_gpu_is_cut_under_a_run(sc: Scenario) -> None:
    book = sc._book()
    before = {(n.name, g.index): g.mig for n in book.state.nodes for g in n.gpus}

    def busy() -> set[tuple[str, int]]:
        st = book.state
        return {
            (st.nodes[a.node].name, g)
            for r in book.running.values()
            for a in r.assignments
            for g in (*a.gpus, *st.mig_gpu[list(a.mig)].tolist())
        }

    busy_before = busy()
    out = sc.step()
    used = busy_before | busy()  # what ran, and what the plan started
    for r in out.plan.relayouts:
        gpu = book.state.nodes[r.node].gpus[r.gpu]
        assert gpu.model in mig.PROFILES
        if r.layout is not None:
            mig.validate_layout(gpu.model, tuple(mig.MigInstance(p, s) for p, s in r.layout))
    after = {(n.name, g.index): g.mig for n in book.state.nodes for g in n.gpus}
    for key in used:  # a GPU with work keeps its layout; it may only drain
        assert after[key] == before[key]
    assert out.effects is not None
    for change in out.effects.relayouts:
        assert (change.node, change.gpu) not in used
        assert after[change.node, change.gpu] == ()  # out of work until reconfigured
    for r in book.running.values():  # every run still holds live instances
        for a in r.assignments:
            assert all(book.state.mig_profile[m] >= 0 for m in a.mig)
