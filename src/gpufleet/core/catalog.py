"""Known GPU models and their memory.

Traces and inventory files name GPUs by model; an unknown name is a typo far
more often than a new GPU, so it is rejected rather than guessed. ``G1``..``G3``
are the anonymised models of Alibaba's openb trace, sized as the trace's
documentation describes them (sizes matter only to memory constraints).
"""

from __future__ import annotations

from gpufleet.core.model import InvalidSpec

GPU_MEMORY_MIB: dict[str, int] = {
    "P100": 16 * 1024,
    "T4": 16 * 1024,
    "V100M16": 16 * 1024,
    "V100M32": 32 * 1024,
    "A10": 24 * 1024,
    "G1": 16 * 1024,
    "G2": 32 * 1024,
    "G3": 32 * 1024,
    "L4": 24 * 1024,
    "L40S": 48 * 1024,
    "A100-40GB": 40 * 1024,
    "A100-80GB": 80 * 1024,
    "H100-80GB": 80 * 1024,
    "H200-141GB": 141 * 1024,
}


def gpu_memory_mib(model: str, field: str = "model") -> int:
    """Memory of a known model; InvalidSpec naming ``field`` otherwise."""
    try:
        return GPU_MEMORY_MIB[model]
    except KeyError:
        known = ", ".join(sorted(GPU_MEMORY_MIB))
        raise InvalidSpec(field, f"unknown GPU model {model!r} (known: {known})") from None
