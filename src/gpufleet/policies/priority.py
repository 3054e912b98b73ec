"""Who runs first: Slurm's multifactor priority, shortest job first, least attained service.

Each ordering is an ``Ordering`` plugin: one priority per pending job, higher
first; the cycle breaks ties by submit time, then job id.

Multifactor follows Slurm's formula::

    priority = w_age x age + w_fairshare x fairshare + w_jobsize x job_size
             + w_partition x partition + w_qos x qos + w_assoc x assoc - nice

with every factor in [0, 1]:

* age: time since submission, capped at ``max_age_s``, over ``max_age_s``;
* fairshare: from ``policies.fairshare`` (Fair Tree or classic);
* job size: the job's GPUs over the cluster's, or one minus that when small
  jobs are favoured;
* partition: the partition's PriorityJobFactor over the largest of any partition;
* QoS: the QoS priority over the largest of any QoS;
* association: the user association's priority over the largest in the tree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator

from gpufleet.core.accounts import AccountTree, AccountUsage, FloatArray, IntArray
from gpufleet.core.columns import Rows, subset
from gpufleet.core.job import Job
from gpufleet.core.model import MILLI
from gpufleet.core.snapshot import Snapshot
from gpufleet.policies.fairshare import DAY_S, FairshareArgs
from gpufleet.policies.fairshare import factors as fairshare_factors
from gpufleet.policies.tables import StrictTable


class MultifactorArgs(StrictTable):
    """Weights and settings of the multifactor priority, with Slurm's names.

    Weights are integers, zero or more, as in slurm.conf. Slurm's defaults are
    all 0 (every job ties and the queue is FIFO); these defaults let QoS
    dominate, then fairshare, then age, which suits a shared GPU cluster.
    """

    weight_age: int = Field(1_000, ge=0, description="PriorityWeightAge")
    weight_fairshare: int = Field(10_000, ge=0, description="PriorityWeightFairshare")
    weight_job_size: int = Field(0, ge=0, description="PriorityWeightJobSize")
    weight_partition: int = Field(1_000, ge=0, description="PriorityWeightPartition")
    weight_qos: int = Field(100_000, ge=0, description="PriorityWeightQOS")
    weight_assoc: int = Field(0, ge=0, description="PriorityWeightAssoc")
    max_age_s: int = Field(
        7 * DAY_S, gt=0, description="PriorityMaxAge: age at which the age factor reaches 1."
    )
    favor_small: bool = Field(
        False, description="PriorityFavorSmall: the job size factor favours small jobs."
    )
    calc_period_s: int = Field(
        0,
        ge=0,
        description="PriorityCalcPeriod: age counts up to the latest multiple of this, when "
        "Slurm last recomputed priorities; 0: up to now.",
    )
    fairshare: FairshareArgs = Field(default_factory=FairshareArgs)


@dataclass(frozen=True, slots=True)
class Factors:
    """Each multifactor factor per pending job (all in [0, 1]) and the nice values."""

    age: FloatArray
    fairshare: FloatArray
    job_size: FloatArray
    partition: FloatArray
    qos: FloatArray
    assoc: FloatArray
    nice: FloatArray


def age_factor(age_s: FloatArray, max_age_s: int) -> FloatArray:
    """min(age, max_age) / max_age, and 0 for a job submitted in the future."""
    return np.clip(age_s, 0, max_age_s) / max_age_s


def job_size_factor(gpu_milli: FloatArray, cluster_gpu_milli: int, favor_small: bool) -> FloatArray:
    """The job's share of the cluster's GPUs (capped at 1); one minus it when favouring small."""
    share = np.minimum(gpu_milli / max(cluster_gpu_milli, 1), 1.0)
    return np.asarray(1.0 - share if favor_small else share, dtype=np.float64)


def relative_to_max(values: FloatArray, largest: float) -> FloatArray:
    """values / largest, or all 0 when the largest is 0 (nobody is favoured)."""
    if largest <= 0:
        return np.zeros(len(values))
    return np.asarray(values / largest, dtype=np.float64)


def weighted_priority(args: MultifactorArgs, f: Factors) -> FloatArray:
    """Slurm's sum of weight x factor, minus nice."""
    return np.asarray(
        args.weight_age * f.age
        + args.weight_fairshare * f.fairshare
        + args.weight_job_size * f.job_size
        + args.weight_partition * f.partition
        + args.weight_qos * f.qos
        + args.weight_assoc * f.assoc
        - f.nice,
        dtype=np.float64,
    )


