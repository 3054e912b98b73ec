"""Fairshare usage between cycles: what the drivers charge and the orderings read.

``UsageLedger`` keeps each association's decayed usage as
``policies.fairshare.charge`` bills it, updated whenever a run starts or
stops (``start``/``stop``) rather than every cycle, and hands orderings an
``AccountUsage`` through ``view(now)`` (the snapshot's ``accounts``). Pure:
times are passed in.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from gpufleet.core.accounts import AccountTree, AccountUsage
from gpufleet.core.job import QoS, RunningJob
from gpufleet.core.state import ClusterState
from gpufleet.policies.fairshare import FairshareArgs, accrue, charge, decay


class UsageLedger:
    """Fairshare usage between cycles, charged as ``policies.fairshare.charge`` bills.

    A running job bills at a constant rate, so the ledger keeps the billed
    GPU-seconds per second of every association and decays and charges the
    usage in one vector step whenever that rate changes, and at each multiple
    of ``recalc_s``. Each job's rate is what ``charge`` bills it for one
    second, cached by what it depends on. While no run is charged the usage
    only decays, so it is the usage as the last run stopped decayed in one
    step to the time asked (``idle``): an idle gap costs one step however
    long, and what the orderings see still depends only on when runs started
    and stopped. Orderings see a new
    ``AccountUsage`` at most once per ``recalc_s`` seconds, as of their
    multiples, as Slurm recomputes fairshare every PriorityCalcPeriod: what
    they see depends only on when runs started and stopped. ``state`` (whose
    nodes' GPU models set the billing weight) is set by the ``JobBook`` that
    owns the ledger.
    """

    def __init__(
        self,
        tree: AccountTree,
        args: FairshareArgs,
        qos: Mapping[str, QoS],
        recalc_s: int,
        state: ClusterState | None = None,
    ) -> None:
        self.tree, self.args, self.qos = tree, args, qos
        self.state = state
        self.recalc_s = recalc_s
        self.usage = np.zeros(len(tree))
        self.rate = np.zeros(len(tree))
        self.index = np.arange(len(tree))
        self.at = 0
        self.boundary = self.usage  # the usage at the last multiple of recalc_s passed
        self.snapshot = AccountUsage(tree, self.usage)
        self.snapshot_at: int | None = None
        self._rates: dict[tuple[str, str, str, int, str], npt.NDArray[np.float64]] = {}
        self.charged = 0  # runs started and not stopped
        self.idle: tuple[npt.NDArray[np.float64], int] | None = (self.usage, 0)
        """(usage, time) as the last charged run stopped; None while one runs."""

    def _accrue(self, now: int) -> None:
        self.usage, self.at, boundary = self._stepped(now)
        if boundary is not None:
            self.boundary = boundary

    def _stepped(
        self, now: int
    ) -> tuple[npt.NDArray[np.float64], int, npt.NDArray[np.float64] | None]:
        """The usage decayed and charged from ``at`` to ``now``, in steps that end at each
        multiple of ``recalc_s`` passed, as Slurm's decay thread charges at each
        PriorityCalcPeriod: the usage then depends on when runs started and stopped,
        not on when it was asked for. Returns it, its time, and its value at the last
        multiple passed (None: none passed)."""
        usage, at, boundary, step = self.usage, self.at, None, self.recalc_s
        if self.idle is not None and now > at:
            # Decay alone, in one step from the idle's start, not from ``at``: the
            # result then does not depend on the times usage was asked for between.
            since_usage, since = self.idle
            half_life = self.args.half_life_s
            last = now - now % step if step else now
            if last > at:
                boundary = decay(since_usage, last - since, half_life)
            return decay(since_usage, now - since, half_life), now, boundary
        while now > at:
            to = min(now, at - at % step + step) if step else now
            usage = accrue(usage, to - at, self.args.half_life_s, self.index, self.rate * (to - at))
            at = to
            if step and at % step == 0:
                boundary = usage
        return usage, at, boundary

    def _job_rate(self, r: RunningJob) -> npt.NDArray[np.float64]:
        j = r.job
        assert self.state is not None, "a JobBook hands its ledger the state"
        model = self.state.nodes[r.assignments[0].node].gpu_model if r.assignments else ""
        key = (j.account, j.user, j.qos, j.gpu_milli, model)
        rate = self._rates.get(key)
        if rate is None:
            zero = AccountUsage(self.tree, np.zeros(len(self.tree)))
            rate = charge(zero, [r], self.state, self.qos, 1, self.args).usage
            self._rates[key] = rate
        return rate

    def load(self, usage: npt.ArrayLike, at: int) -> None:
        """Take ``usage`` (one value per association, decayed to ``at``) as the
        ledger's, for a driver restoring it from its records. Runs charged
        already keep charging from ``at``; orderings see it at the next view.
        ValueError unless there is one finite, non-negative value per association.
        """
        values = np.array(usage, dtype=np.float64)
        if values.shape != self.usage.shape:
            raise ValueError(f"usage: {len(self.tree)} values expected, got shape {values.shape}")
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError("usage: values must be finite and non-negative")
        self.usage = self.boundary = values
        self.at = at
        self.snapshot_at = None
        if self.idle is not None:
            self.idle = (values, at)

    def start(self, r: RunningJob, now: int) -> None:
        self._accrue(now)
        self.idle = None
        self.charged += 1
        self.rate += self._job_rate(r)

    def stop(self, r: RunningJob, now: int) -> None:
        """Stop charging ``r`` from ``now``, which may be before usage was last charged
        (a driver told of the end late): what it was charged since is taken back."""
        if now < self.at:
            self._refund(self._job_rate(r), now)
        else:
            self._accrue(now)
        self.charged -= 1
        if self.charged:
            self.rate -= self._job_rate(r)
        else:  # exactly zero, not what subtracting every rate left
            self.rate = np.zeros(len(self.tree))
            self.idle = (self.usage, self.at)

    def _refund(self, rate: npt.NDArray[np.float64], since: int) -> None:
        """Take back what ``rate`` was charged from ``since`` to ``at``, in the steps
        ``_stepped`` takes at each multiple of ``recalc_s`` (the usage at the last one
        passed too). Steps taken at other runs' starts and stops decayed it a little
        differently: what is left of that difference is cut at zero."""
        over, t, step = np.zeros(len(self.tree)), since, self.recalc_s
        last = self.at - self.at % step if step else 0
        while t < self.at:
            to = min(self.at, t - t % step + step) if step else self.at
            over = accrue(over, to - t, self.args.half_life_s, self.index, rate * (to - t))
            t = to
            if step and t == last:
                self.boundary = np.maximum(self.boundary - over, 0.0)
        self.usage = np.maximum(self.usage - over, 0.0)
        self.snapshot_at = None  # the usage orderings saw included it: the next view is new

    def current(self, now: int) -> AccountUsage:
        """The usage charged up to ``now``, whenever orderings last saw it (for displays)."""
        return AccountUsage(self.tree, np.maximum(self._stepped(now)[0], 0.0))

    def next_view(self) -> int | None:
        """When ``view`` next gives a new usage (None: at its first call): the next
        multiple of ``recalc_s``, where multifactor's ``calc_period_s`` of the same
        length recomputes priorities, as Slurm's one thread decays usage and
        recomputes priorities together."""
        at, step = self.snapshot_at, self.recalc_s
        if at is None or not step:
            return at
        return at - at % step + step

    def view(self, now: int) -> AccountUsage:
        """The usage orderings see at ``now``: as of the last multiple of ``recalc_s``
        (without a period, as of ``now``)."""
        due = self.next_view()
        if due is None or now >= due:
            step = self.recalc_s
            self._accrue(now - now % step if step else now)
            usage = self.boundary if step else self.usage
            # Subtracting rates can leave -1e-12 where a rate went back to 0.
            self.snapshot = AccountUsage(self.tree, np.maximum(usage, 0.0))
            self.snapshot_at = now
        return self.snapshot
