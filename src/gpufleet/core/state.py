"""Columnar cluster state: what each node and GPU has free, as numpy arrays.

Nodes are rows; GPUs are columns of a (nodes x max GPUs per node) grid, with
``gpu_exists`` masking the padding. A MIG-enabled GPU gives no milli-GPU to
whole or fractional requests; its instances live in flat per-instance arrays.
Allocate and release touch only the entries of the GPUs and instances named,
so they cost O(GPUs touched) and release restores the state bit for bit.

The cluster's shape may change while it runs: ``add_node``, ``remove_node``
and ``set_mig_layout`` cost O(cluster) and bump ``epoch``. Indices never
move. Running jobs' assignments name nodes and MIG instances by index, so a
removed node stays behind as a *tombstone* (removed, unhealthy, no capacity,
no name in ``index``) and a re-laid-out GPU's instances are retired in place
(``mig_profile`` -1, held by nothing, refused by ``allocate``) while the new
ones are appended. Nothing ever reuses a tombstone's or a retired instance's
index, so an assignment made before the change can never land on different
hardware: ``allocate`` refuses it. Tombstones and retired instances cost a
row each; a driver that wants the space back rebuilds the state from
``live_nodes()`` at a quiet moment, when no assignment is held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from gpufleet.core import mig as migmod
from gpufleet.core.model import MILLI, InvalidSpec, Node

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Layout of the arrays, for the methods that grow or renumber them all.
_NODE_COLUMNS = (
    "cpu_total",
    "mem_total",
    "cpu_free",
    "mem_free",
    "healthy",
    "removed",
    "version",
    "gpu_free_sum",
    "gpu_milli_total_sum",
)
# (nodes x GPUs) columns and the value of a padding cell.
_GPU_COLUMNS = {
    "gpu_exists": 0,
    "gpu_model": -1,
    "gpu_mem_total": 0,
    "gpu_numa": 0,
    "gpu_nvlink": 0,
    "gpu_milli_total": 0,
    "gpu_milli_free": 0,
    "gpu_mem_free": 0,
}
_MIG_COLUMNS = ("mig_node", "mig_gpu", "mig_profile", "mig_start", "mig_memory", "mig_free")


class OverAllocation(RuntimeError):
    """An assignment asked for more than is free: a bug in the caller's plan."""


class NotIdle(ValueError):
    """A node or GPU whose shape was to change still holds an allocation."""


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


def _layout(model: str, mig: tuple[tuple[str, int], ...]) -> tuple[migmod.MigInstance, ...]:
    """A GPU's MIG layout, validated (InvalidSpec names what is wrong)."""
    if model not in migmod.PROFILES:
        migmod.profile(model, "")  # raises, naming the models that support MIG
    layout = tuple(migmod.MigInstance(p, s) for p, s in mig)
    migmod.validate_layout(model, layout)
    return layout


