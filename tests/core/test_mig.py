"""MIG: the profile tables, layout rules, parsing, and placement of MIG requests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import cluster, job, node, placer
from gpufleet.core import mig
from gpufleet.core.mig import MigInstance
from gpufleet.core.model import GPU, InvalidSpec, Node
from gpufleet.core.state import ClusterState
from gpufleet.policies.placement.fit import FirstFit

GIB = 1024

# NVIDIA MIG user guide, "Supported MIG profiles": every model offers the same
# six shapes (compute slices, memory slots, valid first memory slots); only the
# memory per instance differs.
SHAPES = {
    "1g": (1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "1g-double": (1, 2, (0, 2, 4, 6)),
    "2g": (2, 2, (0, 2, 4)),
    "3g": (3, 4, (0, 4)),
    "4g": (4, 4, (0,)),
    "7g": (7, 8, (0,)),
}
PROFILE_TABLE = [
    # model, profile, shape, memory in GiB
    ("A100-40GB", "1g.5gb", "1g", 5),
    ("A100-40GB", "1g.10gb", "1g-double", 10),
    ("A100-40GB", "2g.10gb", "2g", 10),
    ("A100-40GB", "3g.20gb", "3g", 20),
    ("A100-40GB", "4g.20gb", "4g", 20),
    ("A100-40GB", "7g.40gb", "7g", 40),
    ("A100-80GB", "1g.10gb", "1g", 10),
    ("A100-80GB", "1g.20gb", "1g-double", 20),
    ("A100-80GB", "2g.20gb", "2g", 20),
    ("A100-80GB", "3g.40gb", "3g", 40),
    ("A100-80GB", "4g.40gb", "4g", 40),
    ("A100-80GB", "7g.80gb", "7g", 80),
    ("H100-80GB", "1g.10gb", "1g", 10),
    ("H100-80GB", "1g.20gb", "1g-double", 20),
    ("H100-80GB", "2g.20gb", "2g", 20),
    ("H100-80GB", "3g.40gb", "3g", 40),
    ("H100-80GB", "4g.40gb", "4g", 40),
    ("H100-80GB", "7g.80gb", "7g", 80),
    ("H200-141GB", "1g.18gb", "1g", 18),
    ("H200-141GB", "1g.35gb", "1g-double", 35),
    ("H200-141GB", "2g.35gb", "2g", 35),
    ("H200-141GB", "3g.71gb", "3g", 71),
    ("H200-141GB", "4g.71gb", "4g", 71),
    ("H200-141GB", "7g.141gb", "7g", 141),
]


@pytest.mark.parametrize(("model", "name", "shape", "gib"), PROFILE_TABLE)
def test_profile_table(model: str, name: str, shape: str, gib: int) -> None:
    p = mig.profile(model, name)
    assert (p.compute_slices, p.memory_slots, p.starts) == SHAPES[shape]
    assert p.memory_mib == gib * GIB
    assert p.name == name


def test_tables_cover_exactly_the_four_models_with_six_profiles_each() -> None:
    listed = {(m, n) for m, n, _, _ in PROFILE_TABLE}
    assert {(m, n) for m, table in mig.PROFILES.items() for n in table} == listed


@pytest.mark.parametrize(
    ("model", "layout"),
    [
        # 7 x 1g: compute 7 of 7, memory slots 0..6 (slot 7 stays unused).
        ("A100-40GB", "1g.5gb@0,1g.5gb@1,1g.5gb@2,1g.5gb@3,1g.5gb@4,1g.5gb@5,1g.5gb@6"),
        # 3g + 3g: slots 0-3 and 4-7, compute 6.
        ("A100-80GB", "3g.40gb@0,3g.40gb@4"),
        ("H100-80GB", "7g.80gb@0"),
        # 4g + 2g + 1g: slots 0-3, 4-5, 6; compute 7.
        ("A100-40GB", "4g.20gb@0,2g.10gb@4,1g.5gb@6"),
        # 2g x 3 + 1g: slots 0-1, 2-3, 4-5, 6; compute 7.
        ("H200-141GB", "2g.35gb@0,2g.35gb@2,2g.35gb@4,1g.18gb@6"),
        # 4 double-memory 1g instances fill all 8 slots with only 4 compute slices.
        ("H100-80GB", "1g.20gb@0,1g.20gb@2,1g.20gb@4,1g.20gb@6"),
        # Order does not matter: 3g@4, 2g@0, 1g@2, 1g@3.
        ("H200-141GB", "3g.71gb@4,2g.35gb@0,1g.18gb@2,1g.18gb@3"),
        # MIG on with no instances yet.
        ("A100-80GB", ""),
    ],
)
def test_valid_layouts_are_accepted(model: str, layout: str) -> None:
    parsed = mig.parse_layout(model, layout)
    mig.validate_layout(model, parsed)
    assert len(parsed) == len([p for p in layout.split(",") if p])


@pytest.mark.parametrize(
    ("model", "layout", "field", "message"),
    [
        # 2g@2 takes slots 2-3, inside 3g@0's slots 0-3.
        ("A100-80GB", "3g.40gb@0,2g.20gb@2", "gpu.mig", "2g.20gb@2 overlaps another instance"),
        ("A100-80GB", "1g.10gb@3,1g.10gb@3", "gpu.mig", "1g.10gb@3 overlaps another instance"),
        # 7g takes every slot, so 7g + 1g (8 compute slices) has no room.
        ("H100-80GB", "7g.80gb@0,1g.10gb@6", "gpu.mig", "1g.10gb@6 overlaps another instance"),
        ("A100-80GB", "3g.40gb@2", "gpu.mig", "3g.40gb cannot start at slot 2 (valid: (0, 4))"),
        ("A100-80GB", "4g.40gb@0,4g.40gb@4", "gpu.mig", "4g.40gb cannot start at slot 4"),
        ("A100-40GB", "1g.5gb@7", "gpu.mig", "1g.5gb cannot start at slot 7"),
        ("A100-40GB", "2g.10gb@6", "gpu.mig", "2g.10gb cannot start at slot 6"),
        ("A100-80GB", "3g.40gb@-1", "gpu.mig", "cannot start at slot -1"),
        ("A100-80GB", "3g.40gb@x", "gpu.mig", "start 'x' is not a number"),
        # 4g + 4g would be 8 compute slices: the second finds no start left.
        ("A100-80GB", "4g.40gb,4g.40gb", "gpu.mig", "no room left for 4g.40gb"),
        # 8 x 1g would be 8 compute slices: slot 7 is no 1g start.
        ("A100-40GB", ",".join(["1g.5gb"] * 8), "gpu.mig", "no room left for 1g.5gb"),
        ("A100-80GB", "5g.50gb@0", "mig_profile", "'5g.50gb' is not a A100-80GB profile"),
        # A 40 GB profile name is not an 80 GB one.
        ("A100-80GB", "1g.5gb@0", "mig_profile", "known: 1g.10gb, 1g.20gb"),
        ("T4", "1g.10gb@0", "gpu.model", "'T4' does not support MIG"),
        # 4g + 3g fits the slots (0-3 and 4-7, 7 compute slices) but is none of
        # NVIDIA's supported configurations, on any model.
        (
            "A100-40GB",
            "4g.20gb@0,3g.20gb@4",
            "gpu.mig",
            "4g.20gb@0,3g.20gb@4 is not part of any MIG configuration NVIDIA supports on A100-40GB",
        ),
        ("A100-80GB", "4g.40gb@0,3g.40gb@4", "gpu.mig", "not part of any MIG configuration"),
        ("H100-80GB", "3g.40gb@4,4g.40gb@0", "gpu.mig", "not part of any MIG configuration"),
        ("H200-141GB", "4g.71gb,3g.71gb", "gpu.mig", "not part of any MIG configuration"),
        # The auto start finds slot 0 free, but 4g beside 3g is still unsupported.
        ("A100-80GB", "3g.40gb@4,4g.40gb", "gpu.mig", "not part of any MIG configuration"),
    ],
)
def test_forbidden_layouts_are_rejected(model: str, layout: str, field: str, message: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        mig.parse_layout(model, layout)
    assert err.value.field == field
    assert message in err.value.reason
    assert "\n" not in str(err.value)


def test_more_than_seven_compute_slices_never_validates() -> None:
    # The compute budget is enforced by the memory placement table: every
    # placement of 8 compute slices overlaps. 7g@0 + 1g@... at every start.
    for start in mig.profile("A100-80GB", "1g.10gb").starts:
        layout = (MigInstance("7g.80gb", 0), MigInstance("1g.10gb", start))
        with pytest.raises(InvalidSpec, match="overlaps"):
            mig.validate_layout("A100-80GB", layout)


def _one_slot_profiles(model: str) -> dict[int, str]:
    """The profile of each compute size whose memory slots are the geometry's own."""
    return {
        p.compute_slices: p.name
        for p in mig.PROFILES[model].values()
        if p.memory_slots != 2 or p.compute_slices == 2
    }


