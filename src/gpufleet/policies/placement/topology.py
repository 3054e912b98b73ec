"""Topology-aware placement: keep a job's GPUs on one NVLink domain and its gang under one switch.

Two plugins share one notion of locality, from nearest to farthest:

* the GPUs of one NVLink domain (an NVSwitch board, or a bridged pair);
* the GPUs of one NUMA node (same PCIe root complex and host memory);
* the nodes under one network switch (``Node.switch``), for gangs.

``TopologyPicker`` chooses which free GPUs on a node a whole-GPU request gets;
``Topology`` scores nodes so the placer sends the request where the picker
can do well. Both prefer the *smallest* group that fits, best-fit style, so
large free domains and switch groups stay whole for the large jobs that need them.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numba import njit

from gpufleet.core.placement import FloatArray, PlacementContext
from gpufleet.core.state import BoolArray, ClusterState, IntArray

# Score tiers for the GPU locality of one node. A penalty below 40 per tier
# keeps the tiers disjoint: one domain in (60, 100], one NUMA node in
# (10, 50], spread over domains in (-40, 0].
DOMAIN = 100.0
NUMA = 50.0
SPREAD = 0.0
PENALTY = 40.0
# Gap between switch ranks: wider than the GPU tiers' whole range (140), so
# keeping a gang under one switch outranks any GPU locality on the node.
SWITCH_STEP = 150.0


def dense_rank(values: IntArray) -> IntArray:
    """Per row, the rank of each value among the row's distinct values (0, 1, ...).

    Arbitrary ids (NVLink domain or NUMA numbers) become column indices of
    at most the row's length, so per-group counts are one small sum per node.
    """
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    new = np.zeros(values.shape, dtype=np.int64)
    new[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    rank = np.empty_like(new)
    np.put_along_axis(rank, order, np.cumsum(new, axis=1), axis=1)
    return rank


def cover(groups: IntArray, count: int) -> IntArray:
    """Positions of ``count`` items drawn from the fewest groups, ascending.

    ``groups`` labels each item. The largest groups are taken whole until
    one more group can finish the request; that last group is the smallest
    that can, so a request one group can hold takes the smallest such group
    and leaves bigger ones intact. Ties go to the group whose first item comes
    first, and within a group to its first items.
    """
    if count > len(groups):
        raise ValueError(f"count: asked for {count} GPUs but only {len(groups)} are free")
    labels, first, sizes = np.unique(groups, return_index=True, return_counts=True)
    by_size = np.lexsort((first, -sizes))  # largest first, ties to the earliest
    # The fewest groups: k such that the k-1 largest fall short and k suffice.
    k = int(np.searchsorted(np.cumsum(sizes[by_size]), count)) + 1
    whole = by_size[: k - 1]
    rest = count - int(sizes[whole].sum())
    spare = np.ones(len(labels), dtype=np.bool_)
    spare[whole] = False
    spare &= sizes >= rest
    last = int(np.lexsort((first, sizes, ~spare))[0])  # smallest spare that fits
    chosen = np.isin(groups, labels[whole])
    chosen[np.flatnonzero(groups == labels[last])[:rest]] = True
    return np.flatnonzero(chosen)


class TopologyPicker:
    """Whole GPUs from one NVLink domain, else one NUMA node, else the fewest domains.

    Among domains that can hold the request it takes the one with the fewest
    free GPUs, so a one-GPU task fills a half-used pair before it breaks a
    free NVSwitch board. Failing a domain it takes the NUMA node with the
    fewest free GPUs that still fits, and inside it the fewest domains.
    Deterministic: ties go to the lowest GPU indices.
    """

    def pick(self, state: ClusterState, node: int, free: IntArray, count: int) -> IntArray:
        domain = state.gpu_nvlink[node, free]
        if count <= len(free) and (len(domain) == 0 or domain.min() == domain.max()):
            # One domain holds every free GPU: ``cover`` would take the first
            # ``count``; skip its sorting, which a fill pays for on every task.
            return free[:count]
        if count <= int(np.unique(domain, return_counts=True)[1].max(initial=0)):
            return free[cover(domain, count)]
        numa = state.gpu_numa[node, free]
        ids, sizes = np.unique(numa, return_counts=True)
        fits = sizes >= count
        if fits.any():
            # The smallest fitting NUMA node; np.unique sorts ids, so argmin's
            # first hit is the lowest id among equals.
            best = ids[np.flatnonzero(fits)[np.argmin(sizes[fits])]]
            inside = np.flatnonzero(numa == best)
            return free[inside[cover(domain[inside], count)]]
        return free[cover(domain, count)]


class _Layout:
    """Per-state topology facts that change only with the state's shape: group ranks
    per GPU, switch per node."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.epoch = state.epoch
        self.domain = dense_rank(state.gpu_nvlink)
        self.numa = dense_rank(state.gpu_numa)
        names = sorted({n.switch for n in state.nodes})
        index = {name: i for i, name in enumerate(names)}
        self.switch = np.array([index[n.switch] for n in state.nodes], dtype=np.int64)
        self.num_switches = len(names)


