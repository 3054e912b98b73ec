"""What one scheduling cycle reads: the snapshot, the running tally, and queue columns.

``Snapshot`` is the driver's view of the cluster and the queue for one
cycle (``engine.JobBook.snapshot`` builds it); the cycle and its plugins
only read it. ``Tally`` counts what runs per QoS, user and account,
including the cycle's own starts, for the limits. ``QueueView`` hands
plugins that judge many jobs at once the queue as columns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from copy import copy
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gpufleet.core.accounts import AccountUsage
from gpufleet.core.columns import Rows
from gpufleet.core.job import Job, Partition, QoS, Reservation, RunningJob
from gpufleet.core.plan import Layout
from gpufleet.core.state import Assignment, ClusterState, IntArray
from gpufleet.core.timeline import RunningEvents

FloatArray = npt.NDArray[np.float64]
ObjectArray = npt.NDArray[np.object_]


@dataclass(frozen=True)
class Snapshot:
    """Everything one cycle may read. The cycle never mutates it.

    ``state`` already holds the allocations of every job in ``running``.
    ``fairshare`` maps a user to a factor in [0, 1] precomputed by the driver;
    ``accounts`` is the account tree with each association's decayed usage
    (``engine.UsageLedger.view``), which orderings prefer when given; any
    other type is a TypeError, not a silent fairshare of 0. ``signalled``
    maps each running job already told to stop (in its preemption grace
    time) to the job it was preempted for. ``promised`` maps a pending job
    whose victims are gone to the room they left it (free in ``state``):
    this cycle keeps that room for the job. ``last_backfill`` is when the last
    cycle with a backfill pass ran (None: never; see ``Backfill.runs_at``).
    ``mig_changed`` maps a GPU (node index, GPU index) to when its last MIG
    layout change began; ``reconfiguring`` maps each GPU whose change is
    still under way (it takes no work meanwhile) to the layout it will have.
    """

    state: ClusterState
    running: Sequence[RunningJob]
    pending: Sequence[Job]
    qos: Mapping[str, QoS]
    partitions: Mapping[str, Partition]
    now: int
    reservations: Sequence[Reservation] = ()
    fairshare: Mapping[str, float] = field(default_factory=dict)
    accounts: AccountUsage | None = None
    signalled: Mapping[str, str] = field(default_factory=dict)
    promised: Mapping[str, Sequence[Assignment]] = field(default_factory=dict)
    last_backfill: int | None = None
    mig_changed: Mapping[tuple[int, int], int] = field(default_factory=dict)
    reconfiguring: Mapping[tuple[int, int], Layout] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.accounts is not None and not isinstance(self.accounts, AccountUsage):
            raise TypeError(
                "Snapshot.accounts: an AccountUsage (the tree with its usage) or None, got "
                + type(self.accounts).__name__
            )


TallyKind = Literal["user_jobs", "user_milli", "account_milli", "qos_milli"]
_Sums = tuple[
    defaultdict[tuple[str, str], int],
    defaultdict[tuple[str, str], int],
    defaultdict[tuple[str, str], int],
    defaultdict[str, int],
]


class Tally:
    """What is running per QoS, user and account, including this cycle's starts.

    GPU amounts are milli-GPU (see ``job.gpu_milli_equivalent``). Keys are
    (QoS, user) for the user counts, (QoS, account) and QoS for the others.
    One made ``of_running`` sums its jobs when first read: most cycles of a
    site without limits never read it.
    """

    def __init__(self) -> None:
        self._sums: _Sums = (defaultdict(int), defaultdict(int), defaultdict(int), defaultdict(int))
        self._source: tuple[RunningEvents, IntArray] | None = None
        self._added: list[tuple[Job, int]] = []  # before the source was summed
        self._memo: dict[TallyKind, tuple[Sequence[Hashable], dict[Hashable, int], IntArray]] = {}

    @classmethod
    def of_running(cls, table: RunningEvents, rows: IntArray) -> Tally:
        """The tally of the running jobs at ``rows`` of ``table`` (rows only grow)."""
        tally = cls()
        tally._source = table, rows
        return tally

    def _summed(self) -> _Sums:
        """The four sums, the running jobs' added in one pass the first time."""
        if self._source is not None:
            table, rows = self._source
            self._source = None
            milli = table.values("gpu_milli", _running_milli)[rows]
            columns: tuple[tuple[str, Callable[[RunningJob], Hashable], IntArray | None], ...] = (
                ("qos,user", _qos_user, None),
                ("qos,user", _qos_user, milli),
                ("qos,account", _qos_account, milli),
                ("qos", _qos, milli),
            )
            sums: tuple[defaultdict[Any, int], ...] = self._sums
            for counter, (column, key, weights) in zip(sums, columns, strict=True):
                codes, keys = table.codes(column, key)
                if len(keys):
                    total = np.bincount(codes[rows], weights, minlength=len(keys))
                    held = np.flatnonzero(total)  # of every key ever seen, those held now
                    amounts = total[held].astype(np.int64).tolist()
                    counter.update(zip([keys[i] for i in held.tolist()], amounts, strict=True))
            for job, sign in self._added:
                self.add(job, sign)
            self._added.clear()
        return self._sums

    @property
    def user_jobs(self) -> defaultdict[tuple[str, str], int]:
        return self._summed()[0]

    @property
    def user_milli(self) -> defaultdict[tuple[str, str], int]:
        return self._summed()[1]

    @property
    def account_milli(self) -> defaultdict[tuple[str, str], int]:
        return self._summed()[2]

    @property
    def qos_milli(self) -> defaultdict[str, int]:
        return self._summed()[3]

    def add(self, job: Job, sign: int = 1) -> None:
        """Count ``job`` in (``sign`` -1: out), as a cycle starts (or preempts) it."""
        if self._source is not None:  # added when first read
            self._added.append((job, sign))
            return
        milli = sign * job.gpu_milli
        user, account = (job.qos, job.user), (job.qos, job.account)
        jobs, user_milli, account_milli, qos_milli = self._sums
        jobs[user] += sign
        user_milli[user] += milli
        account_milli[account] += milli
        qos_milli[job.qos] += milli
        changes: tuple[tuple[TallyKind, Hashable, int], ...] = (
            ("user_jobs", user, sign),
            ("user_milli", user, milli),
            ("account_milli", account, milli),
            ("qos_milli", job.qos, milli),
        )
        for kind, key, delta in changes:
            memo = self._memo.get(kind)
            at = -1 if memo is None else memo[1].get(key, -1)
            if memo is not None and at >= 0:
                memo[2][at] += delta

    def counts(self, kind: TallyKind, keys: Sequence[Hashable]) -> IntArray:
        """The tally of each key of ``kind`` (0 if none), as an array; do not change it.

        Kept up to date by ``add`` while ``keys`` is the same list, grown by
        nothing (``Rows.codes`` keys only grow at their end).
        """
        memo = self._memo.get(kind)
        if memo is None or memo[0] is not keys or len(memo[1]) != len(keys):
            counter: defaultdict[Any, int] = getattr(self, kind)
            index = dict(zip(keys, range(len(keys)), strict=True))
            # Reading a defaultdict adds the missing keys at 0, which changes no count.
            held = np.fromiter(map(counter.__getitem__, keys), dtype=np.int64, count=len(keys))
            memo = keys, index, held
            self._memo[kind] = memo
        return memo[2]


