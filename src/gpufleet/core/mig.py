"""MIG (Multi-Instance GPU) profiles and the rules a layout must obey.

A MIG-capable GPU has 7 compute slices and 8 memory slots. Each GPU-instance
profile occupies a fixed number of contiguous memory slots and may only start
at certain slots; instances may not overlap and together use at most the 7
compute slices. The numbers follow NVIDIA's MIG user guide for each model.
Only the tables are data: re-partitioning later changes a GPU's layout, never
these rules.

Not every layout the slot rules allow is supported: the user guide lists the
combinations of instances the hardware supports (``SUPPORTED``), and a layout
must be part of one of them. The slot rules alone would accept 4g + 3g, which
no listed configuration holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.core.model import InvalidSpec

MEMORY_SLOTS = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slots: int
    memory_mib: int
    starts: tuple[int, ...]


class MigInstance(NamedTuple):
    """One configured GPU instance: its profile and first memory slot."""

    profile: str
    start: int


def _table(gb: tuple[int, int, int, int, int, int]) -> dict[str, MigProfile]:
    """The six profiles every supported model offers, with its memory sizes.

    ``gb`` lists the nominal sizes in GB of 1g (one slot), 1g (two slots), 2g,
    3g, 4g and 7g, which is all that differs between models.
    """
    shapes = (  # compute slices, memory slots, valid starts
        (1, 1, (0, 1, 2, 3, 4, 5, 6)),
        (1, 2, (0, 2, 4, 6)),
        (2, 2, (0, 2, 4)),
        (3, 4, (0, 4)),
        (4, 4, (0,)),
        (7, 8, (0,)),
    )
    table = {}
    for size, (compute, slots, starts) in zip(gb, shapes, strict=True):
        name = f"{compute}g.{size}gb"
        table[name] = MigProfile(name, compute, slots, size * 1024, starts)
    return table


PROFILES: dict[str, dict[str, MigProfile]] = {
    "A100-40GB": _table((5, 10, 10, 20, 20, 40)),
    "A100-80GB": _table((10, 20, 20, 40, 40, 80)),
    "H100-80GB": _table((10, 20, 20, 40, 40, 80)),
    "H200-141GB": _table((18, 35, 35, 71, 71, 141)),
}


# NVIDIA MIG user guide, "A100 supported MIG configurations" (H100 and H200 list the
# same): every combination of GPU instances the hardware supports, each instance as
# compute slices @ first memory slot. A 1g instance with two memory slots (1g.10gb on
# A100-40GB) stands where a one-slot 1g starts; the slot rules keep its second slot free.
SUPPORTED: tuple[frozenset[tuple[int, int]], ...] = tuple(
    frozenset((int(c), int(s)) for c, s in (part.split("@") for part in config.split()))
    for config in (
        "7@0",
        "4@0 2@4 1@6",
        "4@0 1@4 1@5 1@6",
        "3@0 3@4",
        "3@0 2@4 1@6",
        "3@0 1@4 1@5 1@6",
        "2@0 2@2 3@4",
        "2@0 1@2 1@3 3@4",
        "1@0 1@1 2@2 3@4",
        "1@0 1@1 1@2 1@3 3@4",
        "2@0 2@2 2@4 1@6",
        "2@0 2@2 1@4 1@5 1@6",
        "2@0 1@2 1@3 2@4 1@6",
        "2@0 1@2 1@3 1@4 1@5 1@6",
        "1@0 1@1 2@2 2@4 1@6",
        "1@0 1@1 2@2 1@4 1@5 1@6",
        "1@0 1@1 1@2 1@3 2@4 1@6",
        "1@0 1@1 1@2 1@3 1@4 1@5 1@6",
    )
)


PROFILE_NAMES = frozenset(name for table in PROFILES.values() for name in table)
"""Every profile that some GPU model offers."""


def unknown_profile(name: str) -> str | None:
    """Why ``name`` is no profile of any model, or None when some model has it."""
    if name in PROFILE_NAMES:
        return None
    return f"unknown MIG profile {name!r} (known: {', '.join(sorted(PROFILE_NAMES))})"


def profile(model: str, name: str) -> MigProfile:
    """Look up a profile, raising InvalidSpec naming what is unknown."""
    table = PROFILES.get(model)
    if table is None:
        known = ", ".join(sorted(PROFILES))
        raise InvalidSpec("gpu.model", f"{model!r} does not support MIG (known: {known})")
    found = table.get(name)
    if found is None:
        raise InvalidSpec(
            "mig_profile", f"{name!r} is not a {model} profile (known: {', '.join(table)})"
        )
    return found


def validate_layout(model: str, layout: tuple[MigInstance, ...]) -> None:
    """Raise InvalidSpec unless the hardware could hold exactly this layout."""
    taken = [False] * MEMORY_SLOTS
    compute = 0
    for inst in layout:
        prof = profile(model, inst.profile)
        if inst.start not in prof.starts:
            raise InvalidSpec(
                "gpu.mig",
                f"{inst.profile} cannot start at slot {inst.start} (valid: {prof.starts})",
            )
        for slot in range(inst.start, inst.start + prof.memory_slots):
            if taken[slot]:
                raise InvalidSpec(
                    "gpu.mig", f"{inst.profile}@{inst.start} overlaps another instance"
                )
            taken[slot] = True
        compute += prof.compute_slices
    if compute > COMPUTE_SLICES:
        raise InvalidSpec(
            "gpu.mig", f"layout uses {compute} compute slices, the GPU has {COMPUTE_SLICES}"
        )
    used = {(profile(model, inst.profile).compute_slices, inst.start) for inst in layout}
    if not any(used <= config for config in SUPPORTED):
        text = ",".join(f"{inst.profile}@{inst.start}" for inst in layout)
        raise InvalidSpec(
            "gpu.mig",
            f"{text} is not part of any MIG configuration NVIDIA supports on {model}"
            " (a 4g instance leaves room for 2g and 1g instances only)",
        )


def parse_layout(model: str, text: str) -> tuple[MigInstance, ...]:
    """Parse ``"3g.40gb@0,2g.20gb@4,1g.10gb@6"`` and validate it.

    An instance without ``@start`` takes the lowest valid start still free,
    the same choice ``nvidia-smi mig -cgi`` makes.
    """
    layout: list[MigInstance] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, start_text = (x.strip() for x in part.partition("@"))
        prof = profile(model, name)
        if start_text:
            try:
                start = int(start_text)
            except ValueError:
                raise InvalidSpec("gpu.mig", f"start {start_text!r} is not a number") from None
        else:
            free = [s for s in prof.starts if _fits(model, (*layout, MigInstance(name, s)))]
            if not free:
                # Blame an invalid instance before it, not the one that found no room.
                validate_layout(model, tuple(layout))
                taken = {
                    slot
                    for inst in layout
                    for slot in range(
                        inst.start, inst.start + profile(model, inst.profile).memory_slots
                    )
                }
                for s in prof.starts:
                    if taken.isdisjoint(range(s, s + prof.memory_slots)):
                        # Room in memory, but no supported configuration holds the mix.
                        validate_layout(model, (*layout, MigInstance(name, s)))
                raise InvalidSpec(
                    "gpu.mig", f"no room left for {name} (its starts {prof.starts} are all taken)"
                )
            start = free[0]
        layout.append(MigInstance(name, start))
    result = tuple(layout)
    validate_layout(model, result)
    return result


def _fits(model: str, layout: tuple[MigInstance, ...]) -> bool:
    try:
        validate_layout(model, layout)
    except InvalidSpec:
        return False
    return True
