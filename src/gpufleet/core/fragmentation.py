"""GPU fragmentation measured against a workload, after FGD (Weng et al., USENIX ATC'23).

A node's free GPU capacity is a *fragment* for a task type when that type
could not use it:

* if the type cannot run on the node at all (GPU model not allowed, too few
  free CPUs, or too few GPUs with enough free milli-GPU), every free milli-GPU
  on the node is a fragment for it;
* otherwise only the free milli-GPU on GPUs that could not take one of its
  per-GPU shares is a fragment.

The node's fragmentation is the expectation over the workload's task types,
weighted by how often each type occurs. A CPU-only type can use no GPU, so
all of a node's free GPU capacity is a fragment for it: a constant share that
matches the paper's definition (an idle openb cluster is 13.9% fragmented).
GPUs stranded by exhausted CPU show up through the GPU types' CPU needs.

A second, *capacity* measure asks, for each share type (a fraction of one
GPU), what it could use if its tasks kept arriving: ``k`` tasks fit where
``k`` is bounded together by the GPU slots (free milli-GPU // share, summed
over GPUs), the free CPU and the free memory, and whatever those ``k`` tasks
would not take is a fragment. The paper's measure asks only whether one more
task fits, so it misses that eight free GPUs with CPU left for one share are
mostly stranded, and that 600 free milli-GPU holds one 470 but two 300s.
Whole-GPU types are left to the stranding measure below: counted by both,
CPU-heavy whole-GPU work was steered onto the few nodes big enough for the
largest tasks, and on workloads without shares or short of CPU that cost
more than it won. A profile may blend the paper's measure and this one.

Both measures ask about one node and the types one at a time. A third,
*stranding*, looks at the balance between a node's resources: half of the
workload's GPU demand brings at most ``cpu_per_milli`` milli-CPU and
``memory_per_milli`` MiB per milli-GPU it asks for (the medians), so a node
can expect to use only as much of its free GPU capacity as its free CPU and
memory can carry at those ratios. The rest is stranded (``stranded``). Where the
workload would exhaust CPU before GPUs (``runs_out_first``), CPU-only
tasks draw on that CPU too, and the ratios are taken over every task
(``competing``).

The hot loops are compiled with numba: a fill run evaluates millions of
hypothetical node states, and that is the cost of fragmentation-aware
placement. Nodes in the same state (model, free CPU and memory, the multiset
of free milli-GPU) have the same fragmentation, so a node state and request
are evaluated once and remembered: within one placement, options in equal
states share the work, and across placements the nodes the last placement
left untouched are not evaluated again for the same kind of request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from numba import njit

from gpufleet.core.job import gpu_milli_equivalent
from gpufleet.core.model import MILLI, Request
from gpufleet.core.state import BoolArray, ClusterState, IntArray

FloatArray = npt.NDArray[np.float64]
WorkloadArrays = tuple[
    IntArray, IntArray, IntArray, FloatArray, BoolArray, IntArray, IntArray, float, float
]


@dataclass(frozen=True)
class Workload:
    """The distribution of task types that fragmentation is measured against.

    Arrays are aligned by type; ``model_ok[t, m]`` says whether type t may use
    the state's GPU model m. ``threshold`` lists the distinct per-GPU milli
    values and ``level[t]`` indexes it, so per-node counts are computed once
    per threshold rather than once per type.
    """

    cpu: IntArray
    memory: IntArray
    gpus: IntArray
    milli: IntArray
    freq: FloatArray
    model_ok: BoolArray
    threshold: IntArray
    level: IntArray
    fit_weight: float = 1.0
    capacity_weight: float = 0.0
    cpu_per_milli: float = 0.0
    memory_per_milli: float = 0.0

    def arrays(self) -> WorkloadArrays:
        """The fields the compiled kernels read, in their order."""
        return (
            self.cpu,
            self.memory,
            self.gpus,
            self.freq,
            self.model_ok,
            self.threshold,
            self.level,
            self.fit_weight,
            self.capacity_weight,
        )

    @classmethod
    def from_requests(
        cls,
        requests: Iterable[Request],
        models: Sequence[str],
        *,
        memory: bool = False,
        fit_weight: float = 1.0,
        capacity_weight: float = 0.0,
        popularity: float = 1.0,
    ) -> Workload:
        """Type frequencies of ``requests``; MIG requests are left out.

        With ``memory`` a type also needs its host memory to fit, so GPUs
        stranded by exhausted memory count as fragments too. The published
        FGD measure looks at CPU and GPU only, and that stays the default.
        The node's fragmentation is ``fit_weight`` times the paper's measure
        plus ``capacity_weight`` times the capacity measure (module docstring).
        """
        if fit_weight < 0 or capacity_weight < 0 or fit_weight + capacity_weight <= 0:
            raise ValueError("fragmentation weights must be >= 0 and not both zero")
        counts = Counter(
            (r.cpu_milli, r.gpu_count, r.milli_per_gpu, r.gpu_models, r.memory_mib if memory else 0)
            for r in requests
            if not r.mig_profile
        )
        if not counts:
            raise ValueError("a workload needs at least one non-MIG request")
        if not 0 < popularity <= 1:
            raise ValueError(f"popularity must be in (0, 1], got {popularity}")
        # Keep the most popular types until they cover ``popularity`` of all
        # tasks; rare shapes would otherwise steer placement as much as their
        # weight says but cost as much to evaluate as common ones.
        ranked = sorted(counts, key=lambda k: (-counts[k], k[2], k[1], k[0], sorted(k[3]), k[4]))
        need = popularity * sum(counts.values())
        kept, covered = [], 0
        for k in ranked:
            if covered >= need:
                break
            kept.append(k)
            covered += counts[k]
        keys = sorted(kept, key=lambda k: (k[2], k[1], k[0], sorted(k[3]), k[4]))
        total = covered
        gpu_keys = [k for k in keys if k[1]]
        threshold = np.array(sorted({k[2] for k in keys}), dtype=np.int64)
        ok = np.array(
            [[not k[3] or m in k[3] for m in models] or [True] for k in keys], dtype=np.bool_
        )
        return cls(
            cpu=np.array([k[0] for k in keys], dtype=np.int64),
            memory=np.array([k[4] for k in keys], dtype=np.int64),
            gpus=np.array([k[1] for k in keys], dtype=np.int64),
            milli=np.array([k[2] for k in keys], dtype=np.int64),
            freq=np.array([counts[k] / total for k in keys], dtype=np.float64),
            model_ok=ok.reshape(len(keys), max(1, len(models))),
            threshold=threshold,
            level=np.searchsorted(threshold, [k[2] for k in keys]).astype(np.int64),
            fit_weight=fit_weight,
            capacity_weight=capacity_weight,
            cpu_per_milli=_median_ratio([(k[0], k[1] * k[2], counts[k]) for k in gpu_keys]),
            memory_per_milli=_median_ratio([(k[4], k[1] * k[2], counts[k]) for k in gpu_keys]),
        )


def _median_ratio(types: list[tuple[int, int, int]]) -> float:
    """The median of ``amount / milli`` over the milli-GPU that ``(amount, milli, count)``
    types ask for: half of the GPU demand asks for that much per milli-GPU or less.

    Not the mean: a few heavy tasks (openb's 8-GPU pods with 120 CPUs) pull the mean
    above what most GPU work asks, and at the mean a node whose own ratio lies between
    the two looks stranding although most tasks fill it."""
    if not types:
        return 0.0
    ratios = np.array([amount / milli for amount, milli, _ in types])
    weight = np.array([milli * count for _, milli, count in types], dtype=np.float64)
    order = np.argsort(ratios, kind="stable")
    cumulative = np.cumsum(weight[order])
    return float(ratios[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


GPU, CPU, MEMORY = 0, 1, 2


def runs_out_first(workload: Workload, state: ClusterState) -> int:
    """Which resource (``GPU``, ``CPU`` or ``MEMORY``) the workload's mix would exhaust
    first in the whole cluster: the one whose capacity over what the average task asks
    lasts the fewest tasks (GPU on a tie)."""
    live = ~state.removed
    supply = np.array(
        [a[live].sum() for a in (state.gpu_milli_total, state.cpu_total, state.mem_total)],
        dtype=np.float64,
    )
    asks = np.stack([workload.gpus * workload.milli, workload.cpu, workload.memory])
    mean = asks.astype(np.float64) @ workload.freq
    if not mean[GPU] > 0:
        return GPU
    horizon = np.divide(supply, mean, out=np.full(3, np.inf), where=mean > 0)
    first = int(np.argmin(horizon))
    return first if horizon[first] < horizon[GPU] else GPU


def competing(workload: Workload) -> Workload:
    """``workload`` with its stranding ratios taken over every task, CPU-only ones too:
    the CPU and memory that all of its tasks ask per milli-GPU. Where CPU runs out
    first, CPU-only tasks draw on the CPU beside free GPUs as GPU tasks do, so that
    CPU carries less GPU than the GPU tasks' own ratio says. These are means, not
    medians: when CPU runs short, what matters is all the CPU the tasks ask together."""
    gpu = float(workload.freq @ (workload.gpus * workload.milli))
    return replace(
        workload,
        cpu_per_milli=float(workload.freq @ workload.cpu) / gpu if gpu > 0 else 0.0,
        memory_per_milli=float(workload.freq @ workload.memory) / gpu if gpu > 0 else 0.0,
    )


def stranded(
    gpu_free: IntArray, cpu_free: IntArray, memory_free: IntArray, workload: Workload
) -> FloatArray:
    """Free milli-GPU that the free CPU and memory beside it cannot carry.

    At the workload's ratios, ``cpu_free`` milli-CPU carries
    ``cpu_free / cpu_per_milli`` milli-GPU of tasks, and likewise for memory;
    whatever GPU capacity exceeds the smaller of the two is stranded. A ratio
    of zero (a workload that does not ask for the resource) strands nothing.
    """
    carried = np.full(len(gpu_free), np.inf)
    ratios = ((cpu_free, workload.cpu_per_milli), (memory_free, workload.memory_per_milli))
    for free, ratio in ratios:
        if ratio > 0:
            carried = np.minimum(carried, np.maximum(free, 0) / ratio)
    out: FloatArray = np.maximum(gpu_free - carried, 0.0)
    return out


_MIX = np.uint64(0x9E3779B97F4A7C15)
# Slots of the memo of evaluated node states (a power of two): 4 MiB of keys
# and values, enough that a fill run rarely evicts a state it will ask again.
MEMO_SLOTS = 1 << 18


def node_pressure(workload: Workload, state: ClusterState, model: IntArray) -> FloatArray:
    """Demand over supply of each resource (GPU, CPU, memory) at each node, relative to
    the whole cluster's: an array of shape (nodes, 3).

    A type can go only where an idle node would hold it: a GPU model it may
    use (``model[i]``, the node's), enough CPU, host memory and GPUs. Each
    type's demand for a resource (frequency x what it asks) is spread over
    that resource on those nodes, so the few nodes that large or constrained
    types depend on carry more than the cluster's mean. Model pressure is the
    case where GPU models alone narrow the nodes. A resource nobody asks for,
    and every resource where every type fits everywhere, scores 1.
    """
    total = state.gpu_milli_total
    supply = (
        np.stack([total.sum(axis=1), state.cpu_total, state.mem_total], axis=1).astype(np.float64)
        * ~state.removed[:, None]
    )
    demand = np.stack(
        [workload.freq * workload.gpus * workload.milli,
         workload.freq * workload.cpu, workload.freq * workload.memory], axis=1
    )  # fmt: skip
    count = np.stack([(total >= th).sum(axis=1) for th in workload.threshold])
    gpu_ok = workload.model_ok[:, np.maximum(model, 0)] & (model >= 0)[None, :]
    fits = (
        (gpu_ok | (workload.gpus == 0)[:, None])
        & (state.cpu_total[None, :] >= workload.cpu[:, None])
        & (state.mem_total[None, :] >= workload.memory[:, None])
        & (count[workload.level] >= workload.gpus[:, None])
        & ~state.removed[None, :]
    ).astype(np.float64)
    reach = fits @ supply  # (types, resources)
    share = np.divide(demand, reach, out=np.zeros_like(demand), where=reach > 0)
    pressure = fits.T @ share  # (nodes, resources)
    placed = np.where(reach > 0, demand, 0.0).sum(axis=0)
    mean = placed / np.maximum(supply.sum(axis=0), 1.0)
    relative: FloatArray = np.where(mean > 0, pressure / np.where(mean > 0, mean, 1.0), 1.0)
    return relative


@njit(cache=True, nogil=True)
def _mix(h: np.uint64, v: int) -> np.uint64:
    """Fold ``v`` into hash ``h`` (splitmix64 finaliser)."""
    x = (h ^ np.uint64(v & 0xFFFFFFFFFFFF)) * _MIX
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    return x ^ (x >> np.uint64(29))


@njit(cache=True, nogil=True)
def _frag(
    free: IntArray,
    cpu: int,
    mem: int,
    model: int,
    w: WorkloadArrays,
    count: IntArray,
    below: IntArray,
    slots: IntArray,
) -> float:
    """Expected fragment milli-GPU of one node state (count, below, slots: scratch space)."""
    w_cpu, w_mem, w_gpus, w_freq, w_ok, w_threshold, w_level, fit_w, cap_w = w
    total = 0
    for g in range(free.shape[0]):
        total += free[g]
    if total == 0:
        return 0.0
    for j in range(w_threshold.shape[0]):
        c = 0
        b = 0
        n = 0
        th = w_threshold[j]
        # Capacity slots are counted for share types only (module docstring).
        share = cap_w > 0.0 and th < MILLI
        if th > 0:
            for g in range(free.shape[0]):
                if free[g] >= th:
                    c += 1
                    if share:
                        n += free[g] // th
                else:
                    b += free[g]
        count[j] = c
        below[j] = b
        slots[j] = n
    frag = 0.0
    for t in range(w_cpu.shape[0]):
        j = w_level[t]
        usable = w_gpus[t] > 0 and (model < 0 or w_ok[t, model])
        if fit_w > 0.0:
            if usable and cpu >= w_cpu[t] and mem >= w_mem[t] and count[j] >= w_gpus[t]:
                frag += fit_w * w_freq[t] * below[j]
            else:
                frag += fit_w * w_freq[t] * total
        if cap_w > 0.0 and w_threshold[j] < MILLI:
            k = slots[j] // w_gpus[t] if usable else 0
            if w_cpu[t] > 0:
                k = min(k, max(cpu, 0) // w_cpu[t])
            if w_mem[t] > 0:
                k = min(k, max(mem, 0) // w_mem[t])
            frag += cap_w * w_freq[t] * (total - k * w_gpus[t] * w_threshold[j])
    return frag


@njit(cache=True, nogil=True)
def _state_hash(free: IntArray, cpu: int, mem: int, model: int) -> np.uint64:
    """A 64-bit digest of what fragmentation depends on: the GPUs' free milli as a multiset."""
    row = np.sort(free)
    h = _mix(_mix(_mix(np.uint64(0), model), cpu), mem)
    for g in range(row.shape[0]):
        h = _mix(h, row[g])
    return h


@njit(cache=True, nogil=True)
def _node_frag(
    free: IntArray,
    cpu: IntArray,
    mem: IntArray,
    model: IntArray,
    nodes: IntArray,
    out: FloatArray,
    digest: npt.NDArray[np.uint64],
    w: WorkloadArrays,
) -> None:
    j = w[5].shape[0]
    count = np.empty(j, dtype=np.int64)
    below = np.empty(j, dtype=np.int64)
    slots = np.empty(j, dtype=np.int64)
    for i in nodes:
        out[i] = _frag(free[i], cpu[i], mem[i], model[i], w, count, below, slots)
        digest[i] = _state_hash(free[i], cpu[i], mem[i], model[i])


@njit(cache=True, nogil=True)
def _take(free: IntArray, gpu: int, gpus: int, milli: int, row: IntArray) -> None:
    """``row``: the node's free milli-GPU once a request takes ``milli`` from GPU ``gpu``
    (a fraction) or from each of ``gpus`` GPUs with that much free (which ones does
    not change any measure here)."""
    left = gpus
    for g in range(free.shape[0]):
        row[g] = free[g]
        if g == gpu:
            row[g] -= milli
        elif gpu < 0 and left > 0 and row[g] >= milli:
            row[g] -= milli
            left -= 1


@njit(cache=True, nogil=True)
def _frag_after(
    free: IntArray,
    cpu: IntArray,
    mem: IntArray,
    model: IntArray,
    digest: npt.NDArray[np.uint64],
    opt_node: IntArray,
    opt_gpu: IntArray,
    req_cpu: int,
    req_mem: int,
    req_gpus: int,
    req_milli: int,
    w: WorkloadArrays,
    memo_key: npt.NDArray[np.uint64],
    memo_value: FloatArray,
) -> FloatArray:
    """Fragmentation of each option's node after the request is placed there.

    A fractional option takes ``req_milli`` from GPU ``opt_gpu``; a whole-GPU
    option takes ``req_gpus`` GPUs that are entirely free (which ones does not
    change the node's fragmentation). The result depends only on the node's
    state, the chosen GPU's free milli and the request, so it is memoised
    under their digest in ``memo_key``/``memo_value`` (a direct-mapped table
    whose slots later digests overwrite): options in the same state are one
    evaluation, and so are the many nodes a placement leaves untouched when
    the same kind of request comes again.
    """
    k_opts = opt_node.shape[0]
    out = np.empty(k_opts, dtype=np.float64)
    req = _mix(_mix(_mix(np.uint64(req_cpu), req_mem), req_gpus), req_milli)
    mask = np.uint64(memo_key.shape[0] - 1)
    j = w[5].shape[0]
    count = np.empty(j, dtype=np.int64)
    below = np.empty(j, dtype=np.int64)
    slots = np.empty(j, dtype=np.int64)
    row = np.empty(free.shape[1], dtype=np.int64)
    for k in range(k_opts):
        i = opt_node[k]
        chosen = free[i, opt_gpu[k]] if opt_gpu[k] >= 0 else -1
        key = (_mix(digest[i], chosen) ^ req) | np.uint64(1)
        slot = key & mask
        if memo_key[slot] == key:
            out[k] = memo_value[slot]
            continue
        _take(free[i], opt_gpu[k], req_gpus, req_milli, row)
        out[k] = _frag(row, cpu[i] - req_cpu, mem[i] - req_mem, model[i], w, count, below, slots)
        memo_key[slot] = key
        memo_value[slot] = out[k]
    return out


class FragmentationMeter:
    """Per-node fragmentation of one cluster state, recomputed only where it changed.

    It reads ``state.version`` to find nodes touched since the last call, so a
    placement loop pays for one node per placement rather than for the cluster.
    It serves one shape of the state: once ``state.epoch`` moves on (a node
    added or removed, a MIG layout changed), its arrays, model numbering and
    memo no longer match, and it raises rather than answer; build a new meter
    (and workload: model numbering may have changed).
    """

    def __init__(self, state: ClusterState, workload: Workload) -> None:
        self.state = state
        self.epoch = state.epoch
        self.workload = workload
        # A node's GPUs share one model in every inventory we load; the first
        # GPU's model stands for the node (-1 for a CPU-only node).
        self.model = (
            state.gpu_model[:, 0].copy()
            if state.gpu_model.shape[1]
            else np.full(state.num_nodes, -1, dtype=np.int64)
        )
        # Memory enters the measure only when the workload's types carry it;
        # otherwise it must not split otherwise equal node states.
        self._uses_memory = bool(workload.memory.any())
        self._mem = state.mem_free if self._uses_memory else np.zeros_like(state.mem_free)
        self._frag = np.zeros(state.num_nodes, dtype=np.float64)
        self._digest = np.zeros(state.num_nodes, dtype=np.uint64)
        self._seen = np.full(state.num_nodes, -1, dtype=np.int64)
        # Zero marks an empty slot: digests always have their low bit set.
        self._memo_key = np.zeros(MEMO_SLOTS, dtype=np.uint64)
        self._memo_value = np.zeros(MEMO_SLOTS, dtype=np.float64)
        self._w = workload.arrays()

    def per_node(self) -> FloatArray:
        """Expected fragment milli-GPU on every node (a read-only view)."""
        st = self.state
        if st.epoch != self.epoch:
            raise RuntimeError("the cluster changed shape since this meter was built")
        stale = np.flatnonzero(st.version != self._seen)
        if len(stale):
            _node_frag(
                st.gpu_milli_free,
                st.cpu_free,
                self._mem,
                self.model,
                stale,
                self._frag,
                self._digest,
                self._w,
            )
            self._seen[stale] = st.version[stale]
        return self._frag

    def total(self) -> float:
        return float(self.per_node().sum())

    def digests(self) -> npt.NDArray[np.uint64]:
        """Every node's state digest, fresh: nodes with equal digests are in equal states."""
        self.per_node()
        return self._digest

    def after(self, nodes: IntArray, gpus: IntArray, request: Request) -> FloatArray:
        """Fragmentation of each (node, GPU) option's node once ``request`` is placed."""
        st = self.state
        self.per_node()  # refreshes the state digests the kernel deduplicates by
        req_mem = request.memory_mib if self._uses_memory else 0
        return _frag_after(
            st.gpu_milli_free,
            st.cpu_free,
            self._mem,
            self.model,
            self._digest,
            nodes,
            gpus,
            request.cpu_milli,
            req_mem,
            request.gpu_count,
            request.milli_per_gpu,
            self._w,
            self._memo_key,
            self._memo_value,
        )


@njit(cache=True, nogil=True)
def _slot(free: IntArray, size: int) -> int:
    """Per-GPU shares of ``size`` that one node's free milli-GPU holds."""
    n = 0
    if size > 0:
        for g in range(free.shape[0]):
            n += free[g] // size
    return n


@njit(cache=True, nogil=True)
def _slots(free: IntArray, threshold: IntArray, out: IntArray) -> None:
    """``_slot`` of each threshold's size."""
    for j in range(threshold.shape[0]):
        out[j] = _slot(free, threshold[j])


@njit(cache=True, nogil=True)
def _copies(slots: IntArray, cpu: int, mem: int, model: int, w: WorkloadArrays, t: int) -> int:
    """How many tasks of type ``t`` one node state (``slots`` from ``_slots``) could
    still take, one after another."""
    w_cpu, w_mem, w_gpus, w_ok, w_level = w[0], w[1], w[2], w[4], w[6]
    k = 1 << 30
    if w_gpus[t] > 0:
        if model < 0 or not w_ok[t, model]:
            return 0
        k = slots[w_level[t]] // w_gpus[t]
    if w_cpu[t] > 0:
        k = min(k, max(cpu, 0) // w_cpu[t])
    if w_mem[t] > 0:
        k = min(k, max(mem, 0) // w_mem[t])
    return k if k < 1 << 30 else 0


@njit(cache=True, nogil=True)
def _node_copies(
    free: IntArray,
    cpu: IntArray,
    mem: IntArray,
    model: IntArray,
    removed: BoolArray,
    nodes: IntArray,
    w: WorkloadArrays,
    out: IntArray,
    total: IntArray,
) -> None:
    """Refresh ``out[:, i]`` (tasks of each type node ``i`` could take) and the
    per-type ``total`` over nodes, for the given nodes."""
    slots = np.empty(w[5].shape[0], dtype=np.int64)
    for i in nodes:
        _slots(free[i], w[5], slots)
        for t in range(out.shape[0]):
            k = 0 if removed[i] else _copies(slots, cpu[i], mem[i], model[i], w, t)
            total[t] += k - out[t, i]
            out[t, i] = k


@njit(cache=True, nogil=True)
def _price(
    total: IntArray,
    free: FloatArray,
    asks: FloatArray,
    value: FloatArray,
    expected: FloatArray,
    scarce: float,
    out: FloatArray,
) -> None:
    """Milli-GPU per place of each type (``LastPlaces.price``)."""
    for t in range(total.shape[0]):
        out[t] = 0.0
        if total[t] == 0:
            continue
        anywhere = np.inf
        for r in range(3):
            if asks[t, r] > 0:
                anywhere = min(anywhere, free[r] / asks[t, r])
        need = expected[t] / total[t] - expected[t] / max(anywhere, 1.0)
        if need >= scarce:
            out[t] = value[t] * min(need, 1.0)


@njit(cache=True, nogil=True)
def _places_lost(
    free: IntArray,
    cpu: IntArray,
    mem: IntArray,
    model: IntArray,
    copies: IntArray,
    opt_node: IntArray,
    opt_gpu: IntArray,
    req_cpu: int,
    req_mem: int,
    req_gpus: int,
    req_milli: int,
    w: WorkloadArrays,
    types: IntArray,
    price: FloatArray,
) -> FloatArray:
    """The priced places each option's node loses for ``types`` once the request is placed."""
    out = np.zeros(opt_node.shape[0], dtype=np.float64)
    row = np.empty(free.shape[1], dtype=np.int64)
    threshold = w[5]
    slots = np.zeros(threshold.shape[0], dtype=np.int64)
    # Only the share sizes of the priced types: a few of the workload's many.
    needed = np.zeros(threshold.shape[0], dtype=np.bool_)
    for t in types:
        needed[w[6][t]] = True
    levels = np.flatnonzero(needed)
    for k in range(opt_node.shape[0]):
        i = opt_node[k]
        _take(free[i], opt_gpu[k], req_gpus, req_milli, row)
        for j in levels:
            slots[j] = _slot(row, threshold[j])
        for t in types:
            if copies[t, i] == 0:
                continue
            after = _copies(slots, cpu[i] - req_cpu, mem[i] - req_mem, model[i], w, t)
            out[k] += price[t] * (copies[t, i] - after)
    return out


class MigPlaces:
    """The places of MIG task types, for ``LastPlaces``: a type's places on a node are
    the free MIG instances of its profile there, on GPU models it accepts, bounded
    together with the node's free CPU and memory, as for other types.

    MIG work can go only where a GPU was partitioned for it, a few nodes, so it is
    what other work most easily strands: a CPU-heavy task on a node with free
    ``3g.40gb`` instances can leave them without the CPU a MIG task needs. Only
    nodes holding MIG instances are counted; the instances free per (profile,
    model) are recounted at each placement, which is cheap over those few nodes.
    ``freq`` is per task of the rest of the workload (``Workload.freq``'s), so that
    ``LastPlaces``' horizon sets how many of each type are still to come.
    """

    def __init__(
        self, state: ClusterState, requests: Sequence[Request], memory: bool, scale: FloatArray
    ) -> None:
        self.state = state
        counts = Counter(
            (r.mig_profile, r.mig_count, r.cpu_milli, r.memory_mib if memory else 0, r.gpu_models)
            for r in requests
            if r.mig_profile in state.mig_profiles
        )
        plain = sum(1 for r in requests if not r.mig_profile)
        keys = sorted(counts, key=lambda k: (k[0], k[1], k[2], k[3], sorted(k[4])))
        # Retired instances (profile -1) and those of removed nodes hold nothing.
        self._inst = np.flatnonzero((state.mig_profile >= 0) & ~state.removed[state.mig_node])
        on = state.mig_node[self._inst]
        self.nodes = np.unique(on)
        self._local = np.full(state.num_nodes, -1, dtype=np.int64)
        self._local[self.nodes] = np.arange(len(self.nodes))
        # Instances are grouped by (profile, model); a type may use some groups.
        model = state.gpu_model[on, state.mig_gpu[self._inst]]
        group = state.mig_profile[self._inst] * (len(state.models) + 1) + model
        self._bin = group * len(self.nodes) + self._local[on]  # (group, node) of each
        groups = len(state.mig_profiles) * (len(state.models) + 1)
        self._uses = np.zeros((len(keys), groups), dtype=np.int64)
        for t, k in enumerate(keys):
            ok = [not k[4] or m in k[4] for m in state.models]
            p = state.mig_profiles.index(k[0])
            self._uses[t, p * (len(state.models) + 1) + np.flatnonzero(ok)] = 1
        self.count = np.array([k[1] for k in keys], dtype=np.int64)
        self._asks = np.array([[k[2], k[3]] for k in keys], dtype=np.int64).reshape(-1, 2)
        self.freq = np.array([counts[k] / max(plain, 1) for k in keys], dtype=np.float64)
        gpu = [gpu_milli_equivalent(Request(mig_profile=k[0], mig_count=k[1])) for k in keys]
        self._all_asks = np.column_stack([gpu, self._asks]).astype(np.float64).reshape(-1, 3)
        self.value: FloatArray = (self._all_asks * scale).max(axis=1, initial=0.0)
        self._free = np.zeros((len(keys), len(self.nodes)), dtype=np.int64)
        self.copies = np.zeros_like(self._free)
        self.price: FloatArray = np.zeros(len(keys), dtype=np.float64)

    def _fit(self, instances: IntArray, cpu: IntArray, mem: IntArray) -> IntArray:
        """Tasks of each type (rows) that the columns' free instances, CPU and memory hold."""
        k = instances // self.count[:, None]
        for r, free in ((0, cpu), (1, mem)):
            ask = self._asks[:, r, None]
            k = np.minimum(k, np.where(ask > 0, np.maximum(free, 0) // np.maximum(ask, 1), k))
        out: IntArray = np.maximum(k, 0)
        return out

    def update(self, expected_per_task: float, free: Sequence[float], mem: IntArray) -> None:
        """Recount the places and price them, ``expected_per_task`` tasks of the rest
        of the workload being still to come; ``free`` is the cluster's free GPU, CPU
        and memory, ``mem`` the free memory counted, node by node."""
        st = self.state
        width = len(self.nodes)
        groups = self._uses.shape[1]
        per_group = np.bincount(
            self._bin, weights=st.mig_free[self._inst], minlength=groups * width
        ).reshape(groups, width)
        self._free = self._uses @ per_group.astype(np.int64)
        self.copies = self._fit(
            self._free, st.cpu_free[self.nodes][None, :], mem[self.nodes][None, :]
        )
        # Priced as every type is: against what free capacity anywhere would hold,
        # a MIG task counting its compute share of a GPU. MIG types have few places
        # beside it, as model-pinned types do, so their need shows early.
        total = self.copies.sum(axis=1)
        expected = self.freq * expected_per_task
        _price(
            total,
            np.asarray(free, np.float64),
            self._all_asks,
            self.value,
            expected,
            LastPlaces.SCARCE,
            self.price,
        )

    def lost(self, nodes: IntArray, request: Request, mem_ask: int, mem: IntArray) -> FloatArray:
        """The priced places each option's node loses once ``request`` is placed there."""
        out = np.zeros(len(nodes), dtype=np.float64)
        local = self._local[nodes]
        on = np.flatnonzero(local >= 0)
        if not len(on) or not self.price.any():
            return out
        cols = local[on]
        instances = self._free[:, cols]
        if request.mig_profile in self.state.mig_profiles:
            # The instance it takes is of its profile; types of that profile lose it.
            p = self.state.mig_profiles.index(request.mig_profile)
            width = len(self.state.models) + 1
            same = self._uses[:, p * width : (p + 1) * width].sum(axis=1) > 0
            instances = instances - np.where(same[:, None], request.mig_count, 0)
        st = self.state
        after = self._fit(
            instances,
            st.cpu_free[nodes[on]][None, :] - request.cpu_milli,
            mem[nodes[on]][None, :] - mem_ask,
        )
        out[on] = self.price @ (self.copies[:, cols] - after)
        return out


class LastPlaces:
    """What a placement costs the task types that are running out of places.

    ``places`` counts, for each type of the workload and each node, how many
    tasks of that type the node could still take one after another (GPU slots,
    CPU and memory bounding them together). Until the first of the cluster's
    resources is used up, ``horizon`` more tasks are expected (its free amount
    over what the workload's average task asks of it), ``freq x horizon`` of
    them of each type.
    A type's *need* is the share of its places those tasks would fill, beyond
    the share they would fill if the type could use free capacity anywhere:
    large types (few nodes hold them whole), model-pinned types and types whose
    CPU or memory the nodes hold only in pieces have fewer places than the free
    capacity suggests, and that shortfall is what placement can protect. Taking
    one of their places costs ``need`` (at most 1) times what a task of the type
    asks, its dominant share of the cluster in milli-GPU (CPU and memory
    converted at the cluster's ratio to GPU): nothing while places abound, a
    whole task for the last ones. Every task pays, CPU-only ones included, and
    only for places it actually removes, so work that must break a large node
    goes to one that is already broken.

    Where CPU or memory will run out before the GPUs (``gpu_first`` is false),
    every type competes for that resource, and a place kept for one type is CPU
    that the others are refused: kept for every type on openb with four times
    the CPU-only pods, places cost 1.4 points of allocation. There only GPU
    types' places are priced (MIG ones included), and only CPU-only tasks pay
    for them. A GPU task that takes such a place runs GPU work on it; a
    CPU-only task could have had CPU on any node, and on the few nodes that
    hold the largest GPU tasks it leaves their GPUs idle.
    """

    # A need below this (a twentieth of a task per place) is left out, which keeps
    # the per-option pass to the few types that are short of places.
    SCARCE = 0.05

    def __init__(
        self,
        state: ClusterState,
        workload: Workload,
        model: IntArray,
        requests: Sequence[Request] = (),
    ) -> None:
        """``requests``: the workload's requests, whose MIG ones (which ``workload``
        leaves out) get places of their own (``MigPlaces``)."""
        self.state = state
        self.workload = workload
        self.model = model
        self._w = workload.arrays()
        self._memory = bool(workload.memory.any())  # whether types ask for host memory
        self._mem = state.mem_free if self._memory else np.zeros_like(state.mem_free)
        gpu = float(state.gpu_milli_total.sum())
        scale = gpu / np.maximum([gpu, state.cpu_total.sum(), state.mem_total.sum()], 1.0)
        mig = len(state.mig_node) and any(r.mig_profile for r in requests)
        self.mig = MigPlaces(state, requests, self._memory, scale) if mig else None
        asks = np.stack(
            [workload.gpus * workload.milli, workload.cpu, workload.memory], axis=1
        ).astype(np.float64)
        self._asks = asks
        self.value: FloatArray = (asks * scale).max(axis=1)
        self._mean: FloatArray = workload.freq @ asks
        self._copies = np.zeros((len(workload.freq), state.num_nodes), dtype=np.int64)
        self._seen = np.full(state.num_nodes, -1, dtype=np.int64)
        self._total = np.zeros(len(workload.freq), dtype=np.int64)
        self._live = ~state.removed if state.removed.any() else None
        self.gpu_first = True  # as of the last ``price``

    def places(self) -> IntArray:
        """Tasks of each type that fit node by node, refreshed where the state changed."""
        st = self.state
        stale = np.flatnonzero(st.version != self._seen)
        if len(stale):
            _node_copies(
                st.gpu_milli_free,
                st.cpu_free,
                self._mem,
                self.model,
                st.removed,
                stale,
                self._w,
                self._copies,
                self._total,
            )
            self._seen[stale] = st.version[stale]
        return self._copies

    def price(self) -> FloatArray:
        """Expected milli-GPU of work turned away per place taken from each type; MIG
        types' go to ``mig.price``. Sets ``gpu_first``."""
        st = self.state
        # Removed nodes are fixed for this object's life (removing one moves the epoch).
        live = self._live
        free = [
            float(a.sum() if live is None else a[live].sum())
            for a in (st.gpu_free_sum, st.cpu_free, self._mem)
        ]
        out = np.zeros(len(self._total), dtype=np.float64)
        # Tasks to come until each resource runs out.
        lasts = [f / m if m > 0 else np.inf for f, m in zip(free, self._mean, strict=True)]
        horizon = min(lasts)
        self.gpu_first = horizon >= lasts[0]
        if not self._mean[0] > 0:
            if self.mig is not None:
                self.mig.price[:] = 0.0
            return out
        self.places()
        expected = self.workload.freq * horizon
        _price(self._total, np.array(free), self._asks, self.value, expected, self.SCARCE, out)
        if not self.gpu_first:
            out[self.workload.gpus == 0] = 0.0
        if self.mig is not None:
            self.mig.update(horizon, free, self._mem)
        return out

    def cost(
        self, nodes: IntArray, gpus: IntArray, request: Request, digest: npt.NDArray[np.uint64]
    ) -> FloatArray:
        """Priced places each (node, GPU) option takes from the types running out of them.

        ``digest`` (the meter's per-node state digests, fresh) lets options whose
        nodes are in the same state, with the same free milli on the chosen GPU,
        be evaluated once."""
        price = self.price()
        if not self.gpu_first and (request.gpu_count or request.mig_profile):
            return np.zeros(len(nodes))  # only CPU-only tasks pay here (class docstring)
        mem_ask = request.memory_mib if self._memory else 0
        mig = (
            np.zeros(len(nodes))
            if self.mig is None
            else self.mig.lost(nodes, request, mem_ask, self._mem)
        )
        types = np.flatnonzero(price > 0)
        if not len(types):
            return mig
        st = self.state
        chosen = np.where(gpus >= 0, st.gpu_milli_free[nodes, np.maximum(gpus, 0)] + 1, 0)
        key = digest[nodes] ^ (chosen.astype(np.uint64) * _MIX)
        _, first, back = np.unique(key, return_index=True, return_inverse=True)
        lost = _places_lost(
            st.gpu_milli_free,
            st.cpu_free,
            self._mem,
            self.model,
            self._copies,
            nodes[first],
            gpus[first],
            request.cpu_milli,
            mem_ask,
            request.gpu_count,
            request.milli_per_gpu,
            self._w,
            types,
            price,
        )
        out: FloatArray = lost[back.ravel()] + mig
        return out
