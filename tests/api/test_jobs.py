"""Jobs over HTTP: submission, listing, actions and ownership, on both stores."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
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
        held = c.post(f"/v1/jobs/{job_id}/hold")  # already held: quietly, as Slurm's
        assert (held.status_code, held.json()["hold"]) == (200, "user")
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


def _started(cluster: Cluster, **spec: object) -> str:
    """A job of alice's started on n1 by a fake agent that runs jobs as this process's uid."""
    inventory = {
        "names": "n1",
        "cpu_milli": 16000,
        "memory_mib": 65536,
        "gpus": {"model": "A100-80GB", "count": 4},
    }
    with cluster.client("n1") as c:
        body = {"inventory": inventory, "facts": {"job_uid": os.geteuid()}}
        assert c.post("/v1/agents/n1/register", json=body).status_code == 200
    job_id = _submit(cluster, "alice", nodelist=["n1"], **spec)
    deadline = time.monotonic() + 20
    with cluster.client("n1") as c:
        while time.monotonic() < deadline:
            reply = c.post("/v1/agents/n1/sync", json={"wait_s": 1})
            assert reply.status_code == 200, reply.text
            launches = [j for j in reply.json()["jobs_to_start"] if j["job_id"] == job_id]
            if launches:
                report = {"job_id": job_id, "run": launches[0]["run"], "state": "exited"}
                report |= {"exit_code": 0, "at": time.time()}
                assert c.post("/v1/agents/n1/sync", json={"reports": [report]}).status_code == 200
                return job_id
    raise AssertionError(f"job {job_id} never reached n1")


def test_output_is_read_by_offset(cluster: Cluster) -> None:
    out = cluster.workdir / "out-%j.txt"
    job_id = _submit(cluster, "alice", hold=True, stdout=str(out))
    with cluster.client("alice") as c:
        path = Path(c.get(f"/v1/jobs/{job_id}").json()["stdout_path"])
        assert path == cluster.workdir / f"out-{job_id}.txt"
        problem(c.get(f"/v1/jobs/{job_id}/output"), 404)  # not started
    job_id = _started(cluster, stdout=str(out))
    path = cluster.workdir / f"out-{job_id}.txt"
    with cluster.client("alice") as c:
        problem(c.get(f"/v1/jobs/{job_id}/output"), 404)  # not written yet
        path.write_text("hello\nworld\n")
        whole = c.get(f"/v1/jobs/{job_id}/output").json()
        tail = c.get(f"/v1/jobs/{job_id}/output", params={"offset": 6}).json()
        problem(c.get(f"/v1/jobs/{job_id}/output", params={"stream": "stdin"}), 422)
    assert (whole["data"], whole["next_offset"], whole["eof"]) == ("hello\nworld\n", 12, True)
    assert (tail["data"], tail["offset"]) == ("world\n", 6)


def test_output_serves_no_file_the_run_did_not_write(cluster: Cluster) -> None:
    # A file that was there before the job: the admin token of `gpufleet up`, /etc/passwd.
    secret = cluster.workdir / "admin.token"
    secret.write_text("the admin's secret\n")
    os.utime(secret, (time.time() - 3600, time.time() - 3600))
    held = _submit(cluster, "alice", hold=True, stdout=str(secret))
    with cluster.client("alice") as c:
        assert "not started" in problem(c.get(f"/v1/jobs/{held}/output"), 404)["detail"]
    refused = {
        "old": (str(secret), "not written by the job's run"),
        "passwd": ("/etc/passwd", "not"),
        "link": (str(cluster.workdir / "link-%j"), "not a regular file"),
        "other": (str(cluster.workdir / "other-%j"), "not owned by the job's user"),
    }
    if cluster.controller.store.is_sqlite:  # its database, written all the time
        database = str(cluster.controller.store.url.database)
        refused["store"] = (database, "in the controller's data directory")
    for name, (stdout, why) in refused.items():
        job_id = _started(cluster, stdout=stdout)
        fresh = cluster.workdir / f"fresh-{job_id}"
        fresh.write_text("fresh\n")
        if name == "link":
            (cluster.workdir / f"link-{job_id}").symlink_to(fresh)
        if name == "other":
            other = cluster.workdir / f"other-{job_id}"
            other.write_text("another user's\n")
            os.chown(other, os.geteuid() + 1, os.getegid())
        with cluster.client("alice") as c:
            detail = problem(c.get(f"/v1/jobs/{job_id}/output"), 404)["detail"]
        assert why in detail, (name, detail)
        assert "secret" not in detail and "root:" not in detail


def test_a_fifo_as_output_is_refused_at_once(cluster: Cluster) -> None:
    fifo = cluster.workdir / "fifo"
    os.mkfifo(fifo)
    job_id = _started(cluster, stdout=str(fifo))
    # Many readers at once: none may block a worker thread of the server.
    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(lambda _: _output_status(cluster, job_id), range(48), timeout=30))
    assert statuses == [404] * 48
    with cluster.client(None) as c:
        assert c.get("/healthz", timeout=5).status_code == 200


def _output_status(cluster: Cluster, job_id: str) -> int:
    with cluster.client("alice") as c:
        return c.get(f"/v1/jobs/{job_id}/output", timeout=10).status_code


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"nodes": 0}, "body.nodes"),  # at least one node
        ({"nodes": -1}, "body.nodes"),
        ({"nodes": 10**12}, "body.nodes"),  # over MAX_NODES
        ({"gpus_per_node": 65}, "body.gpus_per_node"),
        ({"gpu_milli": 1000}, "body.gpu_milli"),  # a share is below one GPU
        ({"time_limit_s": -1}, "body.time_limit_s"),
        ({"time_limit_s": 0}, "body.time_limit_s"),  # no limit, over the partition's maximum
        ({"mem_mib": 2**70}, "body.mem_mib"),
        # Past year 9999: a typo, which would overflow the scheduler's 64-bit columns.
        ({"begin": 99999999999999999999}, "body.begin"),
        ({"begin": 253_402_300_800}, "body.begin"),
        # Whole GPUs and a share of one: refused, not one of them silently dropped.
        ({"gpus_per_node": 2, "gpu_milli": 500, "hold": True}, "body.gpu_milli"),
        ({"workdir": ""}, "body.workdir"),
        ({"script": "x" * 1_000_001}, "body.script"),
        ({"colour": "red"}, "body.colour"),  # unknown keys are refused, not ignored
        ({"partition": "nope"}, "body.partition"),  # checked by the controller
        ({"qos": "nope"}, "body.qos"),
        ({"array": "5-1"}, "body.array"),
        ({"array": "0-1001", "hold": True}, "body.array"),  # over max_array_size, 1001
        ({"dependency": "afterok:x"}, "body.dependency"),
        # What the agent would refuse at the start is refused at submission.
        ({"env": {"A=B": "1"}}, "body.env"),
        ({"env": {"": "1"}}, "body.env"),
        ({"stdout": "%N.out"}, "body.stdout"),
        ({"stderr": "err-%"}, "body.stderr"),
        # DOS line breaks: its #! line would name "/bin/sh\r" (sbatch refuses them too).
        ({"command": None, "script": "#!/bin/sh\r\ntrue\r\n"}, "body.script"),
        # What no node of the partition (two 16-CPU nodes, 4 A100s each) could ever hold.
        ({"nodes": 3}, "body.nodes"),
        ({"nodes": 1000}, "body.nodes"),
        ({"gpu_type": "x"}, "body.gpu_type"),
        ({"gpus_per_node": 8}, "body.gpus_per_node"),
        ({"cpus_per_task": 32}, "body.cpus_per_task"),
        ({"mem_mib": 65537}, "body.mem_mib"),
    ],
)
def test_bad_submissions_name_the_field(
    cluster: Cluster, spec: dict[str, object], field: str
) -> None:
    with cluster.client("alice") as c:
        assert field in fields(c.post("/v1/jobs", json={**job(cluster.workdir), **spec}))


def test_refusals_of_no_limit_and_a_huge_array_say_the_maximum(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        unlimited = problem(c.post("/v1/jobs", json=job(cluster.workdir, time_limit_s=0)), 422)
        huge = problem(c.post("/v1/jobs", json=job(cluster.workdir, array="0-99999")), 422)
    assert unlimited["errors"] == [
        {
            "field": "body.time_limit_s",
            "message": "no limit (UNLIMITED) is over partition gpu's limit of 3600 s",
        }
    ]
    assert huge["errors"] == [
        {
            "field": "body.array",
            "message": "index 99999 is over the site's maximum of 1000 (max_array_size = 1001)",
        }
    ]


def test_a_request_the_partition_could_hold_is_accepted(cluster: Cluster) -> None:
    # Both nodes, all their GPUs, CPUs and memory, of the model they have: it may wait.
    whole = {"nodes": 2, "gpus_per_node": 4, "gpu_type": "A100-80GB", "cpus_per_task": 16}
    job_id = _submit(cluster, "alice", hold=True, mem_mib=65536, **whole)
    with cluster.client("alice") as c:
        assert c.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        refused = problem(c.post("/v1/jobs", json=job(cluster.workdir, nodes=1000)), 422)
    assert refused["errors"][0]["message"] == "1000 nodes, but partition gpu has 2"


def test_a_refused_submission_uses_up_no_job_id(cluster: Cluster) -> None:
    first = _submit(cluster, "alice", hold=True)
    refused = [
        {"dependency": "afterok:999999999"},  # checked against the store
        {"nodes": 1000},
        {"partition": "nope"},
        {"gpus_per_node": 65},
    ]
    with cluster.client("alice") as c:
        for spec in refused:
            problem(c.post("/v1/jobs", json=job(cluster.workdir, hold=True, **spec)), 422)
    second = _submit(cluster, "alice", hold=True, dependency=f"afterok:{first}")
    assert int(second) == int(first) + 1
    with cluster.client("alice") as c:
        for job_id in (first, second):
            assert c.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


@pytest.mark.parametrize(
    "cursor", ["garbage", "99999999999999999999", "9223372036854775808", "\u00b2", "-1"]
)
def test_a_cursor_this_server_never_issued_is_422(cluster: Cluster, cursor: str) -> None:
    with cluster.client("admin") as c:
        for path in ("/v1/jobs", "/v1/audit"):
            assert fields(c.get(path, params={"cursor": cursor})) == {"query.cursor"}, path


def test_a_negative_nice_is_for_operators_and_admins(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        refused = problem(
            c.post("/v1/jobs", json=job(cluster.workdir, hold=True, nice=-10000)), 403
        )
    assert refused["detail"].startswith("body.nice: ")
    for who, nice in (("alice", 10), ("operator", -10)):
        job_id = _submit(cluster, who, hold=True, nice=nice, account="vision")
        with cluster.client(who) as c:
            assert c.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


def test_a_missing_account_is_422_and_another_users_is_403(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        assert fields(c.post("/v1/jobs", json=job(cluster.workdir, account="nope"))) == {
            "body.account"
        }
        other = problem(c.post("/v1/jobs", json=job(cluster.workdir, account="nlp")), 403)
    assert other["detail"].startswith("body.account: alice may not charge account 'nlp'")


def test_an_oversize_submission_is_413(cluster: Cluster) -> None:
    with cluster.client("alice") as c:
        problem(c.post("/v1/jobs", json=job(cluster.workdir, script="x" * (3 << 20))), 413)
