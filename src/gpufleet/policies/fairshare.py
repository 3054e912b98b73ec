"""Fairshare: usage accounting and Slurm's two fairshare algorithms.

Usage is counted in billable GPU-seconds (GPU-seconds x the GPU model's
billing weight x the QoS usage factor) and decays exponentially with a
half-life, so last month weighs less than last night. It is charged to user
associations and rolls up the account tree.

Two algorithms turn shares and usage into a factor in [0, 1] per user:

* ``classic`` (Slurm before 19.05, ``PriorityFlags=NO_FAIR_TREE``):
  F = 2^(-U_E / S / d), with the effective usage U_E pulled towards the
  parent's so a user pays for their account's overspending.
* ``fair_tree`` (Slurm's default since 19.05): each association's Level
  Fairshare LF = S / U among its siblings; a depth-first walk visiting
  siblings by descending LF ranks every user, so all users of an under-served
  account outrank all users of an over-served sibling.

Everything here is a pure function of the tree, a usage array over its
associations and the arguments.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from gpufleet.core.accounts import AccountTree, AccountUsage, FloatArray, IntArray
from gpufleet.core.job import QoS, RunningJob
from gpufleet.core.model import MILLI
from gpufleet.core.state import ClusterState
from gpufleet.policies.tables import StrictTable

DAY_S = 86_400

# Level Fairshare values this close count as a tie: equal shares over equal
# usage should tie even when float division rounds the two quotients apart.
_TIE_REL = 1e-9


class FairshareArgs(StrictTable):
    """Fairshare settings, with Slurm's name for each in its description."""

    algorithm: Literal["fair_tree", "classic"] = Field(
        "fair_tree",
        description="Fair Tree (Slurm's default) or classic (PriorityFlags=NO_FAIR_TREE).",
    )
    half_life_s: int = Field(
        7 * DAY_S,
        ge=0,
        description="PriorityDecayHalfLife: usage halves every this many seconds; 0: no decay.",
    )
    gpu_billing_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="TRESBillingWeights GRES/gpu:MODEL: billing weight per GPU model; "
        "models not listed weigh 1.",
    )
    dampening_factor: float = Field(
        1.0,
        ge=1.0,
        description="FairShareDampeningFactor: classic only, softens the factor's fall.",
    )
    tied_accounts: Literal["merged", "in_turn"] = Field(
        "merged",
        description="Fair Tree only: sibling accounts of equal Level FS have their users "
        "ranked together (merged, as Slurm's documentation describes) or one account "
        "after another (in_turn, as Slurm's code does).",
    )

    def billing_weight(self, model: str) -> float:
        return self.gpu_billing_weights.get(model, 1.0)


def billable_gpu_seconds(
    gpu_seconds: FloatArray, billing_weight: FloatArray, usage_factor: FloatArray
) -> FloatArray:
    """GPU-seconds x the GPU model's billing weight x the QoS UsageFactor, elementwise."""
    return np.asarray(gpu_seconds * billing_weight * usage_factor, dtype=np.float64)


def decay(usage: FloatArray, elapsed_s: float, half_life_s: float) -> FloatArray:
    """Usage ``elapsed_s`` seconds later: halved every ``half_life_s`` (0: unchanged)."""
    if elapsed_s < 0:
        raise ValueError(f"elapsed_s: time runs forward, got {elapsed_s}")
    if half_life_s < 0:
        raise ValueError(f"half_life_s: must be 0 (no decay) or more, got {half_life_s}")
    if half_life_s == 0:
        return np.array(usage, dtype=np.float64, copy=True)
    return np.asarray(usage * 2.0 ** (-elapsed_s / half_life_s), dtype=np.float64)


def accrue(
    usage: FloatArray,
    elapsed_s: float,
    half_life_s: float,
    association: IntArray,
    billable: FloatArray,
) -> FloatArray:
    """Decay ``usage`` over ``elapsed_s``, then charge ``billable[k]`` to ``association[k]``.

    Returns a new array over the same associations; ``usage`` is not changed.
    """
    charged = np.bincount(association, weights=billable, minlength=len(usage))
    return decay(usage, elapsed_s, half_life_s) + charged


