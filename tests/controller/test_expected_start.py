"""A pending job's estimated start is backfill's plan of the last cycle, never an old one.

The queue (``gpufleet queue``, the dashboard) shows ``expected_start``: a
job the last cycle planned no start for (held since, or overtaken) shows
none, rather than a time from an earlier plan that nothing holds to any
more.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.harness import ANA, Cluster, spec
from gpufleet.policies.backfill import BackfillArgs
from gpufleet.policies.config import Policy, PolicyConfig
from store.databases import Database

EASY = Policy(PolicyConfig(backfill=BackfillArgs(mode="easy")))


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    c = Cluster(db, profile_factory=lambda workload: EASY.profile(workload))
    c.register("n1")
    yield c
    c.ctl.stop()


def test_a_job_held_after_its_start_was_planned_shows_no_estimate(cluster: Cluster) -> None:
    ctl = cluster.ctl
    # n1's 4 GPUs are taken for an hour; the next 4-GPU job is planned at that end.
    ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, time_limit_s=3600))
    ctl.run_cycle_now()
    waiting = ctl.submit(principal=ANA, spec=spec(gpus_per_node=4, time_limit_s=600)).job_id
    ctl.run_cycle_now()
    planned = ctl.get_job(principal=ANA, job_id=waiting).expected_start
    assert planned == pytest.approx(cluster.clock.now() + 3600, abs=60)
    ctl.hold_job(principal=ANA, job_id=waiting)
    ctl.run_cycle_now()
    held = ctl.get_job(principal=ANA, job_id=waiting)
    assert (held.reason, held.expected_start) == ("JobHeldUser", None)
    ctl.release_job(principal=ANA, job_id=waiting)
    ctl.run_cycle_now()
    assert ctl.get_job(principal=ANA, job_id=waiting).expected_start == planned
