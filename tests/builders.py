"""Fluent builders for nodes, requests, cluster states and placers in tests.

    state = cluster(node("a").gpus(8).used(6), node("b").gpus(4))
    request = job().gpus(4).gang(2).build()
    placer(BestFit()).place(state, request)

A node builder also records what is already running on the node (``used``,
``share``, ``cpu_used``, ``mig_used``); ``cluster`` applies that usage through
``ClusterState.allocate``, so a built state is always one the scheduler could
have reached. Quantities are the core's integers: milli-CPU, MiB, milli-GPU.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Self

import numpy as np

from gpufleet.core import mig as migmod
from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.model import GPU, MILLI, Node, Request
from gpufleet.core.placement import Filter, PlacementProfile, Placer, Scorer
from gpufleet.core.state import Assignment, ClusterState

DEFAULT_MODEL = "A100-80GB"
DEFAULT_CPU_MILLI = 64_000
DEFAULT_MEMORY_MIB = 512 * 1024


class NodeBuilder:
    """A node and the load already on it. Defaults: 64 CPUs, 512 GiB, no GPUs."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cpu = DEFAULT_CPU_MILLI
        self._memory = DEFAULT_MEMORY_MIB
        self._count = 0
        self._model = DEFAULT_MODEL
        self._gpu_memory: int | None = None
        self._mig: dict[int | None, str] = {}
        self._nvlink: tuple[int, ...] = ()
        self._pool = "default"
        self._switch = ""
        self._labels: dict[str, str] = {}
        self._healthy = True
        self._used = 0
        self._shares: list[tuple[int, int, int]] = []
        self._cpu_used = 0
        self._memory_used = 0
        self._mig_used: list[tuple[str, int]] = []

    # -- shape ---------------------------------------------------------------
    def gpus(self, count: int) -> Self:
        self._count = count
        return self

    def model(self, name: str) -> Self:
        """GPU model of every GPU; its memory comes from the catalog."""
        self._model = name
        return self

    def gpu_memory(self, mib: int) -> Self:
        """Override the catalog's GPU memory (for models it does not know)."""
        self._gpu_memory = mib
        return self

    def cpu(self, milli: int) -> Self:
        self._cpu = milli
        return self

    def memory(self, mib: int) -> Self:
        self._memory = mib
        return self

    def mig(self, layout: str, gpu: int | None = None) -> Self:
        """MIG layout such as ``"3g.40gb@0,3g.40gb@4"`` on one GPU, or on all by default."""
        self._mig[gpu] = layout
        return self

    def nvlink(self, *domains: int) -> Self:
        """NVLink domain of each GPU, in index order."""
        self._nvlink = domains
        return self

    def pool(self, name: str) -> Self:
        self._pool = name
        return self

    def switch(self, name: str) -> Self:
        self._switch = name
        return self

    def label(self, key: str, value: str) -> Self:
        self._labels[key] = value
        return self

    def unhealthy(self) -> Self:
        self._healthy = False
        return self

    # -- load already running ------------------------------------------------
    def used(self, gpus: int) -> Self:
        """The first ``gpus`` GPUs are wholly taken."""
        self._used = gpus
        return self

    def share(self, gpu: int, milli: int, memory_mib: int = 0) -> Self:
        """A fractional task holds ``milli`` (and ``memory_mib``) of GPU ``gpu``."""
        self._shares.append((gpu, milli, memory_mib))
        return self

    def cpu_used(self, milli: int) -> Self:
        self._cpu_used = milli
        return self

    def memory_used(self, mib: int) -> Self:
        self._memory_used = mib
        return self

    def mig_used(self, profile: str, count: int = 1) -> Self:
        """The first ``count`` instances of ``profile`` (in state order) are taken."""
        self._mig_used.append((profile, count))
        return self

    # -- results -------------------------------------------------------------
    def build(self) -> Node:
        memory = self._gpu_memory or gpu_memory_mib(self._model)
        gpus = tuple(
            GPU(
                index=i,
                model=self._model,
                memory_mib=memory,
                nvlink_domain=self._nvlink[i] if self._nvlink else 0,
                mig=self._layout(i),
            )
            for i in range(self._count)
        )
        return Node(
            name=self._name,
            cpu_milli=self._cpu,
            memory_mib=self._memory,
            gpus=gpus,
            pool=self._pool,
            switch=self._switch,
            labels=MappingProxyType(dict(self._labels)),
        )

    def _layout(self, gpu: int) -> tuple[tuple[str, int], ...] | None:
        text = self._mig.get(gpu, self._mig.get(None))
        if text is None:
            return None
        return tuple((i.profile, i.start) for i in migmod.parse_layout(self._model, text))

    def __repr__(self) -> str:
        """The builder chain that makes this node, so failing examples read as code."""
        calls = [f"node({self._name!r})", f"model({self._model!r})", f"gpus({self._count})"]
        calls += [f"cpu({self._cpu})", f"memory({self._memory})"]
        if self._gpu_memory is not None:
            calls.append(f"gpu_memory({self._gpu_memory})")
        calls += [f"mig({text!r}, gpu={gpu})" for gpu, text in self._mig.items()]
        if self._nvlink:
            calls.append(f"nvlink({', '.join(map(str, self._nvlink))})")
        if self._pool != "default":
            calls.append(f"pool({self._pool!r})")
        if self._switch:
            calls.append(f"switch({self._switch!r})")
        calls += [f"label({k!r}, {v!r})" for k, v in self._labels.items()]
        if not self._healthy:
            calls.append("unhealthy()")
        if self._used:
            calls.append(f"used({self._used})")
        calls += [f"share({g}, {m}, {mem})" for g, m, mem in self._shares]
        if self._cpu_used:
            calls.append(f"cpu_used({self._cpu_used})")
        if self._memory_used:
            calls.append(f"memory_used({self._memory_used})")
        calls += [f"mig_used({p!r}, {c})" for p, c in self._mig_used]
        return ".".join(calls)

    @property
    def healthy(self) -> bool:
        return self._healthy

    def load(self, state: ClusterState, index: int) -> list[Assignment]:
        """The assignments that put this node's recorded load on node ``index`` of ``state``."""
        out: list[Assignment] = []
        if self._used or self._cpu_used or self._memory_used:
            whole = tuple(range(self._used))
            out.append(
                Assignment(
                    node=index,
                    gpus=whole,
                    gpu_milli=MILLI if whole else 0,
                    cpu_milli=self._cpu_used,
                    memory_mib=self._memory_used,
                )
            )
        out += [
            Assignment(node=index, gpus=(gpu,), gpu_milli=milli, gpu_memory_mib=mem)
            for gpu, milli, mem in self._shares
        ]
        for profile, count in self._mig_used:
            pid = state.mig_profiles.index(profile)
            free = (state.mig_node == index) & (state.mig_profile == pid) & state.mig_free
            taken = np.flatnonzero(free)[:count]
            out.append(Assignment(node=index, mig=tuple(int(k) for k in taken)))
        return out