def charge(
    accounts: AccountUsage,
    running: Sequence[RunningJob],
    state: ClusterState,
    qos: Mapping[str, QoS],
    elapsed_s: int,
    args: FairshareArgs,
) -> AccountUsage:
    """Usage ``elapsed_s`` seconds on: decayed, plus what each running job billed meanwhile.

    A job bills GPUs held (milli-GPU / 1000, MIG slices by compute share) x
    ``elapsed_s`` x the billing weight of its first node's GPU model x its
    QoS UsageFactor, to its (account, user) association, or to the account
    where the user has none with it (``AccountTree.charged_to``). Each job is
    billed for the whole interval, so drivers call this at every start and
    end. Jobs of accounts the tree does not hold bill nobody.
    """
    tree = accounts.tree
    assoc = tree.charged_to([r.job.account for r in running], [r.job.user for r in running])
    known = assoc >= 0
    gpu_s = np.array([r.job.gpu_milli / MILLI * elapsed_s for r in running])
    weight = np.array([_billing_weight(r, state, args) for r in running])
    factor = np.array([qos[r.job.qos].usage_factor if r.job.qos in qos else 1.0 for r in running])
    billed = billable_gpu_seconds(gpu_s, weight, factor)
    usage = accrue(accounts.usage, elapsed_s, args.half_life_s, assoc[known], billed[known])
    return AccountUsage(tree, usage)


def _billing_weight(r: RunningJob, state: ClusterState, args: FairshareArgs) -> float:
    model = state.nodes[r.assignments[0].node].gpu_model if r.assignments else ""
    return args.billing_weight(model)


@dataclass(frozen=True, slots=True)
class FairshareTable:
    """What ``sshare -l`` shows, one entry per association of the tree.

    ``norm_shares`` is classic's share of the whole cluster, or Fair Tree's
    share among siblings (as ``sshare`` shows each). ``usage`` is the
    rolled-up raw usage. ``norm_usage`` is that over the
    cluster total and ``effective_usage`` the algorithm's U: classic's U_E, or
    Fair Tree's usage over the parent's. ``level_fs`` is S / U among siblings
    (infinite without usage). ``factor`` is the fairshare factor in [0, 1]; it
    is what users' jobs get, and Fair Tree leaves it 0 on accounts.
    """

    norm_shares: FloatArray
    usage: FloatArray
    norm_usage: FloatArray
    effective_usage: FloatArray
    level_fs: FloatArray
    factor: FloatArray


def classic(
    tree: AccountTree,
    usage: FloatArray,
    *,
    total_usage: float | None = None,
    dampening_factor: float = 1.0,
) -> FairshareTable:
    """Slurm's classic fairshare: F = 2^(-U_E / S / d) for every association.

    ``usage`` is what was charged to each association directly. Normalised
    usage is rolled-up usage over ``total_usage`` (Slurm's R_H), which
    defaults to everything charged in the tree; a larger total (the machine's
    capacity over the period, say) leaves part of the cluster unaccounted for.
    Top-level accounts have U_E = U; below them
    U_E = U + (U_E,parent - U) x shares / siblings' shares. A ``PARENT`` user
    takes its account's U_E and S, so its account's factor.
    """
    raw, local_s, _, level_fs = _levels(tree, usage)
    total = raw[0] if total_usage is None else total_usage
    if total < raw[0] * (1 - _TIE_REL):
        raise ValueError(f"total_usage: {total} is less than the usage charged, {raw[0]}")
    norm_usage = raw / total if total > 0 else np.zeros(len(tree))
    effective = norm_usage.copy()
    for i in range(1, len(tree)):
        p = tree.parent[i]
        if tree.use_parent[i]:
            effective[i] = effective[p]
        elif p:
            effective[i] = norm_usage[i] + (effective[p] - norm_usage[i]) * local_s[i]
    norm_shares = tree.normalized_shares()
    factor = 2.0 ** (-effective / norm_shares / dampening_factor)
    return FairshareTable(norm_shares, raw, norm_usage, effective, level_fs, factor)