class ClusterState:
    """Free and total capacity of every node, GPU and MIG instance.

    ``version[i]`` is bumped on every change to node ``i``, so caches of a
    node's evaluation know when to recompute it. ``epoch`` is bumped when
    the cluster's shape changes (a node added or removed, a MIG layout
    changed): array sizes, model and profile numbering and per-node static
    facts may then differ, and caches kept per state must be rebuilt.
    ``num_nodes`` counts rows, tombstones included; ``removed`` marks them.
    """

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = tuple(nodes)
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise InvalidSpec("node.name", f"{dup!r} appears twice")
        self.index = {name: i for i, name in enumerate(names)}
        self.epoch = 0
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
        self.removed: BoolArray = np.zeros(n, dtype=np.bool_)
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
                for inst in _layout(gpu.model, gpu.mig):
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
        """Rows of the node arrays, removed nodes (tombstones) included."""
        return len(self.nodes)

    @property
    def gpu_milli_capacity(self) -> int:
        """Milli-GPU available to whole and fractional requests, in all."""
        return int(self.gpu_milli_total.sum())

    @property
    def gpu_milli_installed(self) -> int:
        """Milli-GPU of every live GPU, MIG-enabled ones included: the capacity that
        allocation is a share of once MIG slices count their compute share
        (``core.job.gpu_milli_equivalent``, at most 1000 per GPU)."""
        return MILLI * int(self.gpu_exists.sum())

    @property
    def gpu_milli_allocated(self) -> int:
        return int(self.gpu_milli_total.sum() - self.gpu_milli_free.sum())

    def live_nodes(self) -> list[Node]:
        """The nodes not removed, in index order, as they are configured now."""
        return [n for n, gone in zip(self.nodes, self.removed, strict=True) if not gone]

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
            or any(
                not self.mig_free[m] or self.mig_node[m] != n or self.mig_profile[m] < 0
                for m in a.mig
            )
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

    # -- shape -------------------------------------------------------------
    def add_node(self, node: Node) -> int:
        """Add an idle, healthy node as the last row and return its index.

        Raises InvalidSpec if a live node has its name or its MIG layout is
        invalid (the state is then unchanged). A removed node's name may come
        back; it gets a new index, never the tombstone's.
        """
        if node.name in self.index:
            raise InvalidSpec("node.name", f"{node.name!r} is already in the cluster")
        one = ClusterState([node])  # validates the node and lays out its columns
        i = self.num_nodes
        self._renumber(
            sorted({*self.models, *one.models}), sorted({*self.mig_profiles, *one.mig_profiles})
        )
        one._renumber(self.models, self.mig_profiles)
        one.mig_node[:] = i
        width = max(self.gpu_exists.shape[1], one.gpu_exists.shape[1])
        for name in _NODE_COLUMNS + _MIG_COLUMNS:
            setattr(self, name, np.concatenate([getattr(self, name), getattr(one, name)]))
        for name, pad in _GPU_COLUMNS.items():
            rows = [_pad(getattr(s, name), width, pad) for s in (self, one)]
            setattr(self, name, np.concatenate(rows))
        self.nodes = (*self.nodes, node)
        self.index[node.name] = i
        self.epoch += 1
        return i

    def remove_node(self, node: int | str) -> None:
        """Remove an idle node, leaving a tombstone at its index (module docstring).

        Raises KeyError for a name or index that is not a live node, and
        NotIdle while anything is allocated on it.
        """
        i = self._live(node)
        if not self._idle(i, None):
            raise NotIdle(f"{self.nodes[i].name} still runs tasks: it cannot be removed")
        self._retire_mig(self.mig_node == i)
        for name in _NODE_COLUMNS:
            if name not in ("removed", "version"):
                getattr(self, name)[i] = 0
        for name, pad in _GPU_COLUMNS.items():
            getattr(self, name)[i] = pad
        self.removed[i] = True
        self.version[i] += 1
        del self.index[self.nodes[i].name]
        self.epoch += 1

    def set_mig_layout(
        self, node: int | str, gpu: int, layout: tuple[tuple[str, int], ...] | None
    ) -> None:
        """Give an idle GPU a new MIG layout ((profile, start) pairs, as ``GPU.mig``),
        or turn MIG off with None.

        Raises KeyError for an unknown node, InvalidSpec for a GPU index the
        node lacks or a layout the GPU cannot hold (``core.mig`` rules), and
        NotIdle while anything is allocated on the GPU; the state is then
        unchanged. The GPU's old instances are retired, its new ones appended.
        """
        i = self._live(node)
        spec = self.nodes[i]
        if not 0 <= gpu < len(spec.gpus):
            raise InvalidSpec("gpu.index", f"{spec.name} has no GPU {gpu}")
        model = spec.gpus[gpu].model
        insts = () if layout is None else _layout(model, layout)
        if not self._idle(i, gpu):
            raise NotIdle(f"GPU {gpu} of {spec.name} is in use: its MIG layout cannot change")
        self._retire_mig((self.mig_node == i) & (self.mig_gpu == gpu))
        self._renumber(self.models, sorted({*self.mig_profiles, *(p for p, _ in insts)}))
        k = len(insts)
        appended = {
            "mig_node": np.full(k, i),
            "mig_gpu": np.full(k, gpu),
            "mig_profile": [self.mig_profiles.index(p) for p, _ in insts],
            "mig_start": [s for _, s in insts],
            "mig_memory": [migmod.profile(model, p).memory_mib for p, _ in insts],
        }
        for name, values in appended.items():
            column = np.asarray(values, dtype=np.int64).reshape(k)
            setattr(self, name, np.concatenate([getattr(self, name), column]))
        self.mig_free = np.concatenate([self.mig_free, np.ones(k, dtype=np.bool_)])
        milli = MILLI if layout is None else 0
        self.gpu_milli_total_sum[i] += milli - self.gpu_milli_total[i, gpu]
        self.gpu_free_sum[i] += milli - self.gpu_milli_free[i, gpu]
        self.gpu_milli_total[i, gpu] = self.gpu_milli_free[i, gpu] = milli
        self.gpu_mem_free[i, gpu] = self.gpu_mem_total[i, gpu] if milli else 0
        gpus = list(spec.gpus)
        gpus[gpu] = replace(gpus[gpu], mig=layout)
        self.nodes = (*self.nodes[:i], replace(spec, gpus=tuple(gpus)), *self.nodes[i + 1 :])
        self.version[i] += 1
        self.epoch += 1

    def _live(self, node: int | str) -> int:
        """The index of a live node given by name or index; KeyError otherwise."""
        if isinstance(node, str):
            return self.index[node]
        if not 0 <= node < self.num_nodes or self.removed[node]:
            raise KeyError(node)
        return node

    def _idle(self, i: int, gpu: int | None) -> bool:
        """Nothing is allocated on GPU ``gpu`` of node ``i``, or anywhere on it when None."""
        cols: int | slice = slice(None) if gpu is None else gpu
        total = self.gpu_milli_total[i, cols]
        busy_mig = ~self.mig_free & (self.mig_node == i)
        if gpu is not None:
            busy_mig &= self.mig_gpu == gpu
        elif self.cpu_free[i] != self.cpu_total[i] or self.mem_free[i] != self.mem_total[i]:
            return False
        return (
            np.array_equal(self.gpu_milli_free[i, cols], total)
            and np.array_equal(
                self.gpu_mem_free[i, cols], np.where(total > 0, self.gpu_mem_total[i, cols], 0)
            )
            and not busy_mig.any()
        )

    def _retire_mig(self, which: BoolArray) -> None:
        """Instances that no longer exist: no profile matches them, nothing holds them
        (``~mig_free`` counts what is in use) and ``allocate`` refuses them."""
        self.mig_profile[which] = -1
        self.mig_memory[which] = 0
        self.mig_free[which] = True

    def _renumber(self, models: list[str], profiles: list[str]) -> None:
        """Number GPU models and MIG profiles by ``models`` and ``profiles`` (sorted
        supersets of the current lists), keeping -1 for no model or profile."""
        for ids, old, new in (
            (self.gpu_model, self.models, models),
            (self.mig_profile, self.mig_profiles, profiles),
        ):
            mapping = np.array([*(new.index(m) for m in old), -1], dtype=np.int64)
            ids[...] = mapping[ids]
        if models != self.models:
            self.model_masks.clear()
        self.models, self.mig_profiles = list(models), list(profiles)


def _pad(a: npt.NDArray[np.generic], width: int, value: int) -> npt.NDArray[np.generic]:
    """``a`` with columns of ``value`` added up to ``width``."""
    padded: npt.NDArray[np.generic] = np.pad(
        a, ((0, 0), (0, width - a.shape[1])), constant_values=value
    )
    return padded