class QueueColumns(Rows[Job]):
    """What each queued job's immutable ``Job`` fixes, as numpy columns kept across cycles.

    A job keeps its row while the queue holds the very same ``Job`` object
    (``core.columns.Rows``), so a changed job gets a new row and nothing
    stale is read. Names (partition, QoS, user, association) are interned to
    small codes, so a cycle looks up the snapshot's definitions once per
    distinct name rather than once per job.
    """

    @property
    def jobs(self) -> list[Job]:
        return self.objects

    def values(self, column: str, of: Callable[[Job], Any], dtype: Any = np.float64) -> FloatArray:
        """``of(job)`` for every row, as floats unless told; computed once per row."""
        return super().values(column, of, dtype)


_Tables = dict[str, FloatArray]
"""Factors by name (partition, QoS, user or association code), while the facts they read
hold."""
_Kept = tuple[tuple[object, ...], tuple[object, ...], FloatArray, _Tables]
"""What priorities keep while the period and the facts they read stay (``priorities``)."""


class Multifactor:
    """Slurm's multifactor priority over the pending jobs, vectorised.

    Fairshare comes from ``snapshot.accounts`` when the driver gives one
    (computed with ``args.fairshare``), else from ``snapshot.fairshare`` by
    user. A job whose association the tree does not hold, or whose user the
    mapping lacks, gets fairshare 0; the association factor needs the tree too.

    Per-job facts are cached across cycles (``QueueColumns``) and the
    fairshare factors while the snapshot carries the same ``AccountUsage``;
    the result depends only on the arguments, as the protocol requires.
    """

    NAME: ClassVar[str] = "multifactor"

    def __init__(self, args: MultifactorArgs | None = None) -> None:
        self.args = args or MultifactorArgs()
        self.columns = QueueColumns()
        self._fairshare: tuple[AccountUsage, FloatArray] | None = None
        self._index: tuple[AccountTree, list[tuple[str, str]], IntArray] | None = None
        # Priorities by row while the period and the facts they read stay (``priorities``).
        self._kept: _Kept | None = None

    @property
    def clocked(self) -> bool:
        """Age grows with the clock, and fairshare with the usage charged as it runs."""
        return bool(self.args.weight_age or self.args.weight_fairshare)

    def next_change(self, now: int) -> int | None:
        """With ``calc_period_s`` age moves only at its multiples (fairshare moves as the
        snapshot's usage does, which its driver knows); without, any time."""
        period = self.args.calc_period_s
        return now - now % period + period if period else None

    def priorities(self, snapshot: Snapshot, pending: Sequence[Job], now: int) -> FloatArray:
        """Each job's priority; with ``calc_period_s``, kept per job until the next
        recalculation, as Slurm keeps them: age counts to the period's start, and
        the rest reads the same snapshot facts until then (a changed job is a new
        object, so a new row)."""
        if not self.args.calc_period_s:
            return weighted_priority(self.args, self.factors(snapshot, pending, now))
        rows = self.columns.rows(pending)
        period = self.args.calc_period_s
        key = (
            now - now % period,
            snapshot.state.epoch,
            dict(snapshot.qos),
            dict(snapshot.partitions),
            dict(snapshot.fairshare),
        )
        same = (self.columns.objects, snapshot.accounts, snapshot.state)  # by identity
        kept = self._kept
        if (
            kept is None
            or kept[0] != key
            or any(a is not b for a, b in zip(kept[1], same, strict=True))
        ):
            kept = self._kept = (key, same, np.zeros(0), {})
        known = kept[2]
        if len(known) < len(self.columns.objects):
            grown = np.full(len(self.columns.objects), np.nan)
            grown[: len(known)] = known
            known = grown
            self._kept = (key, same, known, kept[3])
        out = known[rows]
        missing = np.flatnonzero(np.isnan(out))
        if len(missing):
            fresh = self._factors(snapshot, subset(pending, missing), now, kept[3])
            out[missing] = known[rows[missing]] = weighted_priority(self.args, fresh)
        return out

    def factors(self, snapshot: Snapshot, pending: Sequence[Job], now: int) -> Factors:
        """Every factor for every job, aligned with ``pending`` (what ``sprio`` shows).

        A factor whose weight is 0 is not computed and reads 0: it cannot
        change the order, and skipping it keeps large queues cheap.
        """
        return self._factors(snapshot, pending, now, {})

    def _factors(
        self, snapshot: Snapshot, pending: Sequence[Job], now: int, tables: _Tables
    ) -> Factors:
        """``factors``; ``tables`` keeps the factors by name that the snapshot's facts fix
        (kept with the priorities while they hold)."""
        args, cols, zero = self.args, self.columns, np.zeros(len(pending))
        rows = cols.rows(pending)
        nice = cols.values("nice", attrgetter("priority_nice"))[rows]
        age = job_size = partition = qos = fs = assoc = zero
        if args.weight_age:
            submit = cols.values("submit", attrgetter("submit_time"))[rows]
            period = args.calc_period_s
            age = age_factor((now - now % period if period else now) - submit, args.max_age_s)
        if args.weight_job_size:
            gpu_milli = cols.values("gpu_milli", attrgetter("gpu_milli"))[rows]
            cluster_milli = int(snapshot.state.gpu_exists.sum()) * MILLI
            job_size = job_size_factor(gpu_milli, cluster_milli, args.favor_small)
        if args.weight_partition:
            factor = {name: p.priority_job_factor for name, p in snapshot.partitions.items()}
            partition = self._by_code(rows, "partition", factor, tables, relative=True)
        if args.weight_qos:
            priority = {name: q.priority for name, q in snapshot.qos.items()}
            qos = self._by_code(rows, "qos", priority, tables, relative=True)
        if args.weight_fairshare or args.weight_assoc:
            if snapshot.accounts is not None:
                fs, assoc = self._from_tree(rows, snapshot.accounts, tables)
            else:
                fs = self._by_code(rows, "user", snapshot.fairshare, tables, relative=False)
        return Factors(age, fs, job_size, partition, qos, assoc, nice)

    def _by_code(
        self,
        rows: IntArray,
        attr: str,
        values: Mapping[str, float],
        tables: _Tables,
        *,
        relative: bool,
    ) -> FloatArray:
        """The value of each job's ``attr`` (0 if undefined), over the largest if ``relative``."""
        codes, names = self.columns.codes(attr, attrgetter(attr))
        by_code = tables.get(attr)
        if by_code is None or len(by_code) != len(names):  # names only grow
            by_code = np.array([values.get(name, 0) for name in names], dtype=np.float64)
            if relative:
                by_code = relative_to_max(by_code, max(values.values(), default=0))
            tables[attr] = by_code
        return by_code[codes[rows]] if len(by_code) else np.zeros(len(rows))

    def _associations(self, tree: AccountTree, keys: list[tuple[str, str]]) -> IntArray:
        """The tree's index of each (account, user) key (-1: none), looked up once per key:
        the keys of the columns only grow at their end while the list is the same."""
        kept = self._index
        if kept is None or kept[0] is not tree or kept[1] is not keys:
            kept = (tree, keys, np.zeros(0, dtype=np.int64))
        index = kept[2]
        if len(index) < len(keys):
            fresh = keys[len(index) :]
            found = tree.lookup([a for a, _ in fresh], [u for _, u in fresh])
            index = np.concatenate([index, found])
        self._index = (tree, keys, index)
        return index

    def _from_tree(
        self, rows: IntArray, accounts: AccountUsage, tables: _Tables
    ) -> tuple[FloatArray, FloatArray]:
        codes, keys = self.columns.codes("association", attrgetter("account", "user"))
        fs, assoc = tables.get("fairshare"), tables.get("assoc")
        if fs is None or assoc is None or len(fs) != len(keys):  # keys only grow
            if self._fairshare is None or self._fairshare[0] is not accounts:
                factors = fairshare_factors(accounts.tree, accounts.usage, self.args.fairshare)
                self._fairshare = (accounts, factors)
            tree, per_assoc = accounts.tree, self._fairshare[1]
            index = self._associations(tree, keys)
            known = index >= 0
            top = float(tree.priority.max())
            priority = relative_to_max(tree.priority.astype(np.float64), top)
            fs = tables["fairshare"] = np.where(known, per_assoc[index], 0.0)
            assoc = tables["assoc"] = np.where(known, priority[index], 0.0)
        return fs[codes[rows]], assoc[codes[rows]]


