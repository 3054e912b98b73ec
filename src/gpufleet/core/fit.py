"""The built-in resource fit: which nodes can host a request, and its options there.

One compiled pass over the (nodes x GPUs) grid answers both questions, because
this runs for every request in every cycle and a dozen numpy passes per
request cost more than the scoring that follows.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from gpufleet.core.model import Request
from gpufleet.core.state import BoolArray, ClusterState, IntArray


@njit(cache=True, nogil=True)
def _fit(
    milli_free: IntArray,
    free_sum: IntArray,
    gmem_free: IntArray,
    milli_total: IntArray,
    gmem_total: IntArray,
    gpu_model: IntArray,
    model_ok: BoolArray,
    cpu_free: IntArray,
    mem_free: IntArray,
    healthy: BoolArray,
    cpu: int,
    mem: int,
    count: int,
    milli: int,
    gmem: int,
    min_gmem: int,
    per_gpu_options: bool,
) -> tuple[BoolArray, IntArray, IntArray]:
    n, g = milli_free.shape
    feasible = np.zeros(n, dtype=np.bool_)
    opt_node = np.empty(n * g if per_gpu_options else n, dtype=np.int64)
    opt_gpu = np.empty_like(opt_node)
    k = 0
    for i in range(n):
        if (
            not healthy[i]
            or cpu_free[i] < cpu
            or mem_free[i] < mem
            or free_sum[i] < count * milli  # most nodes of a busy cluster stop here
        ):
            continue
        fits = 0
        for j in range(g):
            if (
                milli_total[i, j] > 0
                and milli_free[i, j] >= milli
                and gmem_free[i, j] >= gmem
                and gmem_total[i, j] >= min_gmem
                and model_ok[gpu_model[i, j]]
            ):
                fits += 1
        if fits < count:
            continue
        feasible[i] = True
        if not per_gpu_options:
            opt_node[k] = i
            opt_gpu[k] = -1
            k += 1
            continue
        for j in range(g):
            if not (
                milli_total[i, j] > 0
                and milli_free[i, j] >= milli
                and gmem_free[i, j] >= gmem
                and gmem_total[i, j] >= min_gmem
                and model_ok[gpu_model[i, j]]
            ):
                continue
            # GPUs with equal free milli and memory are interchangeable for a
            # fraction: the lowest index stands for them all.
            same = False
            for h in range(j):
                if (
                    milli_free[i, h] == milli_free[i, j]
                    and gmem_free[i, h] == gmem_free[i, j]
                    and gmem_total[i, h] >= min_gmem
                    and milli_total[i, h] > 0
                    and model_ok[gpu_model[i, h]]
                ):
                    same = True
                    break
            if not same:
                opt_node[k] = i
                opt_gpu[k] = j
                k += 1
    return feasible, opt_node[:k], opt_gpu[:k]


FitState = tuple[
    IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, BoolArray
]
"""What the fit reads of the state now (``fit_state``)."""


def fit_state(state: ClusterState) -> FitState:
    """Free and total GPU capacity, GPU models, free CPU and memory, and health."""
    return (
        state.gpu_milli_free,
        state.gpu_free_sum,
        state.gpu_mem_free,
        state.gpu_milli_total,
        state.gpu_mem_total,
        state.gpu_model,
        state.cpu_free,
        state.mem_free,
        state.healthy,
    )


@lru_cache(maxsize=4096)
def fit_need(r: Request) -> IntArray:
    """What the fit reads of a request but MIG (``room_now``'s ``need``), read-only. Kept,
    as every window asks again for the same few requests."""
    need = np.array(
        [r.cpu_milli, r.memory_mib, r.gpu_count, r.milli_per_gpu, r.gpu_memory_mib,
         r.min_gpu_memory_mib],
        dtype=np.int64,
    )  # fmt: skip
    need.flags.writeable = False
    return need


@njit(cache=True, nogil=True)
def room_now(fs: FitState, model_ok: BoolArray, need: IntArray) -> BoolArray:
    """``fit``'s feasible nodes now, for a compiled caller: ``need`` from ``fit_need``."""
    milli_free, free_sum, gmem_free, milli_total, gmem_total, gpu_model = fs[:6]
    cpu_free, mem_free, healthy = fs[6:]
    cpu, mem, count, milli, gmem, min_gmem = need[0], need[1], need[2], need[3], need[4], need[5]
    feasible, _, _ = _fit(
        milli_free, free_sum, gmem_free, milli_total, gmem_total, gpu_model, model_ok,
        cpu_free, mem_free, healthy, cpu, mem, count, milli, gmem, min_gmem, False,
    )  # fmt: skip
    return feasible


def model_mask(state: ClusterState, r: Request) -> BoolArray:
    """Which of the state's GPU models the request accepts (one extra slot for 'none').

    Read-only and shared: every request with the same allowed models gets the
    same array, built once per state.
    """
    ok = state.model_masks.get(r.gpu_models)
    if ok is None:
        ok = np.ones(len(state.models) + 1, dtype=np.bool_)
        if r.gpu_models:
            ok[: len(state.models)] = [m in r.gpu_models for m in state.models]
        ok[-1] = False  # gpu_model -1 marks padding: index -1 lands here
        ok.flags.writeable = False
        state.model_masks[r.gpu_models] = ok
    return ok


def fit(state: ClusterState, r: Request, empty: bool) -> tuple[BoolArray, IntArray, IntArray]:
    """(feasible node mask, option nodes, option GPUs) for a whole, fractional or
    CPU-only request; ``empty`` fits against total rather than free capacity."""
    return _fit(
        state.gpu_milli_total if empty else state.gpu_milli_free,
        state.gpu_milli_total_sum if empty else state.gpu_free_sum,
        state.gpu_mem_total if empty else state.gpu_mem_free,
        state.gpu_milli_total,
        state.gpu_mem_total,
        state.gpu_model,
        model_mask(state, r),
        state.cpu_total if empty else state.cpu_free,
        state.mem_total if empty else state.mem_free,
        state.healthy,
        r.cpu_milli,
        r.memory_mib,
        r.gpu_count,
        r.milli_per_gpu,
        r.gpu_memory_mib,
        r.min_gpu_memory_mib,
        r.gpu_milli > 0,
    )


def static_gpu_ok(
    state: ClusterState, r: Request, nodes: int | IntArray | slice = slice(None)
) -> BoolArray:
    """GPUs on ``nodes`` that could ever take one of ``r``'s per-GPU shares: an allowed
    model, not MIG, big enough in milli-GPU and memory, whatever is in use now."""
    ok: BoolArray = model_mask(state, r)[state.gpu_model[nodes]]
    ok &= state.gpu_milli_total[nodes] >= max(r.milli_per_gpu, 1)
    ok &= state.gpu_mem_total[nodes] >= max(r.min_gpu_memory_mib, r.gpu_memory_mib)
    return ok


def eligible_gpus(state: ClusterState, r: Request, nodes: int | IntArray | slice) -> BoolArray:
    """GPUs on ``nodes`` that could take one of the request's per-GPU shares now."""
    return (
        static_gpu_ok(state, r, nodes)
        & (state.gpu_milli_free[nodes] >= r.milli_per_gpu)
        & (state.gpu_mem_free[nodes] >= r.gpu_memory_mib)
    )


def mig_instances(state: ClusterState, r: Request, *, empty: bool) -> BoolArray:
    """MIG instances of ``r``'s profile on an allowed model; only free ones unless ``empty``."""
    if r.mig_profile not in state.mig_profiles:
        return np.zeros(len(state.mig_node), dtype=np.bool_)
    match: BoolArray = state.mig_profile == state.mig_profiles.index(r.mig_profile)
    if not empty:
        match &= state.mig_free
    match &= model_mask(state, r)[state.gpu_model[state.mig_node, state.mig_gpu]]
    return match