def test_the_supported_list_is_nvidias_eighteen_configurations() -> None:
    # The user guide's figure: 18 rows, each using at most 7 compute slices, all
    # distinct, and none holding a 4g beside a 3g.
    assert len(set(mig.SUPPORTED)) == 18
    for config in mig.SUPPORTED:
        assert sum(c for c, _ in config) <= mig.COMPUTE_SLICES
        assert not {4, 3} <= {c for c, _ in config}


@pytest.mark.parametrize("model", sorted(mig.PROFILES))
def test_every_part_of_a_supported_configuration_is_accepted(model: str) -> None:
    names = _one_slot_profiles(model)
    for config in mig.SUPPORTED:
        insts = [MigInstance(names[c], s) for c, s in sorted(config)]
        for mask in range(1 << len(insts)):
            part = tuple(i for k, i in enumerate(insts) if mask >> k & 1)
            mig.validate_layout(model, part)


def test_an_invalid_instance_is_blamed_before_a_later_auto_start() -> None:
    # 3g@1 is the culprit; the 1g after it must not be reported as "no room".
    with pytest.raises(InvalidSpec, match=r"3g\.40gb cannot start at slot 1"):
        mig.parse_layout("A100-80GB", "3g.40gb@1,1g.10gb")


@pytest.mark.parametrize(
    ("text", "starts"),
    [
        ("3g.40gb,3g.40gb", (0, 4)),
        (",".join(["1g.10gb"] * 7), (0, 1, 2, 3, 4, 5, 6)),
        ("4g.40gb,2g.20gb,1g.10gb", (0, 4, 6)),  # 4g takes 0-3, 2g's first free start is 4
        ("1g.20gb,1g.20gb,1g.20gb,1g.20gb", (0, 2, 4, 6)),
        ("2g.20gb@2,2g.20gb", (2, 0)),  # explicit starts are honoured, auto takes the lowest
        ("1g.10gb,3g.40gb", (0, 4)),  # 3g@0 would overlap 1g@0
        (" 3g.40gb @ 0 , 3g.40gb@4 ", (0, 4)),  # whitespace around names and starts
    ],
)
def test_parse_layout_auto_start(text: str, starts: tuple[int, ...]) -> None:
    assert tuple(i.start for i in mig.parse_layout("A100-80GB", text)) == starts


