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

The hot loops are compiled with numba: a fill run evaluates millions of
hypothetical node states, and that is the cost of fragmentation-aware placement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from gpufleet.core.model import Request
from gpufleet.core.state import BoolArray, ClusterState, IntArray

FloatArray = np.ndarray


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
    capacity: bool = False

    @classmethod
    def from_requests(
        cls,
        requests: Iterable[Request],
        models: Sequence[str],
        *,
        memory: bool = False,
        capacity: bool = False,
        popularity: float = 1.0,
    ) -> Workload:
        """Type frequencies of ``requests``; MIG requests are left out.

        With ``memory`` a type also needs its host memory to fit, so GPUs
        stranded by exhausted memory count as fragments too. The published
        FGD measure looks at CPU and GPU only, and that stays the default.
        """
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
            capacity=capacity,
        )


@njit(cache=True, nogil=True)
def _frag(
    free: IntArray,
    cpu: int,
    mem: int,
    model: int,
    w_cpu: IntArray,
    w_mem: IntArray,
    w_gpus: IntArray,
    w_freq: FloatArray,
    w_ok: BoolArray,
    w_threshold: IntArray,
    w_level: IntArray,
    w_capacity: bool,
    count: IntArray,
    below: IntArray,
) -> float:
    """Expected fragment milli-GPU of one node state (``count``/``below`` are scratch)."""
    total = 0
    for g in range(free.shape[0]):
        total += free[g]
    if total == 0:
        return 0.0
    for j in range(w_threshold.shape[0]):
        c = 0
        b = 0
        th = w_threshold[j]
        for g in range(free.shape[0]):
            if th == 0:
                continue
            if w_capacity:
                c += free[g] // th
            elif free[g] >= th:
                c += 1
            else:
                b += free[g]
        count[j] = c
        below[j] = b
    frag = 0.0
    for t in range(w_cpu.shape[0]):
        j = w_level[t]
        if w_capacity:
            if w_gpus[t] == 0 or not (model < 0 or w_ok[t, model]):
                frag += w_freq[t] * total
                continue
            k = count[j] // w_gpus[t]
            if w_cpu[t] > 0:
                k = min(k, cpu // w_cpu[t])
            if w_mem[t] > 0:
                k = min(k, mem // w_mem[t])
            frag += w_freq[t] * (total - k * w_gpus[t] * w_threshold[j])
        elif (
            w_gpus[t] > 0
            and cpu >= w_cpu[t]
            and mem >= w_mem[t]
            and (model < 0 or w_ok[t, model])
            and count[j] >= w_gpus[t]
        ):
            frag += w_freq[t] * below[j]
        else:
            frag += w_freq[t] * total
    return frag


@njit(cache=True, nogil=True)
def _node_frag(
    free: IntArray,
    cpu: IntArray,
    mem: IntArray,
    model: IntArray,
    nodes: IntArray,
    out: FloatArray,
    w_cpu: IntArray,
    w_mem: IntArray,
    w_gpus: IntArray,
    w_freq: FloatArray,
    w_ok: BoolArray,
    w_threshold: IntArray,
    w_level: IntArray,
    w_capacity: bool,
) -> None:
    count = np.empty(w_threshold.shape[0], dtype=np.int64)
    below = np.empty(w_threshold.shape[0], dtype=np.int64)
    for i in nodes:
        out[i] = _frag(
            free[i],
            cpu[i],
            mem[i],
            model[i],
            w_cpu,
            w_mem,
            w_gpus,
            w_freq,
            w_ok,
            w_threshold,
            w_level,
            w_capacity,
            count,
            below,
        )


@njit(cache=True, nogil=True)
def _frag_after(
    free: IntArray,
    cpu: IntArray,
    mem: IntArray,
    model: IntArray,
    opt_node: IntArray,
    opt_gpu: IntArray,
    req_cpu: int,
    req_mem: int,
    req_gpus: int,
    req_milli: int,
    w_cpu: IntArray,
    w_mem: IntArray,
    w_gpus: IntArray,
    w_freq: FloatArray,
    w_ok: BoolArray,
    w_threshold: IntArray,
    w_level: IntArray,
    w_capacity: bool,
) -> FloatArray:
    """Fragmentation of each option's node after the request is placed there.

    A fractional option takes ``req_milli`` from GPU ``opt_gpu``; a whole-GPU
    option takes ``req_gpus`` GPUs that are entirely free (which ones does not
    change the node's fragmentation).
    """
    out = np.empty(opt_node.shape[0], dtype=np.float64)
    count = np.empty(w_threshold.shape[0], dtype=np.int64)
    below = np.empty(w_threshold.shape[0], dtype=np.int64)
    row = np.empty(free.shape[1], dtype=np.int64)
    for k in range(opt_node.shape[0]):
        i = opt_node[k]
        for g in range(free.shape[1]):
            row[g] = free[i, g]
        if opt_gpu[k] >= 0:
            row[opt_gpu[k]] -= req_milli
        else:
            left = req_gpus
            for g in range(free.shape[1]):
                if left > 0 and row[g] >= req_milli:
                    row[g] -= req_milli
                    left -= 1
        out[k] = _frag(
            row,
            cpu[i] - req_cpu,
            mem[i] - req_mem,
            model[i],
            w_cpu,
            w_mem,
            w_gpus,
            w_freq,
            w_ok,
            w_threshold,
            w_level,
            w_capacity,
            count,
            below,
        )
    return out


class FragmentationMeter:
    """Per-node fragmentation of one cluster state, recomputed only where it changed.

    It reads ``state.version`` to find nodes touched since the last call, so a
    placement loop pays for one node per placement rather than for the cluster.
    """

    def __init__(self, state: ClusterState, workload: Workload) -> None:
        self.state = state
        self.workload = workload
        # A node's GPUs share one model in every inventory we load; the first
        # GPU's model stands for the node (-1 for a CPU-only node).
        self.model = (
            state.gpu_model[:, 0].copy()
            if state.gpu_model.shape[1]
            else np.full(state.num_nodes, -1, dtype=np.int64)
        )
        self._frag = np.zeros(state.num_nodes, dtype=np.float64)
        self._seen = np.full(state.num_nodes, -1, dtype=np.int64)

    def _w(
        self,
    ) -> tuple[IntArray, IntArray, IntArray, FloatArray, BoolArray, IntArray, IntArray, bool]:
        w = self.workload
        return w.cpu, w.memory, w.gpus, w.freq, w.model_ok, w.threshold, w.level, w.capacity

    def per_node(self) -> FloatArray:
        """Expected fragment milli-GPU on every node (a read-only view)."""
        st = self.state
        stale = np.flatnonzero(st.version != self._seen)
        if len(stale):
            _node_frag(
                st.gpu_milli_free,
                st.cpu_free,
                st.mem_free,
                self.model,
                stale,
                self._frag,
                *self._w(),
            )
            self._seen[stale] = st.version[stale]
        return self._frag

    def total(self) -> float:
        return float(self.per_node().sum())

    def after(self, nodes: IntArray, gpus: IntArray, request: Request) -> FloatArray:
        """Fragmentation of each (node, GPU) option's node once ``request`` is placed."""
        st = self.state
        return _frag_after(
            st.gpu_milli_free,
            st.cpu_free,
            st.mem_free,
            self.model,
            nodes,
            gpus,
            request.cpu_milli,
            request.memory_mib,
            request.gpu_count,
            request.milli_per_gpu,
            *self._w(),
        )
