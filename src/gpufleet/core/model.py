"""The cluster's vocabulary: GPUs, nodes, and the shape of what a job asks for.

These are plain immutable values. Quantities are integers (milli-CPU, MiB,
milli-GPU) so every computation on them reproduces exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

MILLI = 1000
"""One whole GPU in milli-GPU."""

MAX_AMOUNT = 2**40
"""The largest amount or count a spec may give (over 10^9 cores, an exbibyte): sums
over a cluster's nodes must stay within the 64-bit integers the core computes in."""

MAX_GPUS_PER_NODE = 1024
"""The most GPUs one node may hold: the state keeps a row of every node's GPUs."""


class InvalidSpec(ValueError):
    """A node, GPU or request that cannot exist. ``field`` names the culprit."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.reason = message


def _positive(name: str, value: int, *, allow_zero: bool = True) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise InvalidSpec(name, f"must be {bound}, got {value}")
    if value > MAX_AMOUNT:
        raise InvalidSpec(name, f"must be at most {MAX_AMOUNT}, got {value}")


@dataclass(frozen=True, slots=True)
class GPU:
    """One physical GPU.

    ``nvlink_domain`` groups GPUs that reach each other over NVLink (an
    NVSwitch board is one domain; pairwise bridges make small domains).
    ``mig`` is the MIG layout currently configured, as (profile, start slot)
    pairs (see ``core.mig``), or None when MIG is off.
    """

    index: int
    model: str
    memory_mib: int
    uuid: str = ""
    numa: int = 0
    nvlink_domain: int = 0
    mig: tuple[tuple[str, int], ...] | None = None

    def __post_init__(self) -> None:
        _positive("gpu.index", self.index)
        _positive("gpu.memory_mib", self.memory_mib, allow_zero=False)
        _positive("gpu.numa", self.numa)
        _positive("gpu.nvlink_domain", self.nvlink_domain)
        if not self.model:
            raise InvalidSpec("gpu.model", "must not be empty")


@dataclass(frozen=True, slots=True)
class Node:
    """A host: its CPU and memory capacity and its GPUs.

    ``switch`` names the network switch group the node hangs off, so that gang
    placement can keep a job under one switch.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GPU, ...] = ()
    pool: str = "default"
    switch: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidSpec("node.name", "must not be empty")
        _positive("node.cpu_milli", self.cpu_milli)
        _positive("node.memory_mib", self.memory_mib)
        if len(self.gpus) > MAX_GPUS_PER_NODE:
            raise InvalidSpec("node.gpus", f"at most {MAX_GPUS_PER_NODE}, got {len(self.gpus)}")
        for i, gpu in enumerate(self.gpus):
            if gpu.index != i:
                raise InvalidSpec("node.gpus", f"GPU at position {i} has index {gpu.index}")

    @property
    def gpu_model(self) -> str:
        """The model of the node's GPUs ('' for a CPU-only node)."""
        return self.gpus[0].model if self.gpus else ""


@dataclass(frozen=True, slots=True)
class Request:
    """What one task (one node's share of a job) needs.

    Exactly one GPU shape applies:

    * whole GPUs: ``gpus`` > 0 and ``gpu_milli`` == 0;
    * a fraction of one shared GPU: ``gpu_milli`` in 1..999 (``gpus`` is 0),
      optionally with ``gpu_memory_mib`` of that GPU's memory;
    * MIG: ``mig_profile`` such as ``"1g.10gb"`` with ``mig_count`` instances;
    * none: a CPU-only task.

    ``gpu_models`` restricts the GPU models allowed (empty means any), and
    ``min_gpu_memory_mib`` the smallest GPU memory accepted. A gang of
    ``nodes`` > 1 needs this request on each of that many distinct nodes.
    """

    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    mig_profile: str = ""
    mig_count: int = 0
    gpu_models: frozenset[str] = frozenset()
    min_gpu_memory_mib: int = 0
    nodes: int = 1

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "memory_mib", "gpus", "gpu_memory_mib", "min_gpu_memory_mib"):
            _positive(f"request.{name}", getattr(self, name))
        _positive("request.nodes", self.nodes, allow_zero=False)
        if self.gpu_milli and not 0 < self.gpu_milli < MILLI:
            raise InvalidSpec(
                "request.gpu_milli", f"a shared GPU fraction is 1..999 milli, got {self.gpu_milli}"
            )
        if self.gpu_milli and self.gpus:
            raise InvalidSpec("request.gpu_milli", "ask for whole GPUs or one fraction, not both")
        if self.mig_profile:
            _positive("request.mig_count", self.mig_count, allow_zero=False)
            if self.gpus or self.gpu_milli:
                raise InvalidSpec("request.mig_profile", "a MIG request asks for no other GPUs")
        elif self.mig_count:
            raise InvalidSpec("request.mig_count", "given without request.mig_profile")
        if self.gpu_memory_mib and not self.gpu_milli:
            raise InvalidSpec("request.gpu_memory_mib", "only a fractional request shares memory")
        if not (self.cpu_milli or self.gpus or self.gpu_milli or self.mig_profile):
            raise InvalidSpec("request", "asks for nothing: give CPUs, GPUs or a MIG profile")

    @property
    def gpu_count(self) -> int:
        """How many distinct GPUs the task touches (0 for CPU-only and MIG)."""
        if self.gpu_milli:
            return 1
        return self.gpus

    @property
    def milli_per_gpu(self) -> int:
        """Milli-GPU taken on each GPU touched."""
        return self.gpu_milli or (MILLI if self.gpus else 0)

    @property
    def total_gpu_milli(self) -> int:
        """Milli-GPU the whole job takes, over all its nodes (MIG slices excluded)."""
        return self.gpu_count * self.milli_per_gpu * self.nodes
