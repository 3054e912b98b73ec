"""Fairshare for the live controller: the engine's usage ledger, rebuilt from the store.

The controller charges usage through the same ``engine.ledger.UsageLedger``
the simulator uses, so orderings see the same numbers in both drivers. The
ledger lives in memory; on start (and after a configuration patch) its
usage is rebuilt from the store's ``job_runs``: every run bills its
GPU-seconds x the billing weight of its first node's GPU model x its QoS
usage factor, decayed continuously to now. The live ledger decays in steps
(at each start, stop and cycle), so the two differ by a relative amount of
the order of (step / half-life), negligible for half-lives of days.

``table`` is what ``sshare -l`` prints: per association its raw and
normalised shares, raw (rolled-up) usage, effective usage and factor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import sqlalchemy as sa

from gpufleet.adapters.store import tables as t
from gpufleet.controller.views import FairshareRow
from gpufleet.core.accounts import AccountTree
from gpufleet.core.job import QoS
from gpufleet.core.model import MILLI
from gpufleet.core.state import ClusterState
from gpufleet.engine.ledger import UsageLedger
from gpufleet.policies.fairshare import FairshareArgs, billable_gpu_seconds, fairshare_table

FORGOTTEN_HALF_LIVES = 40
"""Runs that ended this many half-lives ago weigh under 1e-12 of their usage: skipped."""


def ledger(
    tree: AccountTree | None, args: FairshareArgs, qos: Mapping[str, QoS], recalc_s: int
) -> UsageLedger | None:
    """A ledger over ``tree``; None without a tree holding any user association."""
    if tree is None or tree.n_users == 0:
        return None
    return UsageLedger(tree, args, qos, recalc_s)


def rebuild(conn: sa.Connection, book_ledger: UsageLedger, state: ClusterState, now: int) -> None:
    """Set the ledger's usage to what the stored runs billed up to ``now``, decayed to ``now``.

    Call before the running jobs are restored into the book: restoring adds
    their rate from ``now`` on, and this already counted them up to ``now``.
    """
    tree, args = book_ledger.tree, book_ledger.args
    half = args.half_life_s
    r = t.job_runs
    stmt = sa.select(
        r.c.start_time, r.c.end_time, r.c.node_list, r.c.gpu_milli, r.c.user, r.c.account, r.c.qos
    ).where(r.c.start_time < now)
    if half > 0:
        oldest = now - FORGOTTEN_HALF_LIVES * half
        stmt = stmt.where(sa.or_(r.c.end_time.is_(None), r.c.end_time > oldest))
    rows = conn.execute(stmt).all()
    usage = np.zeros(len(tree))
    if rows:
        start = np.array([row.start_time for row in rows], dtype=np.float64)
        end = np.array(
            [min(row.end_time if row.end_time is not None else now, now) for row in rows],
            dtype=np.float64,
        )
        end = np.maximum(end, start)
        if half > 0:
            # The integral of 2^(-(now - s) / h) ds from start to end.
            late, early = 2.0 ** (-(now - end) / half), 2.0 ** (-(now - start) / half)
            seconds = half / math.log(2) * (late - early)
        else:
            seconds = end - start
        gpu_s = np.array([row.gpu_milli for row in rows], dtype=np.float64) / MILLI * seconds
        weight = np.array([args.billing_weight(_model(state, row.node_list)) for row in rows])
        factor = np.array([qos_factor(book_ledger.qos, row.qos) for row in rows])
        assoc = tree.charged_to([row.account for row in rows], [row.user for row in rows])
        known = assoc >= 0
        billed = billable_gpu_seconds(gpu_s, weight, factor)
        usage = np.bincount(assoc[known], weights=billed[known], minlength=len(tree)).astype(
            np.float64
        )
    book_ledger.load(usage, now)


def qos_factor(qos: Mapping[str, QoS], name: str) -> float:
    return qos[name].usage_factor if name in qos else 1.0


def _model(state: ClusterState, node_list: object) -> str:
    if isinstance(node_list, list) and node_list:
        i = state.index.get(str(node_list[0]))
        if i is not None:
            return state.nodes[i].gpu_model
    return ""


def table(book_ledger: UsageLedger, now: int) -> list[FairshareRow]:
    """Every association but the root in tree order, as ``sshare -l`` shows them.

    Usage and factors are current at ``now`` (as ``sshare`` reads the live
    usage), while orderings see them only every ``recalc_s``.
    """
    tree, args = book_ledger.tree, book_ledger.args
    usage = book_ledger.current(now).usage
    fs = fairshare_table(tree, usage, args)
    rows = []
    for i in range(1, len(tree)):
        is_user = bool(tree.is_user[i])
        rows.append(
            FairshareRow(
                account=tree.names[int(tree.parent[i])] if is_user else tree.names[i],
                user=tree.names[i] if is_user else None,
                shares=float(tree.shares[i]),
                normalized_shares=float(fs.norm_shares[i]),
                usage=float(fs.usage[i]),
                normalized_usage=float(fs.norm_usage[i]),
                effective_usage=float(fs.effective_usage[i]),
                factor=float(fs.factor[i]) if is_user else None,
            )
        )
    return rows
