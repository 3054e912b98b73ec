"""Tokens, configuration and audit over HTTP (admin), on both stores."""

from __future__ import annotations

from api.conftest import Cluster
from api.helpers import fields, problem


def test_a_created_token_works_until_revoked(cluster: Cluster) -> None:
    with cluster.client("admin") as c:
        created = c.post("/v1/tokens", json={"name": "ci", "user": "carol", "role": "user"})
        assert created.status_code == 201, created.text
        token = created.json()["token"]
        assert token.startswith("gf_")
        listed = {t["id"]: t for t in c.get("/v1/tokens").json()}
        assert "token" not in listed[created.json()["id"]]
    with cluster.client(None) as c:
        headers = {"Authorization": f"Bearer {token}"}
        assert c.get("/v1/jobs", headers=headers).status_code == 200
        with cluster.client("admin") as admin:
            revoked = admin.delete(f"/v1/tokens/{created.json()['id']}")
            assert revoked.status_code == 204
            assert admin.delete(f"/v1/tokens/{created.json()['id']}").status_code == 204
            problem(admin.delete("/v1/tokens/nope"), 404)
            assert {t["id"]: t for t in admin.get("/v1/tokens").json()}[created.json()["id"]][
                "revoked"
            ]
        response = c.get("/v1/jobs", headers=headers)
        problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_tokens_are_for_admins_only(cluster: Cluster) -> None:
    for who in ("operator", "alice", "n1"):
        with cluster.client(who) as c:
            body = {"name": "x", "user": "alice", "role": "admin"}
            problem(c.post("/v1/tokens", json=body), 403)
            problem(c.get("/v1/tokens"), 403)


def test_a_node_token_needs_its_node(cluster: Cluster) -> None:
    with cluster.client("admin") as c:
        response = c.post("/v1/tokens", json={"name": "x", "user": "n9", "role": "node"})
        assert "body.node" in fields(response)
        response = c.post("/v1/tokens", json={"name": "x", "user": "u", "role": "god"})
        assert "body.role" in fields(response)


def test_a_token_user_must_be_a_user_name(cluster: Cluster) -> None:
    # Users reach paths (checkpoint_dir/USER/JOBID, %u): the principals' rule holds here too.
    with cluster.client("admin") as c:
        for user in ("../../etc", "a b", "x" * 65, "\u00e9", ".hidden", "-rf", "a/b", ""):
            body = {"name": "x", "user": user, "role": "user"}
            assert fields(c.post("/v1/tokens", json=body)) == {"body.user"}, user
        for user in ("carol.b@example-1", "x" * 64, "_svc"):
            body = {"name": "x", "user": user, "role": "user"}
            assert c.post("/v1/tokens", json=body).status_code == 201, user


def test_configuration_is_admin_only_versioned_and_audited(cluster: Cluster) -> None:
    for who in ("operator", "alice"):
        with cluster.client(who) as c:
            problem(c.get("/v1/config"), 403)
            problem(c.patch("/v1/config", json={"patch": {"server": {"interval_s": 5}}}), 403)
            problem(c.get("/v1/audit"), 403)
    with cluster.client("admin") as c:
        current = c.get("/v1/config").json()
        patched = c.patch(
            "/v1/config",
            json={"patch": {"server": {"interval_s": 7}}, "version": current["version"]},
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["version"] == current["version"] + 1
        assert patched.json()["config"]["server"]["interval_s"] == 7
        stale = {"patch": {"server": {"interval_s": 8}}, "version": current["version"]}
        problem(c.patch("/v1/config", json=stale), 409)
        bad = c.patch("/v1/config", json={"patch": {"server": {"interval_s": -1}}})
        assert any("interval_s" in f for f in fields(bad))
        actions = [e["action"] for e in c.get("/v1/audit").json()["entries"]]
    assert actions  # the token creations and the patch at least


def test_a_bad_patch_names_every_bad_key(cluster: Cluster) -> None:
    patch = {
        "server": {"interval_s": -1, "kill_grace_s": "x"},
        "policy": {"bogus": 1},
        "principals": [{"name": "root", "role": "admin"}, {"name": "../x"}],
    }
    with cluster.client("admin") as c:
        bad = problem(c.patch("/v1/config", json={"patch": patch}), 422)
    assert bad["detail"] == "4 invalid fields"
    assert [e["field"] for e in bad["errors"]] == [
        "body.patch.server.interval_s",
        "body.patch.server.kill_grace_s",
        "body.patch.policy.bogus",
        "body.patch.principals[1].name",
    ]


def test_a_patch_of_a_string_for_a_bool_or_a_number_is_refused(cluster: Cluster) -> None:
    with cluster.client("admin") as c:
        before = c.get("/v1/config").json()
        for table, value in (
            ({"mig": {"repartition": "yes"}}, "policy.mig.repartition"),
            ({"mig": {"min_interval_s": "60"}}, "policy.mig.min_interval_s"),
            ({"predict": {"ordering": "off"}}, "policy.predict.ordering"),
            ({"predict": {"quantile": "0.9"}}, "policy.predict.quantile"),
            ({"autoscale": {"idle_s": "600"}}, "policy.autoscale.idle_s"),
            ({"backfill": {"max_job_test": "500"}}, "policy.backfill.max_job_test"),
            ({"ordering": {"multifactor": {"weight_age": "1000"}}}, "policy.ordering.multifactor"),
            ({"preemption": {"enabled": "yes"}}, "policy.preemption.enabled"),
        ):
            bad = c.patch("/v1/config", json={"patch": {"policy": table}})
            problem(bad, 422)
            assert any(value in f for f in fields(bad)), bad.text
        assert c.get("/v1/config").json() == before  # nothing stored
        ok = c.patch("/v1/config", json={"patch": {"policy": {"predict": {"quantile": 0.9}}}})
        assert ok.status_code == 200, ok.text