class JobBuilder:
    """One task's request; ``build()`` validates it like any other Request."""

    def __init__(self) -> None:
        self._cpu = 0
        self._memory = 0
        self._gpus = 0
        self._milli = 0
        self._gpu_memory = 0
        self._mig = ""
        self._mig_count = 0
        self._nodes = 1
        self._models: frozenset[str] = frozenset()
        self._min_gpu_memory = 0

    def cpu(self, milli: int) -> Self:
        self._cpu = milli
        return self

    def memory(self, mib: int) -> Self:
        self._memory = mib
        return self

    def gpus(self, count: int) -> Self:
        self._gpus = count
        return self

    def fraction(self, milli: int, memory_mib: int = 0) -> Self:
        """A share of one GPU: ``milli`` milli-GPU and optionally ``memory_mib`` of its memory."""
        self._milli = milli
        self._gpu_memory = memory_mib
        return self

    def mig(self, profile: str, count: int = 1) -> Self:
        self._mig = profile
        self._mig_count = count
        return self

    def gang(self, nodes: int) -> Self:
        self._nodes = nodes
        return self

    def models(self, *names: str) -> Self:
        self._models = frozenset(names)
        return self

    def min_gpu_memory(self, mib: int) -> Self:
        self._min_gpu_memory = mib
        return self

    def __repr__(self) -> str:
        calls = ["job()"]
        for name, value, default in (
            ("cpu", self._cpu, 0),
            ("memory", self._memory, 0),
            ("gpus", self._gpus, 0),
            ("min_gpu_memory", self._min_gpu_memory, 0),
            ("gang", self._nodes, 1),
        ):
            if value != default:
                calls.append(f"{name}({value})")
        if self._milli or self._gpu_memory:
            calls.append(f"fraction({self._milli}, {self._gpu_memory})")
        if self._mig or self._mig_count:
            calls.append(f"mig({self._mig!r}, {self._mig_count})")
        if self._models:
            calls.append(f"models({', '.join(map(repr, sorted(self._models)))})")
        return ".".join(calls)

    def build(self) -> Request:
        return Request(
            cpu_milli=self._cpu,
            memory_mib=self._memory,
            gpus=self._gpus,
            gpu_milli=self._milli,
            gpu_memory_mib=self._gpu_memory,
            mig_profile=self._mig,
            mig_count=self._mig_count,
            gpu_models=self._models,
            min_gpu_memory_mib=self._min_gpu_memory,
            nodes=self._nodes,
        )


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def job() -> JobBuilder:
    return JobBuilder()


def cluster(*nodes: NodeBuilder) -> ClusterState:
    """A state over the built nodes, with each node's recorded load allocated."""
    state = ClusterState([b.build() for b in nodes])
    for i, b in enumerate(nodes):
        for a in b.load(state, i):
            state.allocate(a)
        state.healthy[i] = b.healthy
    return state


def placer(*scorers: Scorer, filters: tuple[Filter, ...] = ()) -> Placer:
    """A placer whose profile weighs every scorer 1.0."""
    return Placer(PlacementProfile("test", [(s, 1.0) for s in scorers], filters))
