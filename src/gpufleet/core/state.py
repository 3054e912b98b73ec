"""Columnar cluster state: what each node and GPU has free, as numpy arrays.

Nodes are rows; GPUs are columns of a (nodes x max GPUs per node) grid, with
``gpu_exists`` masking the padding. A MIG-enabled GPU gives no milli-GPU to
whole or fractional requests; its instances live in flat per-instance arrays.
Allocate and release touch only the entries of the GPUs and instances named,
so they cost O(GPUs touched) and release restores the state bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.core import mig as migmod
from gpufleet.core.model import MILLI, InvalidSpec, Node

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class OverAllocation(RuntimeError):
    """An assignment asked for more than is free: a bug in the caller's plan."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """Exactly what one task takes on one node.

    ``gpus`` are GPU indices on the node, each losing ``gpu_milli`` milli-GPU
    and ``gpu_memory_mib`` of GPU memory (a whole GPU takes all 1000 milli,
    which already keeps any other task off it, so its memory is not counted).
    ``mig`` are indices into the state's MIG instance arrays.
    """

    node: int
    gpus: tuple[int, ...] = ()
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    mig: tuple[int, ...] = ()


class ClusterState:
    """Free and total capacity of every node, GPU and MIG instance."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = tuple(nodes)
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidSpec("node.name", f"{dup!r} appears twice")
        self.index = {name: i for i, name in enumerate(names)}
        n = len(self.nodes)
        g = max((len(node.gpus) for node in self.nodes), default=0)
        self.models: list[str] = sorted({gpu.model for node in self.nodes for gpu in node.gpus})
        model_id = {m: i for i, m in enumerate(self.models)}
        # Which models each set of allowed models admits (core.fit.model_mask's cache).
        self.model_masks: dict[frozenset[str], BoolArray] = {}

        self.cpu_total = np.array([x.cpu_milli for x in self.nodes], dtype=np.int64)
        self.mem_total = np.array([x.memory_mib for x in self.nodes], dtype=np.int64)
        self.cpu_free = self.cpu_total.copy()
        self.mem_free = self.mem_total.copy()
        self.healthy: BoolArray = np.ones(n, dtype=np.bool_)
        # Bumped on every change to a node, so caches derived from a node's
        # state (fragmentation, scores) know when to recompute.
        self.version = np.zeros(n, dtype=np.int64)
        self.gpu_exists: BoolArray = np.zeros((n, g), dtype=np.bool_)
        self.gpu_model = np.full((n, g), -1, dtype=np.int64)
        self.gpu_mem_total = np.zeros((n, g), dtype=np.int64)
        self.gpu_numa = np.zeros((n, g), dtype=np.int64)
        self.gpu_nvlink = np.zeros((n, g), dtype=np.int64)
        self.gpu_milli_total = np.zeros((n, g), dtype=np.int64)

        mig_rows: list[tuple[int, int, str, int, int]] = []
        for i, node in enumerate(self.nodes):
            for gpu in node.gpus:
                j = gpu.index
                self.gpu_exists[i, j] = True
                self.gpu_model[i, j] = model_id[gpu.model]
                self.gpu_mem_total[i, j] = gpu.memory_mib
                self.gpu_numa[i, j] = gpu.numa
                self.gpu_nvlink[i, j] = gpu.nvlink_domain
                if gpu.mig is None:
                    self.gpu_milli_total[i, j] = MILLI
                    continue
                layout = tuple(migmod.MigInstance(p, s) for p, s in gpu.mig)
                migmod.validate_layout(gpu.model, layout)
                for inst in layout:
                    mem = migmod.profile(gpu.model, inst.profile).memory_mib
                    mig_rows.append((i, j, inst.profile, inst.start, mem))
        self.gpu_milli_free = self.gpu_milli_total.copy()
        # Kept in step with gpu_milli_free: scorers read a node's free sum for
        # every option of every request.
        self.gpu_free_sum = self.gpu_milli_free.sum(axis=1)
        self.gpu_milli_total_sum = self.gpu_milli_total.sum(axis=1)
        self.gpu_mem_free = np.where(self.gpu_milli_total > 0, self.gpu_mem_total, 0)

        self.mig_profiles: list[str] = sorted({row[2] for row in mig_rows})
        profile_id = {p: k for k, p in enumerate(self.mig_profiles)}
        self.mig_node = np.array([r[0] for r in mig_rows], dtype=np.int64)
        self.mig_gpu = np.array([r[1] for r in mig_rows], dtype=np.int64)
        self.mig_profile = np.array([profile_id[r[2]] for r in mig_rows], dtype=np.int64)
        self.mig_start = np.array([r[3] for r in mig_rows], dtype=np.int64)
        self.mig_memory = np.array([r[4] for r in mig_rows], dtype=np.int64)
        self.mig_free: BoolArray = np.ones(len(mig_rows), dtype=np.bool_)

    # -- sizes -------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def gpu_milli_capacity(self) -> int:
        """Milli-GPU available to whole and fractional requests, in all."""
        return int(self.gpu_milli_total.sum())

    @property
    def gpu_milli_allocated(self) -> int:
        return int(self.gpu_milli_total.sum() - self.gpu_milli_free.sum())

    # -- mutation ----------------------------------------------------------
    def allocate(self, a: Assignment) -> None:
        """Take what ``a`` names; raise OverAllocation (changing nothing) if not free."""
        n = a.node
        if (
            self.cpu_free[n] < a.cpu_milli
            or self.mem_free[n] < a.memory_mib
            or len(set(a.gpus)) != len(a.gpus)
            or len(set(a.mig)) != len(a.mig)
            or any(
                self.gpu_milli_free[n, g] < a.gpu_milli
                or self.gpu_mem_free[n, g] < a.gpu_memory_mib
                for g in a.gpus
            )
            or any(not self.mig_free[m] or self.mig_node[m] != n for m in a.mig)
        ):
            raise OverAllocation(f"{a} does not fit on {self.nodes[n].name}")
        self._apply(a, -1)
        self.mig_free[list(a.mig)] = False

    def release(self, a: Assignment) -> None:
        """Give back exactly what ``allocate(a)`` took."""
        self._apply(a, +1)
        self.mig_free[list(a.mig)] = True

    def _apply(self, a: Assignment, sign: int) -> None:
        self.version[a.node] += 1
        self.cpu_free[a.node] += sign * a.cpu_milli
        self.mem_free[a.node] += sign * a.memory_mib
        for g in a.gpus:
            self.gpu_milli_free[a.node, g] += sign * a.gpu_milli
            self.gpu_mem_free[a.node, g] += sign * a.gpu_memory_mib
        self.gpu_free_sum[a.node] += sign * a.gpu_milli * len(a.gpus)