def fair_tree(
    tree: AccountTree,
    usage: FloatArray,
    *,
    tied_accounts: Literal["merged", "in_turn"] = "merged",
) -> FairshareTable:
    """Slurm's Fair Tree: users ranked by a depth-first walk in descending Level Fairshare.

    Siblings are visited by descending LF = S / U, where S and U are shares
    and usage normalised among the siblings. With N users, the k-th user met
    (from 0) gets (N - k) / N, so the best-served user gets 1/N and the
    first 1. Ties, as Slurm resolves them: sibling users with equal LF share
    the rank of the first of them; a user sorts before a sibling account of
    equal LF and that account's first user shares the user's rank. Sibling
    accounts of equal LF have their children merged and ranked together
    (``tied_accounts="merged"``, Slurm's documentation), or are visited one
    after another, each one's first user sharing the rank of the user met
    just before (``"in_turn"``, what Slurm's code does). A ``PARENT`` user
    has LF infinity, so it comes first among its siblings.
    """
    raw, _, local_u, level_fs = _levels(tree, usage)
    factor = np.zeros(len(tree))
    n_users = tree.n_users
    ranker = _Ranker(tree, level_fs, factor, n_users, merge=tied_accounts == "merged")
    ranker.visit(list(tree.children[0]), tied_in=False)
    total = raw[0]
    norm_usage = raw / total if total > 0 else np.zeros(len(tree))
    return FairshareTable(tree.local_shares(), raw, norm_usage, local_u, level_fs, factor)


def fairshare_table(tree: AccountTree, usage: FloatArray, args: FairshareArgs) -> FairshareTable:
    """The ``sshare -l`` table of the algorithm ``args`` selects."""
    if args.algorithm == "classic":
        return classic(tree, usage, dampening_factor=args.dampening_factor)
    return fair_tree(tree, usage, tied_accounts=args.tied_accounts)


def factors(tree: AccountTree, usage: FloatArray, args: FairshareArgs) -> FloatArray:
    """Fairshare factor per association with the algorithm ``args`` selects."""
    return fairshare_table(tree, usage, args).factor


def _levels(
    tree: AccountTree, usage: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Rolled-up usage, and shares, usage and S / U normalised among siblings."""
    if len(usage) != len(tree):
        raise ValueError(f"usage: {len(usage)} entries for {len(tree)} associations")
    if np.any(usage < 0) or not np.all(np.isfinite(usage)):
        raise ValueError("usage: must be finite and zero or more")
    raw = tree.rollup(usage)
    local_s = tree.local_shares()
    parent_raw = raw[np.maximum(tree.parent, 0)]
    local_u = np.divide(raw, parent_raw, out=np.zeros(len(tree)), where=parent_raw > 0)
    with np.errstate(over="ignore"):  # a vanishing share of usage is LF infinity: correct
        level_fs = np.divide(local_s, local_u, out=np.full(len(tree), np.inf), where=local_u > 0)
    level_fs[tree.use_parent] = np.inf  # Slurm: first among its siblings, subject to ties
    return raw, local_s, local_u, level_fs


class _Ranker:
    """Fair Tree's depth-first walk; ``rank`` is shared by ties, ``untied`` counts down."""

    def __init__(
        self,
        tree: AccountTree,
        level_fs: FloatArray,
        factor: FloatArray,
        n_users: int,
        *,
        merge: bool,
    ) -> None:
        self.tree, self.level_fs, self.factor, self.n_users = tree, level_fs, factor, n_users
        self.rank = self.untied = n_users
        self.merge = merge

    def visit(self, siblings: list[int], tied_in: bool) -> None:
        lf, is_user = self.level_fs, self.tree.is_user
        # Tie classes first (descending LF, near-equal values together), so that
        # rounding cannot put a user after an account it ties with.
        by_lf = sorted(siblings, key=lambda i: -lf[i])
        tie = {by_lf[0]: 0} if by_lf else {}
        for before, i in itertools.pairwise(by_lf):
            tie[i] = tie[before] + (not _same(lf[before], lf[i]))
        # Within a class users before accounts, then tree order, for determinism.
        order = sorted(siblings, key=lambda i: (tie[i], not is_user[i], i))
        k = 0
        while k < len(order):
            i = order[k]
            tied = tied_in if k == 0 else tie[order[k - 1]] == tie[i]
            if is_user[i]:
                if not tied:
                    self.rank = self.untied
                self.factor[i] = self.rank / self.n_users
                self.untied -= 1
                k += 1
                continue
            group = [i]
            k += 1
            while self.merge and k < len(order) and tie[order[k]] == tie[i]:
                group.append(order[k])
                k += 1
            self.visit([c for a in group for c in self.tree.children[a]], tied)


def _same(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=_TIE_REL)
