"""The demand autoscaler: when pools grow and shrink, as scenario tables and properties."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.job import Job, Partition
from gpufleet.core.model import GPU, Node, Request
from gpufleet.core.plan import PRIORITY, RESOURCES
from gpufleet.core.pools import NodePool
from gpufleet.policies.autoscale import (
    AutoscaleArgs,
    DemandScaler,
    PoolNode,
    ScaleDecision,
    ScaleView,
    Waiting,
)

NOW = 10_000


def template(gpus: int = 8, model: str = "A100-80GB") -> Node:
    return Node(
        "t", 64_000, 512 * 1024, tuple(GPU(i, model, 80 * 1024) for i in range(gpus))
    )


A100 = NodePool("a100", template(), min_nodes=0, max_nodes=4, boot_s=300, price_gpu_hour=2.0)
CHEAP = NodePool("l4", template(4, "L4"), max_nodes=2, price_gpu_hour=0.5)
BURST = NodePool("burst", template(), max_nodes=2, price_gpu_hour=4.0, partitions=("burst",))
PARTS = {
    "default": Partition("default"),
    "burst": Partition("burst", pools=("burst",)),
    "onprem": Partition("onprem", pools=("onprem",)),
}


def wait(
    jid: str,
    gpus: int = 8,
    *,
    waited: int = 600,
    reason: str = RESOURCES,
    partition: str = "default",
    nodes: int = 1,
    models: tuple[str, ...] = (),
    nodelist: tuple[str, ...] = (),
) -> Waiting:
    request = Request(gpus=gpus, nodes=nodes, gpu_models=frozenset(models))
    job = Job(jid, "u", "a", "normal", partition, request, NOW - waited, 3600, nodelist=nodelist)
    return Waiting(job, NOW - waited, reason)


@dataclass
class Case:
    name: str
    waiting: list[Waiting]
    want: ScaleDecision
    pools: list[NodePool] = field(default_factory=lambda: [A100])
    nodes: list[PoolNode] = field(default_factory=list)
    args: AutoscaleArgs = field(default_factory=lambda: AutoscaleArgs(pending_s=120, idle_s=600))


CASES = [
    # one 8-GPU job waiting 600 s >= 120 s -> one 8-GPU node
    Case("persistent demand grows", [wait("j1")], ScaleDecision({"a100": 1})),
    # waited 60 s < 120 s: nothing yet; ask again at submit + 120 = NOW + 60
    Case("young demand waits", [wait("j1", waited=60)], ScaleDecision(wake=NOW + 60)),
    # three 4-GPU jobs: first fit packs two per 8-GPU node -> 2 nodes
    Case(
        "packs demand onto nodes",
        [wait("a", 4), wait("b", 4), wait("c", 4)],
        ScaleDecision({"a100": 2}),
    ),
    # 6 full-node jobs, but max_nodes 4 -> 4
    Case("bounded by max", [wait(f"j{i}") for i in range(6)], ScaleDecision({"a100": 4})),
    # 3 nodes exist (busy), max 4 -> room for 1
    Case(
        "bounded by max with nodes up",
        [wait("a"), wait("b")],
        ScaleDecision({"a100": 1}),
        nodes=[PoolNode(f"a100-{k}", "a100") for k in (1, 2, 3)],
    ),
    # a booting 8-GPU node covers one waiting 8-GPU job -> nothing more
    Case(
        "booting capacity counts",
        [wait("a")],
        ScaleDecision(),
        nodes=[PoolNode("a100-1", "a100", booting=True)],
    ),
    # an idle node (up, empty) takes the job: no growth, and it is not deleted either
    Case(
        "idle capacity counts",
        [wait("a")],
        ScaleDecision(wake=NOW + 600),
        nodes=[PoolNode("a100-1", "a100", idle_since=NOW)],
    ),
    # a gang of 2 x 8 GPUs needs two distinct nodes
    Case("gang needs distinct nodes", [wait("g", 8, nodes=2)], ScaleDecision({"a100": 2})),
    # 9 GPUs on one node fit no 8-GPU node: no growth for it
    Case("too big for the template", [wait("big", 9)], ScaleDecision()),
    # asks for H100 only: the A100 pool cannot serve it
    Case("model must match", [wait("h", 1, models=("H100-80GB",))], ScaleDecision()),
    # held back by a limit, not by capacity: nodes would not help
    Case("limits are not demand", [wait("q", reason="QOSMaxGRESPerUser")], ScaleDecision()),
    # Priority (behind another waiting job) counts as capacity demand
    Case("priority is demand", [wait("p", reason=PRIORITY)], ScaleDecision({"a100": 1})),
    # a partition whose pools exclude this pool
    Case("partition without the pool", [wait("o", partition="onprem")], ScaleDecision()),
    # a job naming nodes of no pool
    Case("nodelist elsewhere", [wait("n", nodelist=("dgx-01",))], ScaleDecision()),
    # burst pool serves only its partition: a default job grows a100, a burst job grows burst
    Case(
        "burst pool takes only its partition",
        [wait("d"), wait("b", partition="burst")],
        ScaleDecision({"a100": 1, "burst": 1}),
        pools=[A100, BURST],
    ),
    # 2 GPUs fit both pools: the cheaper L4 pool (0.5/GPU-h) grows
    Case("cheapest pool first", [wait("s", 2)], ScaleDecision({"l4": 1}), pools=[A100, CHEAP]),
    # below min_nodes: grow to it without demand
    Case(
        "grows to min",
        [],
        ScaleDecision({"a100": 2}),
        pools=[NodePool("a100", template(), min_nodes=2, max_nodes=4)],
    ),
    # idle since NOW - 700 >= 600 -> deleted; idle since NOW - 100 -> wake at +500
    Case(
        "idle nodes go",
        [],
        ScaleDecision(delete=("a100-1",), wake=NOW + 500),
        nodes=[
            PoolNode("a100-1", "a100", idle_since=NOW - 700),
            PoolNode("a100-2", "a100", idle_since=NOW - 100),
            PoolNode("a100-3", "a100"),
        ],
    ),
    # min 1 and only one node: never below min
    Case(
        "never below min",
        [],
        ScaleDecision(),
        pools=[NodePool("a100", template(), min_nodes=1, max_nodes=4)],
        nodes=[PoolNode("a100-1", "a100", idle_since=0)],
    ),
    # a planned start names it: kept however long idle
    Case(
        "planned nodes stay",
        [],
        ScaleDecision(),
        nodes=[PoolNode("a100-1", "a100", idle_since=0, planned=True)],
    ),
    # max_step 2 caps 4 -> 2 per decision
    Case(
        "max step",
        [wait(f"j{i}") for i in range(4)],
        ScaleDecision({"a100": 2}),
        args=AutoscaleArgs(pending_s=120, max_step=2),
    ),
    # 6 full-node jobs, max_nodes 4 but capped at 2 (a night window, say) -> 2
    Case(
        "a cap below max",
        [wait(f"j{i}") for i in range(6)],
        ScaleDecision({"a100": 2}),
        args=AutoscaleArgs(pending_s=120, max_nodes={"a100": 2}),
    ),
    # 3 nodes up (busy), the cap lowered to 2 meanwhile: no growth, none deleted (busy)
    Case(
        "above a lowered cap",
        [wait("a")],
        ScaleDecision(),
        nodes=[PoolNode(f"a100-{k}", "a100") for k in (1, 2, 3)],
        args=AutoscaleArgs(pending_s=120, max_nodes={"a100": 2}),
    ),
    # cap 0 below min_nodes 1: min wins -> 1 node, demand or not
    Case(
        "a cap never below min",
        [wait("a"), wait("b")],
        ScaleDecision({"a100": 1}),
        pools=[NodePool("a100", template(), min_nodes=1, max_nodes=4)],
        args=AutoscaleArgs(pending_s=120, max_nodes={"a100": 0}),
    ),
    # a cap above the pool's own max changes nothing: 6 jobs -> 4
    Case(
        "a cap above max",
        [wait(f"j{i}") for i in range(6)],
        ScaleDecision({"a100": 4}),
        args=AutoscaleArgs(pending_s=120, max_nodes={"a100": 9}),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_decisions(case: Case) -> None:
    view = ScaleView(NOW, case.pools, case.nodes, case.waiting, PARTS)
    assert DemandScaler(case.args).decide(view) == case.want


pool_nodes = st.lists(
    st.builds(
        PoolNode,
        name=st.sampled_from([f"a100-{k}" for k in range(1, 5)]),
        pool=st.just("a100"),
        booting=st.booleans(),
        idle_since=st.one_of(st.none(), st.integers(0, NOW)),
        planned=st.booleans(),
    ),
    max_size=4,
    unique_by=lambda n: n.name,
)


@settings(max_examples=80, deadline=None)
@given(
    nodes=pool_nodes,
    sizes=st.lists(st.sampled_from([1, 2, 4, 8]), max_size=8),
    low=st.integers(0, 2),
    idle_s=st.integers(0, 2000),
    cap=st.integers(0, 5),
)
def test_bounds_and_safety(
    nodes: list[PoolNode], sizes: list[int], low: int, idle_s: int, cap: int
) -> None:
    """Never past max (nor a cap, unless min_nodes is higher) or below min; never deletes
    a booting, busy or planned node; the same view gives the same decision."""
    pool = NodePool("a100", template(), min_nodes=low, max_nodes=4)
    waiting = [wait(f"j{i}", g) for i, g in enumerate(sizes)]
    view = ScaleView(NOW, [pool], nodes, waiting, PARTS)
    scaler = DemandScaler(AutoscaleArgs(pending_s=0, idle_s=idle_s, max_nodes={"a100": cap}))
    d = scaler.decide(view)
    after = len(nodes) + d.create.get("a100", 0) - len(d.delete)
    assert after <= max(min(pool.max_nodes, max(cap, low)), len(nodes))
    assert after >= min(pool.min_nodes, len(nodes) + d.create.get("a100", 0))
    by_name = {n.name: n for n in nodes}
    for name in d.delete:
        n = by_name[name]
        assert not n.booting and not n.planned and n.idle_since is not None
        assert n.idle_since + idle_s <= NOW
    assert not (d.create and d.delete)  # a pool that grows keeps its idle nodes
    assert scaler.decide(view) == d