def _running_milli(r: RunningJob) -> int:
    return r.job.gpu_milli


def _qos_user(r: RunningJob) -> tuple[str, str]:
    return r.job.qos, r.job.user


def _qos_account(r: RunningJob) -> tuple[str, str]:
    return r.job.qos, r.job.account


def _qos(r: RunningJob) -> str:
    return r.job.qos


class QueueView:
    """Columns of some queued jobs (aligned with ``rows``), for plugins that judge many at once.

    A view and its ``window``s share what they gathered, so a column is
    gathered once for the whole queue and each window reads a slice.
    """

    def __init__(self, table: Rows[Job], rows: IntArray) -> None:
        self.table = table
        self._all = rows
        self._lo, self._hi = 0, len(rows)
        self._gathered: dict[str, npt.NDArray[Any]] = {}
        self._keys: dict[str, list[Any]] = {}

    @property
    def rows(self) -> IntArray:
        return self._all[self._lo : self._hi]

    def __len__(self) -> int:
        return self._hi - self._lo

    def window(self, lo: int, hi: int) -> QueueView:
        """The jobs from ``lo`` to ``hi`` of this view (clipped to it)."""
        view = copy(self)
        view._lo, view._hi = self._lo + lo, min(self._lo + hi, self._hi)
        return view

    def column(self, attr: str, dtype: Any = np.int64) -> npt.NDArray[Any]:
        """Each job's attribute ``attr``."""
        gathered = self._gathered.get(attr)
        if gathered is None:
            gathered = self.table.values(attr, attrgetter(attr), dtype)[self._all]
            self._gathered[attr] = gathered
        return gathered[self._lo : self._hi]

    def codes(self, *attrs: str) -> tuple[IntArray, list[Any]]:
        """A code per job for its value of ``attrs`` (a tuple when several), and the keys by code.

        The keys are every value seen so far, so they may outnumber these jobs'.
        """
        name = ",".join(attrs)
        gathered = self._gathered.get(name)
        if gathered is None:
            codes, self._keys[name] = self.table.codes(name, attrgetter(*attrs))
            gathered = self._gathered[name] = codes[self._all]
        return gathered[self._lo : self._hi], self._keys[name]