@njit(cache=True, nogil=True)
def _locality(
    free: BoolArray, domain: IntArray, numa: IntArray, nodes: IntArray, need: int
) -> FloatArray:
    """GPU locality score of each option node (see ``Topology``); one pass per node.

    ``domain`` and ``numa`` hold dense group ranks, so a node's groups index a
    scratch array as long as its row of GPUs.
    """
    g = free.shape[1]
    out = np.empty(nodes.shape[0], dtype=np.float64)
    in_domain = np.zeros(g, dtype=np.int64)
    in_numa = np.zeros(g, dtype=np.int64)
    for k in range(nodes.shape[0]):
        i = nodes[k]
        in_domain[:] = 0
        in_numa[:] = 0
        for j in range(g):
            if free[i, j]:
                in_domain[domain[i, j]] += 1
                in_numa[numa[i, j]] += 1
        # The smallest group that fits, as the picker would take it.
        best_domain = g + 1
        best_numa = g + 1
        for c in range(g):
            if need <= in_domain[c] < best_domain:
                best_domain = in_domain[c]
            if need <= in_numa[c] < best_numa:
                best_numa = in_numa[c]
        if best_domain <= g:
            out[k] = DOMAIN - PENALTY * (best_domain - need) / g
        elif best_numa <= g:
            out[k] = NUMA - PENALTY * (best_numa - need) / g
        else:
            # Fewest domains to span: the largest first until they hold the request.
            ordered = np.sort(in_domain)[::-1]
            spans, held = 0, 0
            while held < need and spans < g:
                held += ordered[spans]
                spans += 1
            out[k] = SPREAD - PENALTY * (spans - 1) / g
    return out


class Topology:
    """How local a whole-GPU request stays on each node, and a gang under one switch.

    GPU locality, for requests of whole GPUs: 100 when one NVLink domain can
    hold the request, 50 when one NUMA node can, 0 otherwise; minus up to 40
    for the free GPUs the picker would leave in the group it breaks
    (``40 * left / GPUs per node``), or in the last tier for each extra
    domain spanned. One-GPU requests thus best-fit onto half-used domains.
    Fractional, MIG and CPU-only requests score 0 here.

    Gangs (``request.nodes`` > 1) rank switches first, ``SWITCH_STEP`` apart:
    later members prefer switches holding more of the gang's earlier members;
    the first member prefers switches with at least ``request.nodes``
    feasible nodes, the fewest such first (switch best-fit), then switches
    with more feasible nodes. Nodes with no ``switch`` share the group "".

    Per-state facts are worked out once and kept while the state is the same
    object and keeps its shape (``ClusterState.epoch``); GPU locality is one
    compiled pass over the option nodes, since a dozen numpy passes per
    request cost more than the scoring itself.
    """

    NAME: ClassVar[str] = "topology"

    def __init__(self) -> None:
        self._layout: _Layout | None = None

    def layout(self, state: ClusterState) -> _Layout:
        lay = self._layout
        if lay is None or lay.state is not state or lay.epoch != state.epoch:
            lay = self._layout = _Layout(state)
        return lay

    def score(self, ctx: PlacementContext) -> FloatArray:
        lay = self.layout(ctx.state)
        scores = np.zeros(len(ctx.options), dtype=np.float64)
        if ctx.request.gpus:
            free = ctx.eligible_gpus
            scores += _locality(free, lay.domain, lay.numa, ctx.options.node, ctx.request.gpus)
        if ctx.request.nodes > 1:
            scores -= SWITCH_STEP * self._switch_rank(ctx, lay)
        return scores

    @staticmethod
    def _switch_rank(ctx: PlacementContext, lay: _Layout) -> IntArray:
        """Dense rank (0 best) of each option's switch; equal keys share a rank."""
        switch = lay.switch[ctx.options.node]
        if ctx.gang_nodes:
            members = np.bincount(lay.switch[list(ctx.gang_nodes)], minlength=lay.num_switches)
            key = -members[switch]
        else:
            need = ctx.request.nodes
            room = np.bincount(lay.switch[ctx.feasible], minlength=lay.num_switches)[switch]
            # Fitting switches by size, ascending, then the rest by room, descending.
            key = np.where(room >= need, room, ctx.state.num_nodes + need - room)
        return np.unique(key, return_inverse=True)[1].reshape(-1)


class TopologyTier:
    """Topology as a tier (``core.placement.Tier``): only the options with the best
    locality class go on to the scorers.

    Classes, best first: a gang's member under the switch that can hold the whole
    gang (the first member: any switch with enough feasible nodes; later ones:
    the switch holding most earlier members), then a multi-GPU request in one
    NVLink domain, in one NUMA node, or spread. Within a class the scorers
    choose freely, so ``default`` keeps packing by fragmentation and pays for
    locality only where it is to be had. One-GPU, fractional, MIG and CPU-only
    requests of one node cost nothing here.
    """

    NAME: ClassVar[str] = "topology-tier"

    def __init__(self) -> None:
        self._topology = Topology()

    def cost(self, ctx: PlacementContext) -> FloatArray:
        r = ctx.request
        cost = np.zeros(len(ctx.options), dtype=np.float64)
        if r.gpus < 2 and r.nodes < 2:
            return cost
        lay = self._topology.layout(ctx.state)
        if r.gpus > 1:
            score = _locality(ctx.eligible_gpus, lay.domain, lay.numa, ctx.options.node, r.gpus)
            cost += (score <= DOMAIN - PENALTY).astype(np.float64)
            cost += score <= NUMA - PENALTY
        if r.nodes > 1:
            switch = lay.switch[ctx.options.node]
            if ctx.gang_nodes:
                members = np.bincount(lay.switch[list(ctx.gang_nodes)], minlength=lay.num_switches)
                cost -= 10.0 * members[switch]
            else:
                room = np.bincount(lay.switch[ctx.feasible], minlength=lay.num_switches)
                cost += 10.0 * (room[switch] < r.nodes)
        return cost
