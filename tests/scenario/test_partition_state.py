"""Partition states (Slurm's State=): down and inactive partitions start no job."""

from __future__ import annotations

import numpy as np
import pytest

from builders import node
from gpufleet.core.columns import Rows
from gpufleet.core.job import Job, Partition, PartitionState
from gpufleet.core.snapshot import QueueView, Tally
from gpufleet.policies.limits import PartitionLimits
from scenario.harness import Scenario, qjob


@pytest.mark.parametrize(
    ("state", "starts", "reasons"),
    [
        ("up", {"j": ["a"]}, {}),
        ("drain", {"j": ["a"]}, {}),  # takes no new submissions, but runs what is queued
        ("down", {}, {"j": "PartitionDown"}),
        ("inactive", {}, {"j": "PartitionInactive"}),
    ],
)
def test_a_partition_state_decides_whether_its_jobs_start(
    state: PartitionState, starts: dict[str, list[str]], reasons: dict[str, str]
) -> None:
    sc = Scenario([node("a").gpus(8)], partitions=[Partition("main", state=state)])
    out = sc.submit(qjob("j").gpus(1)).cycle()
    assert (out.starts, out.reasons) == (starts, reasons)


def test_the_bulk_answer_is_the_one_by_one_answer() -> None:
    parts = [Partition(f"p-{s}", state=s) for s in ("up", "drain", "down", "inactive")]
    sc = Scenario([node("a").gpus(8)], partitions=parts)
    sc.submit(*(qjob(f"j{i}").gpus(1).partition(parts[i % 4].name) for i in range(12)))
    snap = sc.snapshot()
    limits = PartitionLimits()
    one_by_one = [limits.admit(snap, j, Tally()) for j in snap.pending]
    table: Rows[Job] = Rows()
    bulk = limits.admit_all(snap, QueueView(table, table.rows(snap.pending)), Tally())
    assert bulk.tolist() == one_by_one
    assert one_by_one.count("PartitionDown") == 3
    assert np.count_nonzero(bulk == "PartitionInactive") == 3