# -- MIG in the cluster state and the placer ---------------------------------


def test_state_lists_each_instance_and_gives_mig_gpus_no_milli() -> None:
    state = cluster(
        node("m").gpus(2).mig("3g.40gb@0,2g.20gb@4,1g.10gb@6", gpu=0),
    )
    # Profiles are numbered in sorted order: 1g.10gb=0, 2g.20gb=1, 3g.40gb=2.
    assert state.mig_profiles == ["1g.10gb", "2g.20gb", "3g.40gb"]
    assert state.mig_profile.tolist() == [2, 1, 0]
    assert state.mig_start.tolist() == [0, 4, 6]
    assert state.mig_memory.tolist() == [40 * GIB, 20 * GIB, 10 * GIB]
    assert state.mig_gpu.tolist() == [0, 0, 0]
    assert state.mig_free.all()
    # GPU 0 is partitioned: no milli-GPU and no shareable memory; GPU 1 is whole.
    assert state.gpu_milli_free.tolist() == [[0, 1000]]
    assert state.gpu_mem_free.tolist() == [[0, 80 * GIB]]


@pytest.mark.parametrize(
    ("gpu", "field"),
    [
        # 3g cannot start at slot 2.
        (GPU(0, "A100-80GB", 80 * GIB, mig=(("3g.40gb", 2),)), "gpu.mig"),
        (GPU(0, "T4", 16 * GIB, mig=(("1g.10gb", 0),)), "gpu.model"),
        (GPU(0, "A100-80GB", 80 * GIB, mig=(("9g.90gb", 0),)), "mig_profile"),
    ],
)
def test_state_rejects_impossible_layouts(gpu: GPU, field: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        ClusterState([Node("m", 1000, 1024, gpus=(gpu,))])
    assert err.value.field == field


def test_mig_instances_are_used_once_and_freed_on_release() -> None:
    state = cluster(node("m").gpus(1).mig(",".join(["1g.10gb"] * 7)))
    p = placer(FirstFit())
    two = job().mig("1g.10gb", 2).build()
    first = p.place(state, two)
    second = p.place(state, two)
    third = p.place(state, two)
    assert first and second and third
    # Instances in state order: 0-1, then 2-3, then 4-5; none handed out twice.
    assert [a.mig for a in first + second + third] == [(0, 1), (2, 3), (4, 5)]
    assert state.mig_free.tolist() == [False] * 6 + [True]
    assert p.place(state, two) is None  # 1 instance left, 2 asked
    state.release(second[0])
    assert state.mig_free.tolist() == [False, False, True, True, False, False, True]
    again = p.place(state, two)
    assert again and again[0].mig == (2, 3)  # the freed pair, lowest first


def test_mig_request_goes_where_enough_instances_are_free() -> None:
    state = cluster(
        # a: one 3g free (the other taken); b: both free.
        node("a").gpus(1).mig("3g.40gb@0,3g.40gb@4").mig_used("3g.40gb"),
        node("b").gpus(1).mig("3g.40gb@0,3g.40gb@4"),
    )
    placed = placer(FirstFit()).place(state, job().mig("3g.40gb", 2).build())
    assert placed is not None
    assert placed[0].node == 1
    assert placed[0].mig == (2, 3)
    # Only the MIG instances changed: no milli-GPU, CPU or memory moved.
    assert state.gpu_milli_free.sum() == 0
    assert (state.cpu_free == state.cpu_total).all()


def test_mig_request_uses_instances_of_the_requested_profile_only() -> None:
    state = cluster(node("m").gpus(1).mig("4g.40gb@0,2g.20gb@4,1g.10gb@6"))
    placed = placer(FirstFit()).place(state, job().mig("1g.10gb").build())
    assert placed is not None and placed[0].mig == (2,)  # instance 2 is the 1g at slot 6
    assert placer(FirstFit()).place(state, job().mig("1g.10gb").build()) is None
    assert placer(FirstFit()).place(state, job().mig("3g.40gb").build()) is None  # not configured


def test_mig_gpus_do_not_serve_whole_or_fractional_requests() -> None:
    state = cluster(node("m").gpus(2).mig("7g.80gb@0", gpu=0))
    p = placer(FirstFit())
    assert p.fits_empty(state, job().gpus(1).build())
    assert not p.fits_empty(state, job().gpus(2).build())  # GPU 0 is partitioned
    placed = p.place(state, job().fraction(500).build())
    assert placed is not None and placed[0].gpus == (1,)


def test_mig_fits_empty_counts_instances_whether_taken_or_not() -> None:
    state = cluster(node("m").gpus(1).mig("3g.40gb@0,3g.40gb@4").mig_used("3g.40gb", 2))
    p = placer(FirstFit())
    assert p.fits_empty(state, job().mig("3g.40gb", 2).build())  # both exist
    assert not p.fits_empty(state, job().mig("3g.40gb", 3).build())  # only two exist
    assert p.place(state, job().mig("3g.40gb").build()) is None  # both are taken now


def test_mig_gang_takes_instances_on_distinct_nodes() -> None:
    state = cluster(
        node("a").gpus(1).mig("3g.40gb@0,3g.40gb@4"),
        node("b").gpus(1).mig("3g.40gb@0,3g.40gb@4"),
    )
    placed = placer(FirstFit()).place(state, job().mig("3g.40gb").gang(2).build())
    assert placed is not None
    assert [a.node for a in placed] == [0, 1]
    assert np.flatnonzero(~state.mig_free).tolist() == [0, 2]


def test_mig_request_honours_allowed_models() -> None:
    state = cluster(node("a").model("A100-80GB").gpus(1).mig("1g.10gb@0"))
    p = placer(FirstFit())
    assert p.place(state, job().mig("1g.10gb").models("H100-80GB").build()) is None
    assert not p.fits_empty(state, job().mig("1g.10gb").models("H100-80GB").build())
    assert p.place(state, job().mig("1g.10gb").models("A100-80GB").build()) is not None


@given(
    model=st.sampled_from(sorted(mig.PROFILES)),
    picks=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 7)), max_size=8),
)
def test_a_layout_is_valid_exactly_when_starts_are_allowed_and_slots_disjoint(
    model: str, picks: list[tuple[int, int]]
) -> None:
    names = list(mig.PROFILES[model])
    layout = tuple(MigInstance(names[p], s) for p, s in picks)
    slots: list[int] = []
    for inst in layout:
        prof = mig.profile(model, inst.profile)
        slots += range(inst.start, inst.start + prof.memory_slots)
    allowed = all(i.start in mig.profile(model, i.profile).starts for i in layout)
    expected = allowed and len(slots) == len(set(slots))
    try:
        mig.validate_layout(model, layout)
    except InvalidSpec as err:
        assert not expected, f"valid layout rejected: {err}"
    else:
        assert expected, "invalid layout accepted"
        # What validates also round-trips through its text form...
        text = ",".join(f"{i.profile}@{i.start}" for i in layout)
        assert mig.parse_layout(model, text) == layout
        # ...and never uses more than the GPU's 7 compute slices.
        assert sum(mig.profile(model, i.profile).compute_slices for i in layout) <= 7
        # Without starts, the same profiles in the same order still fit somewhere
        # or are refused with a message, never with another error.
        try:
            auto = mig.parse_layout(model, ",".join(i.profile for i in layout))
        except InvalidSpec:
            return
        assert [i.profile for i in auto] == [i.profile for i in layout]
