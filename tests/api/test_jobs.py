"""Jobs over HTTP: submission, listing, actions and ownership, on both stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.conftest import Cluster
from api.helpers import fields, job, problem


def _submit(cluster: Cluster, who: str, **spec: object) -> str:
    with cluster.client(who) as c:
        response = c.post("/v1/jobs", json=job(cluster.workdir, **spec))
    assert response.status_code == 201, response.text
    job_id: str = response.json()["job_id"]
    return job_id


def test_submit_then_show_and_list(cluster: Cluster) -> None:
    job_id = _submit(cluster, "alice", name="train", hold=True)
    with cluster.client("alice") as c:
        shown = c.get(f"/v1/jobs/{job_id}").json()
        page = c.get("/v1/jobs", params={"state": ["PENDING"], "limit": 1000}).json()
    assert (shown["job_id"], shown["name"], shown["user"]) == (job_id, "train", "alice")
    assert shown["state"] == "PENDING" and shown["held"]
    assert shown["partition"] == "gpu" and shown["account"] == "vision"
    assert job_id in {j["job_id"] for j in page["jobs"]}


def test_a_user_sees_and_touches_only_its_own_jobs(cluster: Cluster) -> None:
    theirs = _submit(cluster, "bob", hold=True)
    mine = _submit(cluster, "alice", hold=True)
    with cluster.client("alice") as c:
        listed = {j["user"] for j in c.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]}
        assert listed == {"alice"}
        problem(c.get("/v1/jobs", params={"user": "bob"}), 403)
        problem(c.get(f"/v1/jobs/{theirs}"), 404)
        problem(c.get(f"/v1/jobs/{theirs}/output"), 404)
        for action in ("cancel", "hold", "release", "requeue"):
            problem(c.post(f"/v1/jobs/{theirs}/{action}"), 404)
        assert c.get(f"/v1/jobs/{mine}").status_code == 200
    with cluster.client("bob") as c:
        assert c.get(f"/v1/jobs/{theirs}").json()["state"] == "PENDING"


def test_an_operator_sees_and_cancels_anyones_job(cluster: Cluster) -> None:
    _submit(cluster, "alice", hold=True)
    theirs = _submit(cluster, "bob", hold=True)
    with cluster.client("operator") as c:
        users = {j["user"] for j in c.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]}
        assert {"alice", "bob"} <= users
        cancelled = c.post(f"/v1/jobs/{theirs}/cancel", json={"reason": "maintenance"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "CANCELLED"


def test_hold_release_cancel_and_their_conflicts(cluster: Cluster) -> None:
    job_id = _submit(cluster, "alice", hold=True)
    with cluster.client("alice") as c:
        problem(c.post(f"/v1/jobs/{job_id}/hold"), 409)  # already held
        assert c.post(f"/v1/jobs/{job_id}/release").json()["held"] is False
        problem(c.post(f"/v1/jobs/{job_id}/release"), 409)  # not held
        assert c.post(f"/v1/jobs/{job_id}/hold").json()["held"] is True
        assert c.post(f"/v1/jobs/{job_id}/cancel").json()["state"] == "CANCELLED"
        problem(c.post(f"/v1/jobs/{job_id}/cancel"), 409)  # already ended
        requeued = c.post(f"/v1/jobs/{job_id}/requeue")
        assert requeued.status_code == 200, requeued.text
        assert requeued.json()["state"] == "PENDING"
        problem(c.post(f"/v1/jobs/{job_id}/requeue"), 409)  # pending
        problem(c.post("/v1/jobs/999999999/cancel"), 404)


def test_a_retried_request_id_returns_the_first_job(cluster: Cluster) -> None:
    spec = job(cluster.workdir, hold=True, request_id=f"retry-{cluster.url}")
    with cluster.client("alice") as c:
        first = c.post("/v1/jobs", json=spec)
        again = c.post("/v1/jobs", json=spec)
    with cluster.client("bob") as c:
        other_user = c.post("/v1/jobs", json=spec)
    assert (first.status_code, again.status_code, other_user.status_code) == (201, 200, 201)
    assert again.json() == {**first.json(), "duplicate": True}
    assert other_user.json()["job_id"] != first.json()["job_id"]


def test_an_array_submission_counts_its_tasks(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        submitted = c.post("/v1/jobs", json=job(cluster.workdir, array="0-3", hold=True))
        assert submitted.status_code == 201, submitted.text
        assert submitted.json()["array_task_count"] == 4
        array_id = submitted.json()["job_id"]
        task = c.get(f"/v1/jobs/{array_id}_2").json()
    assert (task["array_job_id"], task["array_task_id"]) == (array_id, 2)


def test_output_is_read_by_offset(cluster: Cluster) -> None:
    out = cluster.workdir / "out-%j.txt"
    job_id = _submit(cluster, "alice", hold=True, stdout=str(out))
    with cluster.client("alice") as c:
        path = Path(c.get(f"/v1/jobs/{job_id}").json()["stdout_path"])
        assert path == cluster.workdir / f"out-{job_id}.txt"
        problem(c.get(f"/v1/jobs/{job_id}/output"), 404)  # not written yet
        path.write_text("hello\nworld\n")
        whole = c.get(f"/v1/jobs/{job_id}/output").json()
        tail = c.get(f"/v1/jobs/{job_id}/output", params={"offset": 6}).json()
        problem(c.get(f"/v1/jobs/{job_id}/output", params={"stream": "stdin"}), 422)
    assert (whole["data"], whole["next_offset"]) == ("hello\nworld\n", 12)
    assert (tail["data"], tail["offset"]) == ("world\n", 6)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodes": 0}, "body.nodes"),  # at least one node
        ({"nodes": -1}, "body.nodes"),
        ({"nodes": 10**12}, "body.nodes"),  # over MAX_NODES
        ({"gpus_per_node": 65}, "body.gpus_per_node"),
        ({"gpu_milli": 1000}, "body.gpu_milli"),  # a share is below one GPU
        ({"time_limit_s": 0}, "body.time_limit_s"),
        ({"mem_mib": 2**70}, "body.mem_mib"),
        ({"workdir": ""}, "body.workdir"),
        ({"script": "x" * 1_000_001}, "body.script"),
        ({"colour": "red"}, "body.colour"),  # unknown keys are refused, not ignored
        ({"partition": "nope"}, "body.partition"),  # checked by the controller
        ({"qos": "nope"}, "body.qos"),
        ({"array": "5-1"}, "body.array"),
        ({"dependency": "afterok:x"}, "body.dependency"),
    ],
)
def test_bad_submissions_name_the_field(
    cluster: Cluster, spec: dict[str, object], field: str
) -> None:
    with cluster.client("alice") as c:
        assert field in fields(c.post("/v1/jobs", json={**job(cluster.workdir), **spec}))


def test_an_oversize_submission_is_413(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        problem(c.post("/v1/jobs", json=job(cluster.workdir, script="x" * (3 << 20))), 413)
