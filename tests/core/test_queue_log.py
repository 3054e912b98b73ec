"""The queue as the job book hands it to a cycle, and the order a cycle walks it in.

A deep queue is handed over as a view of an append-only log (``Log``,
``Entries``) whose rows are found by position, and only its first
``queue_depth`` jobs are sorted. These tests hold both to what they replace:
the queue as a list in the order jobs entered, rows found by identity, and
the full sort.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.core.columns import Entries, Log, Rows
from gpufleet.core.cycle import queue_order
from gpufleet.core.job import Job
from gpufleet.core.order import leading
from gpufleet.core.walk import compact
from scenario.harness import qjob


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([0.0, 1.0, 2.5]), st.integers(0, 4)), min_size=1, max_size=60
    ),
    st.integers(1, 25),
    st.randoms(use_true_random=False),
)
def test_the_first_jobs_are_those_of_the_full_sort(
    keys: list[tuple[float, int]], first: int, rnd: random.Random
) -> None:
    ids = [f"j{i:03d}" for i in range(len(keys))]
    rnd.shuffle(ids)
    jobs = [qjob(i).gpus(1).submit(t).job() for i, (_, t) in zip(ids, keys, strict=True)]
    prio = np.array([p for p, _ in keys])
    submit = np.array([t for _, t in keys], dtype=np.int64)
    whole = queue_order(prio, jobs, submit)
    assert queue_order(prio, jobs, submit, first) == whole[:first]
    # A guess of where the first-th sorts, right or wrong, changes nothing.
    guess = rnd.choice(keys)
    assert queue_order(prio, jobs, submit, first, (-guess[0], guess[1])) == whole[:first]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([0.0, -1.0, -2.5]), st.integers(0, 4)), min_size=1),
    st.data(),
)
def test_leading_keeps_exactly_the_keys_up_to_the_first_th(
    keys: list[tuple[float, int]], data: st.DataObject
) -> None:
    first = data.draw(st.integers(1, len(keys)))
    neg = np.array([p for p, _ in keys])
    submit = np.array([t for _, t in keys], dtype=np.int64)
    kth = sorted(keys)[first - 1]
    want = [i for i, k in enumerate(keys) if k <= kth]
    assert leading(neg, submit, first).tolist() == want
    # With a bound, whether at least first keys are within it or not.
    bound, bound_submit = data.draw(st.sampled_from(keys))
    assert leading(neg, submit, first, bound, bound_submit).tolist() == want


def _job(key: str, version: int) -> Job:
    return qjob(key).gpus(1).submit(version).job()


OPS = st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=400)


@settings(max_examples=100, deadline=None)
@given(OPS)
def test_a_log_view_is_the_queue_as_it_was(ops: list[tuple[bool, int]]) -> None:
    log: Log[Job] = Log()
    queue: dict[str, Job] = {}  # what the log stands for: a re-added key goes last
    views: list[tuple[Entries[Job], list[Job]]] = []
    for step, (add, k) in enumerate(ops):
        key = f"k{k}"
        if add:
            job = _job(key, step)
            queue.pop(key, None)
            queue[key] = job
            log.add(key, job)
        else:
            queue.pop(key, None)
            log.discard(key)
        assert len(log) == len(queue)
        views.append((log.entries(), list(queue.values())))
    for view, expected in views:  # earlier views are unchanged by later steps
        assert list(view) == expected
        assert [view[i] for i in range(len(view))] == expected


def test_a_log_starts_a_fresh_list_once_dead_entries_dominate() -> None:
    log: Log[Job] = Log()
    for step in range(3000):
        log.add("a", _job("a", step))
    log.add("b", _job("b", 0))
    view = log.entries()
    assert len(view.items) < 3000  # compacted: the 2,999 replaced entries are gone
    assert [j.id for j in view] == ["a", "b"]


@settings(max_examples=100, deadline=None)
@given(OPS)
def test_rows_of_log_views_are_rows_by_identity(ops: list[tuple[bool, int]]) -> None:
    log: Log[Job] = Log()
    by_position: Rows[Job] = Rows()
    by_identity: Rows[Job] = Rows()
    for step, (add, k) in enumerate(ops):
        if add:
            log.add(f"k{k}", _job(f"k{k}", step))
        else:
            log.discard(f"k{k}")
        view = log.entries()
        rows = by_position.rows(view)
        assert [by_position.objects[r] for r in rows.tolist()] == list(view)
        # Row numbers are those identity gives: the same objects in the same order.
        assert rows.tolist() == by_identity.rows(list(view)).tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=60))
def test_compact_numbers_a_windows_codes_as_unique_does(codes: list[int]) -> None:
    array = np.array(codes, dtype=np.int64)
    distinct, index = compact(array)
    expected, inverse = np.unique(array, return_inverse=True)
    assert distinct.tolist() == expected.tolist()
    assert index.tolist() == inverse.ravel().tolist()
