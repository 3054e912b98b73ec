"""``POST /api/v1/alerts/webhook`` over HTTP: Alertmanager's body, for alerts, operator and
admin tokens; an alerts token may do nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from api.conftest import Cluster
from api.helpers import token

PATH = "/api/v1/alerts/webhook"
BODY: dict[str, Any] = {
    # As Alertmanager sends it (webhook version 4), extra fields and all.
    "version": "4",
    "groupKey": '{}:{alertname="GpuTemperatureHigh"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "gpufleet",
    "groupLabels": {"alertname": "GpuTemperatureHigh"},
    "commonLabels": {"alertname": "GpuTemperatureHigh"},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "GpuTemperatureHigh", "Hostname": "n1", "gpu": "0"},
            "annotations": {"summary": "GPU 0 of n1 at 86 °C"},
            "startsAt": "2026-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph",
            "fingerprint": "a1b2",
        }
    ],
}


@pytest.fixture(scope="module")
def alertmanager(cluster: Cluster) -> str:
    with cluster.client("admin") as admin:
        return token(admin, "alertmanager", "alerts")


def test_an_alerts_token_posts_notifications(cluster: Cluster, alertmanager: str) -> None:
    with cluster.client(None) as client:
        answer = client.post(PATH, json=BODY, headers={"Authorization": f"Bearer {alertmanager}"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "actions": [
            {
                "alert": "GpuTemperatureHigh",
                "fingerprint": "a1b2",
                "action": "none",
                "target": "",
                "detail": "no action label",
            }
        ]
    }


@pytest.mark.parametrize(("who", "status"), [(None, 401), ("alice", 403), ("n1", 403)])
def test_only_alerts_operators_and_admins_post(
    cluster: Cluster, who: str | None, status: int
) -> None:
    with cluster.client(who) as client:
        assert client.post(PATH, json=BODY).status_code == status
    with cluster.client("operator") as client:
        assert client.post(PATH, json=BODY).status_code == 200


def test_a_malformed_notification_is_a_problem_naming_the_field(cluster: Cluster) -> None:
    body = {**BODY, "alerts": [{**BODY["alerts"][0], "status": "burning"}]}
    with cluster.client("operator") as client:
        answer = client.post(PATH, json=body)
    assert answer.status_code == 422
    assert [e["field"] for e in answer.json()["errors"]] == ["body.alerts.0.status"]


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/jobs"), ("GET", "/metrics")])
def test_an_alerts_token_reads_nothing(
    cluster: Cluster, alertmanager: str, method: str, path: str
) -> None:
    with cluster.client(None) as client:
        answer = client.request(method, path, headers={"Authorization": f"Bearer {alertmanager}"})
    assert answer.status_code == 403