class SjfArgs(StrictTable):
    """Shortest job first's settings (``[ordering.sjf]``)."""

    aging: float = Field(
        0.0,
        ge=0,
        description="seconds of runtime forgiven per second waited, so long jobs still start",
    )


class ShortestJobFirst:
    """Shortest expected runtime first, with aging against starvation.

    A job's runtime is its estimate (``Job.expected_runtime_s``: a
    predictor's, capped by the limit) with ``estimates``, else its time
    limit. Its priority is minus that runtime plus ``aging`` x its wait, so a
    job of runtime R waiting since t overtakes a new job of runtime R' once
    it has waited (R - R') / aging.
    """

    NAME: ClassVar[str] = "sjf"

    def __init__(self, args: SjfArgs | None = None, *, estimates: bool = True) -> None:
        self.args = args or SjfArgs()
        self.estimates = estimates

    @property
    def clocked(self) -> bool:
        """Aging grows with the wait."""
        return bool(self.args.aging)

    def priorities(self, snapshot: Snapshot, pending: Sequence[Job], now: int) -> FloatArray:
        length = attrgetter("expected_runtime_s" if self.estimates else "time_limit_s")
        runtime = np.fromiter(map(length, pending), dtype=np.float64, count=len(pending))
        if not self.args.aging:
            return -runtime
        submit = np.fromiter((j.submit_time for j in pending), np.float64, count=len(pending))
        return self.args.aging * np.maximum(now - submit, 0) - runtime


