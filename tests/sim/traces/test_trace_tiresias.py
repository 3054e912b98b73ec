"""Tiresias CSV: columns used, gangs for wide jobs, malformed rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.sim.openb import TraceError
from gpufleet.sim.traces.tiresias import TiresiasOptions, load_tiresias

Corrupt = Callable[[str, int, str, str], Path]


def test_reads_jobs(fixture: Callable[[str], Path]) -> None:
    jobs = load_tiresias(fixture("tiresias.csv"))
    rows = [(j.id, j.submit_time, j.duration_s, j.request.gpus, j.request.nodes) for j in jobs]
    assert rows == [
        ("0", 0, 164, 1, 1),
        ("1", 30, 147, 8, 2),  # 16 GPUs on 8-GPU nodes: a gang of 2 x 8
        ("2", 53, 128, 2, 1),  # 127.6 s rounds to 128
    ]


def test_node_size_sets_the_gang(fixture: Callable[[str], Path]) -> None:
    # 16 GPUs on 4-GPU nodes: 16 / 4 = 4 nodes
    wide = load_tiresias(fixture("tiresias.csv"), TiresiasOptions(gpus_per_node=4))[1]
    assert (wide.request.gpus, wide.request.nodes) == (4, 4)


@pytest.mark.parametrize(
    ("line", "old", "new", "field", "reason"),
    [
        (2, "0,1,0,", "0,0,0,", "num_gpu", "must be 1 or more, got 0"),
        (3, "1,16,", "1,two,", "num_gpu", "'two' is not a whole number"),
        (4, "2,2,53,", "2,2,-3,", "submit_time", "must be 0 or more, got -3"),
        (4, ",127.6,", ",soon,", "duration", "'soon' is not a number of seconds"),
        (2, "0,1,0,", ",1,0,", "job_id", "must not be empty"),
        (3, ",23", "", None, "expected 7 fields"),
        (1, "num_gpu", "gpus", "num_gpu", "column missing from the header"),
    ],
)
def test_malformed_row_names_row_and_field(
    corrupt: Corrupt, line: int, old: str, new: str, field: str | None, reason: str
) -> None:
    path = corrupt("tiresias.csv", line, old, new)
    with pytest.raises(TraceError) as err:
        load_tiresias(path)
    assert str(err.value) == f"{path}, row {line}: " + (f"{field}: " if field else "") + reason
