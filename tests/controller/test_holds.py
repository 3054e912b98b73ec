"""User and admin holds, as Slurm has them, on SQLite and PostgreSQL.

The owner's hold (or a submission held) is a user hold, ``JobHeldUser``,
that the owner may release; an operator's or admin's hold is an admin hold,
``JobHeldAdmin``, that only an operator or admin may release.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from controller.harness import ADMIN, ANA, OPERATOR, Cluster, spec
from gpufleet.adapters.store import tables as t
from gpufleet.controller.errors import Conflict, Forbidden
from gpufleet.controller.live import hold_kind
from gpufleet.controller.service import Principal
from store.databases import Database, job_row


def hold_of(cluster: Cluster, job_id: str) -> tuple[str, str | None, str]:
    """The job's state, hold kind and reason, as its owner sees them."""
    out = cluster.ctl.get_job(principal=ANA, job_id=job_id)
    return out.state, out.hold, out.reason


def test_a_submission_held_is_a_user_hold_from_the_start(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec(hold=True)).job_id
    assert hold_of(cluster, job) == ("PENDING", "user", "JobHeldUser")  # before any cycle
    cluster.ctl.run_cycle_now()
    assert hold_of(cluster, job) == ("PENDING", "user", "JobHeldUser")


def test_the_owner_holds_and_releases_its_own_job(cluster: Cluster) -> None:
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec(begin=cluster.clock.now() + 3600)).job_id
    out = ctl.hold_job(principal=ANA, job_id=job)
    assert (out.held, out.hold, out.reason) == (True, "user", "JobHeldUser")
    out = ctl.hold_job(principal=ANA, job_id=job)  # already held: quietly so, as Slurm's
    assert (out.held, out.hold, out.reason) == (True, "user", "JobHeldUser")
    out = ctl.release_job(principal=ANA, job_id=job)
    assert (out.held, out.hold) == (False, None)
    ctl.run_cycle_now()
    assert hold_of(cluster, job) == ("PENDING", None, "BeginTime")


@pytest.mark.parametrize("who", [OPERATOR, ADMIN], ids=["operator", "admin"])
def test_an_operators_hold_is_an_admin_hold_the_owner_cannot_release(
    cluster: Cluster, who: Principal
) -> None:
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec()).job_id
    out = ctl.hold_job(principal=who, job_id=job)
    assert (out.held, out.hold, out.reason) == (True, "admin", "JobHeldAdmin")
    with pytest.raises(Forbidden, match=f"^job {job}: held by an operator or admin"):
        ctl.release_job(principal=ANA, job_id=job)
    assert ctl.hold_job(principal=ANA, job_id=job).hold == "admin"  # never lowered
    ctl.run_cycle_now()
    assert hold_of(cluster, job) == ("PENDING", "admin", "JobHeldAdmin")  # nothing released
    assert ctl.release_job(principal=who, job_id=job).hold is None
    ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"


def test_an_operator_turns_a_user_hold_into_an_admin_hold(cluster: Cluster) -> None:
    ctl = cluster.ctl
    job = ctl.submit(principal=ANA, spec=spec(hold=True)).job_id
    assert ctl.hold_job(principal=OPERATOR, job_id=job).hold == "admin"
    assert ctl.hold_job(principal=OPERATOR, job_id=job).hold == "admin"  # already one
    with pytest.raises(Forbidden):
        ctl.release_job(principal=ANA, job_id=job)


def test_an_operator_may_release_a_user_hold(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec(hold=True)).job_id
    assert cluster.ctl.release_job(principal=OPERATOR, job_id=job).hold is None
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"


def test_an_admin_hold_on_one_task_keeps_the_owner_from_releasing_the_array(
    cluster: Cluster,
) -> None:
    ctl = cluster.ctl
    array = ctl.submit(principal=ANA, spec=spec(array="0-2", hold=True)).job_id
    ctl.hold_job(principal=OPERATOR, job_id=f"{array}_1")
    with pytest.raises(Forbidden, match=f"^job {array}_1: "):
        ctl.release_job(principal=ANA, job_id=array)
    holds = {j.job_id: j.hold for j in ctl.list_jobs(principal=ANA).jobs}
    # the refusal released no task, not even the ones under a user hold
    assert holds == {f"{array}_0": "user", f"{array}_1": "admin", f"{array}_2": "user"}


def test_the_hold_kind_survives_a_restart(cluster: Cluster) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.hold_job(principal=OPERATOR, job_id=job)
    cluster.restart()
    assert hold_of(cluster, job) == ("PENDING", "admin", "JobHeldAdmin")
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "PENDING"
    with pytest.raises(Forbidden):
        cluster.ctl.release_job(principal=ANA, job_id=job)


def test_jobs_held_before_the_hold_kinds_become_user_holds(db: Database) -> None:
    store = db.open()
    store.migrate("0003")
    rows = [job_row(pk, held=held) for pk, held in ((1, True), (2, False))]
    with store.write() as conn:
        conn.execute(t.jobs.insert(), rows)
    store.migrate()
    with store.read() as conn:
        found = conn.execute(
            sa.select(t.jobs.c.job_id, t.jobs.c.held, t.jobs.c.admin_hold).order_by(t.jobs.c.id)
        ).all()
    store.close()
    assert [(r.job_id, hold_kind(r.held, r.admin_hold)) for r in found] == [
        ("1", "user"),
        ("2", None),
    ]


def test_holding_a_held_array_succeeds_but_a_running_job_cannot_be_held(
    cluster: Cluster,
) -> None:
    ctl = cluster.ctl
    array = ctl.submit(principal=ANA, spec=spec(array="0-1", hold=True)).job_id
    ctl.hold_job(principal=ANA, job_id=array)
    assert {j.hold for j in ctl.list_jobs(principal=ANA).jobs} == {"user"}
    job = ctl.submit(principal=ANA, spec=spec()).job_id
    ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"
    with pytest.raises(Conflict, match=f"^job {job}: cannot hold a job that is RUNNING"):
        ctl.hold_job(principal=ANA, job_id=job)


@pytest.mark.parametrize("who", [ANA, OPERATOR], ids=["user", "operator"])
def test_a_held_job_cancelled_is_held_no_more(cluster: Cluster, who: Principal) -> None:
    job = cluster.ctl.submit(principal=ANA, spec=spec()).job_id
    cluster.ctl.hold_job(principal=who, job_id=job)
    out = cluster.ctl.cancel_job(principal=who, job_id=job)
    assert (out.state, out.held, out.hold) == ("CANCELLED", False, None)
    assert "Held" not in out.reason
    cluster.restart()  # the store says so too
    out = cluster.ctl.get_job(principal=ANA, job_id=job)
    assert (out.state, out.held, out.hold) == ("CANCELLED", False, None)