class LasArgs(StrictTable):
    """Tiresias' discretised 2D-LAS (Gu et al., NSDI'19): queues by attained GPU-seconds.

    With no thresholds the ordering is continuous LAS (least attained first);
    with K thresholds there are K + 1 queues, the job's queue being how many
    thresholds its attained service has reached, and jobs within a queue keep
    submission order, which limits how often jobs swap places. A job that has
    waited ``starve_limit_s`` since it last entered the queue goes to the
    first queue (the paper's STARVELIMIT), so long jobs cannot starve.
    """

    thresholds_gpu_s: tuple[float, ...] = Field(
        (), description="Queue thresholds in attained GPU-seconds, strictly increasing."
    )
    starve_limit_s: int = Field(
        0, ge=0, description="a job waiting this long goes to the first queue; 0: never"
    )

    def level(self, attained: FloatArray, waited: FloatArray | None = None) -> FloatArray:
        """Each job's queue (attained service itself without thresholds); 0 once starved."""
        level = np.asarray(attained, dtype=np.float64)
        if self.thresholds_gpu_s:
            level = np.searchsorted(self.thresholds_gpu_s, level, side="right").astype(np.float64)
        if self.starve_limit_s and waited is not None:
            level = np.where(waited >= self.starve_limit_s, 0.0, level)
        return level

    @field_validator("thresholds_gpu_s")
    @classmethod
    def _increasing(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        steps = np.diff((0.0, *value))
        if np.any(steps <= 0):
            raise ValueError(f"must be positive and strictly increasing, got {list(value)}")
        return value


def waited(pending: Sequence[Job], now: int) -> FloatArray:
    """Seconds each job has waited since it last entered the queue (its submission or
    its latest requeue)."""
    since = (j.submit_time if j.requeued_at is None else j.requeued_at for j in pending)
    return now - np.fromiter(since, dtype=np.float64, count=len(pending))


class LeastAttainedService:
    """Least attained GPU service first (GPUs x seconds run, over all previous runs),
    by discretised queues when ``LasArgs`` has thresholds."""

    NAME: ClassVar[str] = "las"

    def __init__(self, args: LasArgs | None = None) -> None:
        self.args = args or LasArgs()

    @property
    def clocked(self) -> bool:
        """The starvation guard promotes jobs as their wait grows."""
        return bool(self.args.starve_limit_s)

    def priorities(self, snapshot: Snapshot, pending: Sequence[Job], now: int) -> FloatArray:
        attained = np.fromiter(
            (j.gpu_seconds_attained for j in pending), dtype=np.float64, count=len(pending)
        )
        return -self.args.level(attained, waited(pending, now))
