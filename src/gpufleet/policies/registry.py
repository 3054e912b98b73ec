"""Named placement profiles: what ``--policy NAME`` means."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpufleet.core.model import Request
from gpufleet.core.placement import PlacementProfile
from gpufleet.policies.placement.fgd import FragmentationArgs, FragmentationGradient
from gpufleet.policies.placement.fit import (
    Allocation,
    AllocationArgs,
    BestFit,
    DotProduct,
    FirstFit,
    Random,
    RandomArgs,
)
from gpufleet.policies.placement.share import SharePacking
from gpufleet.policies.placement.slurm import ConsTres
from gpufleet.policies.placement.topology import Topology, TopologyPicker, TopologyTier

Builder = Callable[[Sequence[Request], int], PlacementProfile]


DEFAULT_FRAGMENTATION = FragmentationArgs(
    memory=True,
    fit_weight=1.0,
    capacity_weight=1.0,
    scarcity_weight=10.0,
    stranding_weight=3.0,
    last_place_weight=1.0,
    resolution="exact",
)


def _default(workload: Sequence[Request], seed: int) -> PlacementProfile:
    """A fractional task goes only where an optimal packing of the workload's shares
    would put it; among those places, FGD generalised (host memory counts, the
    capacity measure joins the paper's, node pressure, places taken from types short
    of them and stranded GPUs cost)
    picks the node among those with the best locality to be had (a gang under
    one switch, a multi-GPU task in one NVLink domain or NUMA node); on it, the
    task gets GPUs that share an NVLink domain or NUMA node."""
    return PlacementProfile(
        "default",
        scorers=[(FragmentationGradient(workload, DEFAULT_FRAGMENTATION), 1.0)],
        picker=TopologyPicker(),
        tiers=[SharePacking(workload), TopologyTier()],
    )


PLACEMENT: dict[str, Builder] = {
    "first-fit": lambda w, s: PlacementProfile("first-fit", [(FirstFit(), 1.0)]),
    "best-fit": lambda w, s: PlacementProfile("best-fit", [(BestFit(), 1.0)]),
    "cons-tres": lambda w, s: PlacementProfile("cons-tres", [(ConsTres(), 1.0)]),
    "packing": lambda w, s: PlacementProfile(
        "packing", [(Allocation(AllocationArgs(strategy="most")), 1.0)]
    ),
    "spread": lambda w, s: PlacementProfile(
        "spread", [(Allocation(AllocationArgs(strategy="least")), 1.0)]
    ),
    "dot-product": lambda w, s: PlacementProfile("dot-product", [(DotProduct(), 1.0)]),
    "random": lambda w, s: PlacementProfile("random", [(Random(RandomArgs(seed=s)), 1.0)]),
    "fgd": lambda w, s: PlacementProfile("fgd", [(FragmentationGradient(w), 1.0)]),
    "topology": lambda w, s: PlacementProfile(
        "topology", [(Topology(), 1.0), (BestFit(), 0.01)], picker=TopologyPicker()
    ),
    "default": _default,
}


class UnknownPolicy(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown placement policy {name!r} (known: {', '.join(PLACEMENT)})")


def placement_profile(
    name: str, *, workload: Sequence[Request] = (), seed: int = 0
) -> PlacementProfile:
    """Build the named profile; ``workload`` (typical requests) feeds the fgd scorer
    and the share-packing tier, which fall back to ``core.workload.TYPICAL`` while it
    is empty (a live cluster before its first submission)."""
    try:
        builder = PLACEMENT[name]
    except KeyError:
        raise UnknownPolicy(name) from None
    return builder(workload, seed)
