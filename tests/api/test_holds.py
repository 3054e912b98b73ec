"""Holds over HTTP: a user cannot release an operator's (admin) hold on its job."""

from __future__ import annotations

from api.conftest import Cluster
from api.helpers import job, problem


def test_a_user_cannot_release_an_admin_hold(cluster: Cluster) -> None:
    with cluster.client("alice") as alice, cluster.client("operator") as operator:
        submitted = alice.post("/v1/jobs", json=job(cluster.workdir, hold=True))
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["job_id"]
        assert alice.get(f"/v1/jobs/{job_id}").json()["hold"] == "user"
        held = operator.post(f"/v1/jobs/{job_id}/hold").json()
        assert (held["held"], held["hold"], held["reason"]) == (True, "admin", "JobHeldAdmin")
        refused = problem(alice.post(f"/v1/jobs/{job_id}/release"), 403)
        assert refused["detail"].startswith(f"job {job_id}: held by an operator or admin")
        assert alice.get(f"/v1/jobs/{job_id}").json()["hold"] == "admin"
        released = operator.post(f"/v1/jobs/{job_id}/release").json()
        assert (released["held"], released["hold"]) == (False, None)
        alice.post(f"/v1/jobs/{job_id}/cancel")
