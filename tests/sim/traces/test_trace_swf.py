"""SWF: field mapping, processors to GPUs, skipped jobs, and malformed lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.swf import SwfMapping, load_swf

Corrupt = Callable[[str, int, str, str], Path]


def test_maps_fields_and_skips_jobs_that_never_ran(fixture: Callable[[str], Path]) -> None:
    jobs = load_swf(fixture("tiny.swf"))
    # Jobs 3 (run time -1) and 4 (run time 0) are skipped; 6 arrives before 2.
    assert [j.id for j in jobs] == ["1", "6", "2", "5"]
    first = jobs[0]
    assert (first.submit_time, first.duration_s, first.time_limit_s) == (0, 100, 200)
    assert (first.user, first.account, first.qos, first.partition) == ("u3", "g1", "q0", "p1")
    assert jobs[2].time_limit_s is None  # requested time -1
    assert (jobs[2].user, jobs[2].qos) == ("", "")  # -1 ids are unknown


@pytest.mark.parametrize(
    ("mapping", "expected"),
    [
        # one processor = one GPU: 4 -> 4; 1 -> 1; 16 (requested) -> 2 x 8; 12 -> ceil(12/8) = 2 x 8
        (SwfMapping(), {"1": (4, 1), "6": (1, 1), "2": (8, 2), "5": (8, 2)}),
        # 4 processors per GPU: 4 -> 1; 1 -> ceil(1/4) = 1; 16 -> 4; 12 -> 3
        (SwfMapping(procs_per_gpu=4), {"1": (1, 1), "6": (1, 1), "2": (4, 1), "5": (3, 1)}),
        # 2-GPU nodes: 4 -> 2 x 2; 16 -> 2 x 8; 12 -> 2 x 6
        (SwfMapping(gpus_per_node=2), {"1": (2, 2), "6": (1, 1), "2": (2, 8), "5": (2, 6)}),
    ],
)
def test_processor_mapping(
    fixture: Callable[[str], Path], mapping: SwfMapping, expected: dict[str, tuple[int, int]]
) -> None:
    jobs = load_swf(fixture("tiny.swf"), mapping)
    assert {j.id: (j.request.gpus, j.request.nodes) for j in jobs} == expected


@pytest.mark.parametrize(
    ("line", "old", "new", "field", "reason"),
    [
        (4, "100  4", "1x0  4", "run_time", "'1x0' is not a whole number"),
        (5, "   10", "  1.5", "submit_time", "'1.5' is not a whole number"),
        (4, "  0  5", " -1  5", "submit_time", "must be zero or more, got -1"),
        (4, " 200 -1", " -20 -1", "requested_time", "must be -1 or more, got -20"),
        (9, " 5  4  2", " 5 u4  2", "user_id", "'u4' is not a whole number"),
        (4, "1    0", "1    0 9", None, "expected 18 fields, got 19"),
    ],
)
def test_malformed_line_names_row_and_field(
    corrupt: Corrupt, line: int, old: str, new: str, field: str | None, reason: str
) -> None:
    path = corrupt("tiny.swf", line, old, new)
    with pytest.raises(TraceError) as err:
        load_swf(path)
    where = f"{path}, row {line}: "
    assert str(err.value) == where + (f"{field}: " if field else "") + reason


def test_file_without_jobs_that_ran(tmp_path: Path) -> None:
    path = tmp_path / "empty.swf"
    path.write_text("; nothing\n3 20 0 -1 8 -1 -1 8 100 -1 5 3 1 -1 0 1 -1 -1\n")
    with pytest.raises(TraceError, match="holds no job that ran"):
        load_swf(path)
