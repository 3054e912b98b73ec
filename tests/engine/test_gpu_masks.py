"""Masked GPUs: held away from the placer, the rest of the node working on."""

from __future__ import annotations

import pytest

from builders import node
from engine.test_book import PARTS, QOS, book, whole
from gpufleet.core.plan import Plan
from gpufleet.core.state import Assignment, OverAllocation
from gpufleet.engine.book import JobBook
from scenario.harness import qjob


def test_a_free_gpu_is_held_at_once_and_given_back() -> None:
    b = book("a", gpus=2)
    b.mask_gpu("a", 1, True)
    assert b.state.gpu_milli_free[0].tolist() == [1000, 0]
    with pytest.raises(OverAllocation):
        b.state.allocate(whole(0, 1))
    b.mask_gpu("a", 1, True)  # again: nothing more is taken
    assert b.state.gpu_milli_free[0].tolist() == [1000, 0]
    b.mask_gpu("a", 1, False)
    assert b.state.gpu_milli_free[0].tolist() == [1000, 1000]
    b.mask_gpu("a", 1, False)
    assert b.state.gpu_milli_free[0].tolist() == [1000, 1000]


def test_a_gpu_in_use_is_held_when_its_run_ends_and_survives_a_rebuild() -> None:
    b = book("a", gpus=2)
    b.submit(qjob("j").gpus(1).limit(600).job())
    b.apply(Plan(starts={"j": [whole(0, 0)]}), now=0)
    b.mask_gpu("a", 0, True)
    assert b.masked == {("a", 0): None}  # the run goes on
    b.finish("j", now=10)
    assert b.state.gpu_milli_free[0].tolist() == [0, 1000]
    b.add_node(node("b").gpus(2).build())  # a new state: the hold is taken again
    assert b.state.gpu_milli_free.tolist() == [[0, 1000], [1000, 1000]]
    b.mask_gpu("a", 0, False)
    assert b.state.gpu_milli_free.tolist() == [[1000, 1000], [1000, 1000]]


def test_a_mig_gpu_is_held_through_its_instances() -> None:
    b = JobBook([node("a").mig("3g.40gb@0,3g.40gb@4").gpus(1).build()], QOS, PARTS)
    b.mask_gpu("a", 0, True)
    assert b.state.mig_free.tolist() == [False, False]
    with pytest.raises(OverAllocation):
        b.state.allocate(Assignment(node=0, mig=(1,)))
    b.mask_gpu("a", 0, False)
    assert b.state.mig_free.tolist() == [True, True]
