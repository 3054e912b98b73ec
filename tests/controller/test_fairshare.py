"""Fairshare through the engine's usage ledger: the sshare view, ordering, and restarts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.harness import ANA, BOB, OPERATOR, Cluster, spec
from gpufleet.api.agent_schemas import RunReport
from gpufleet.controller.service import Principal
from gpufleet.core.accounts import Account, AccountTree, User
from gpufleet.policies.fairshare import FairshareArgs
from store.databases import Database

HOUR = 3600
TREE = AccountTree([Account("vision"), Account("nlp")], [User("ana", "vision"), User("bob", "nlp")])


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    c = Cluster(
        db,
        accounts=TREE,
        fairshare=FairshareArgs(algorithm="classic", half_life_s=0),
        priority_calc_s=1,
        heartbeat_timeout_s=1e9,  # the agents here sync only when a test needs them to
    )
    c.register()
    yield c
    c.ctl.stop()


def run_for(cluster: Cluster, who: Principal, seconds: float, gpus: int) -> str:
    job = cluster.ctl.submit(principal=who, spec=spec(gpus_per_node=gpus)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    cluster.clock.advance(seconds)
    cluster.exit(node, job, 1)
    return job


def rows(cluster: Cluster) -> dict[tuple[str, str | None], tuple[float, float, float | None]]:
    return {
        (r.account, r.user): (r.usage, r.effective_usage, r.factor)
        for r in cluster.ctl.fairshare(principal=OPERATOR)
    }


def test_the_view_shows_usage_shares_and_factors_like_sshare(cluster: Cluster) -> None:
    run_for(cluster, ANA, HOUR, 2)  # 2 GPUs x 3600 s = 7200 billable GPU-s, no decay
    cluster.clock.advance(1)
    table = rows(cluster)
    assert table[("vision", "ana")][0] == pytest.approx(7200)
    assert table[("vision", None)][0] == pytest.approx(7200)  # rolled up
    assert table[("nlp", "bob")][0] == 0
    # classic: U_E(ana) = 1 (all usage), S = 0.5 -> F = 2^(-1/0.5) = 0.25; bob 2^0 = 1.
    assert table[("vision", "ana")][2] == pytest.approx(0.25)
    assert table[("nlp", "bob")][2] == pytest.approx(1.0)
    shares = {r.user: r.normalized_shares for r in cluster.ctl.fairshare(principal=OPERATOR)}
    assert shares["ana"] == pytest.approx(0.5)
    # A user sees the accounts and its own row only.
    assert {r.user for r in cluster.ctl.fairshare(principal=BOB)} == {None, "bob"}


def test_the_user_with_less_usage_goes_first(cluster: Cluster) -> None:
    run_for(cluster, ANA, HOUR, 4)
    cluster.clock.advance(5)
    ana = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, nodes=2)).job_id
    cluster.clock.advance(5)
    bob = cluster.ctl.submit(principal=BOB, spec=spec(gpus_per_node=4, nodes=2)).job_id
    cluster.ctl.run_cycle_now()
    # Both want the whole cluster; ana is older but has used it: bob first.
    assert (cluster.state(bob), cluster.state(ana)) == ("RUNNING", "PENDING")


def test_usage_survives_a_restart_running_jobs_included(cluster: Cluster) -> None:
    run_for(cluster, ANA, HOUR, 2)
    job = cluster.ctl.submit(principal=BOB, spec=spec(gpus_per_node=1)).job_id
    cluster.ctl.run_cycle_now()
    cluster.sync(cluster.where(job))
    cluster.clock.advance(600)
    before = rows(cluster)
    cluster.restart()
    after = rows(cluster)
    for key, (usage, _, _) in before.items():
        assert after[key][0] == pytest.approx(usage), key
    assert after[("nlp", "bob")][0] == pytest.approx(600)  # 1 GPU for 600 s so far
    cluster.clock.advance(600)
    cluster.exit(cluster.where(job), job, 1)
    cluster.clock.advance(1)
    assert rows(cluster)[("nlp", "bob")][0] == pytest.approx(1200)


def test_an_operators_job_counts_to_the_account_it_charges(cluster: Cluster) -> None:
    # op has no association with nlp: the usage is the account's, across a restart too.
    job = cluster.ctl.submit(principal=OPERATOR, spec=spec(gpus_per_node=2, account="nlp"))
    cluster.ctl.run_cycle_now()
    cluster.sync(cluster.where(job.job_id))
    cluster.clock.advance(HOUR)
    cluster.exit(cluster.where(job.job_id), job.job_id, 1)
    cluster.clock.advance(1)
    before = rows(cluster)
    assert before[("nlp", None)][0] == pytest.approx(7200)
    assert before[("nlp", "bob")][0] == 0
    assert not any(user == "op" for _, user in before)
    # classic: bob's U_E is pulled to his account's (all the usage): 2^(-1/0.5) = 0.25
    assert before[("nlp", "bob")][2] == pytest.approx(0.25)
    cluster.restart()
    assert rows(cluster)[("nlp", None)][0] == pytest.approx(7200)


def test_usage_decays_by_its_half_life_across_a_restart(db: Database) -> None:
    c = Cluster(
        db,
        accounts=TREE,
        fairshare=FairshareArgs(half_life_s=HOUR),
        priority_calc_s=1,
        heartbeat_timeout_s=1e9,
    )
    c.register()
    try:
        run_for(c, ANA, 60, 1)
        c.clock.advance(HOUR)
        live = rows(c)[("vision", "ana")][0]
        c.restart()
        rebuilt = rows(c)[("vision", "ana")][0]
        # 60 GPU-s halved once. The live ledger charges each second at its period's
        # end (priority_calc_s = 1), decayed since: 0.5 x (1 + d + ... + d^59), d the
        # decay of one second; the rebuild integrates the decay over the minute:
        # 60 x 0.5 x ~1.0058.
        d = 0.5 ** (1 / HOUR)
        assert live == pytest.approx(0.5 * sum(d**k for k in range(60)), rel=1e-9)
        assert rebuilt == pytest.approx(30, rel=1e-2)
    finally:
        c.ctl.stop()


def test_the_view_shows_current_usage_between_recalculations(db: Database) -> None:
    """The default PriorityCalcPeriod (300 s) delays what orderings see, not what sshare shows."""
    c = Cluster(db, accounts=TREE, fairshare=FairshareArgs(half_life_s=0), heartbeat_timeout_s=1e9)
    c.register()
    try:
        assert c.ctl.book.ledger is not None and c.ctl.book.ledger.recalc_s == 300
        rows(c)  # a view right before the run must not pin what later views show
        run_for(c, ANA, 60, 2)
        assert rows(c)[("vision", "ana")][0] == pytest.approx(120)
        assert rows(c)[("vision", None)][0] == pytest.approx(120)
    finally:
        c.ctl.stop()


def test_a_late_report_bills_the_run_to_when_it_ended(cluster: Cluster) -> None:
    """An agent down when its run ended reports it later: the run is billed, live and
    as rebuilt from the store at a restart, to the end the node reports."""
    job = cluster.ctl.submit(principal=ANA, spec=spec(gpus_per_node=2)).job_id
    cluster.ctl.run_cycle_now()
    node = cluster.where(job)
    cluster.sync(node)
    start = cluster.clock.now()
    cluster.clock.advance(HOUR)
    cluster.ctl.run_cycle_now()  # usage charged meanwhile, past the run's end
    report = RunReport(job_id=job, run=1, state="exited", exit_code=0, at=start + 600)
    cluster.sync(node, [report])
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.end_time) == ("COMPLETED", start + 600)
    cluster.clock.advance(1)
    assert rows(cluster)[("vision", "ana")][0] == pytest.approx(1200)  # 2 GPUs x 600 s
    cluster.restart()
    assert rows(cluster)[("vision", "ana")][0] == pytest.approx(1200)
