"""``GET /metrics`` over HTTP: Prometheus' text format, for metrics, operator and admin tokens."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.conftest import Cluster
from api.helpers import token


@pytest.fixture(scope="module")
def scraper(cluster: Cluster) -> str:
    """A token of the metrics role, made through the API as an operator would."""
    with cluster.client("admin") as admin:
        return token(admin, "prometheus", "metrics")


def test_a_metrics_token_scrapes(cluster: Cluster, scraper: str) -> None:
    with cluster.client(None) as anyone:
        answer = anyone.get("/metrics", headers={"Authorization": f"Bearer {scraper}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in text_string_to_metric_families(answer.text)}
    assert {"gpufleet_jobs_pending", "gpufleet_node_state", "gpufleet_jobs_started"} <= names


@pytest.mark.parametrize(("who", "status"), [(None, 401), ("alice", 403), ("n1", 403)])
def test_only_metrics_operators_and_admins_scrape(
    cluster: Cluster, who: str | None, status: int
) -> None:
    # A user may not: the series name every job's user and account.
    with cluster.client(who) as client:
        assert client.get("/metrics").status_code == status
    with cluster.client("operator") as client:
        assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("GET", "/v1/nodes"),
        ("GET", "/v1/fairshare"),
        ("POST", "/v1/nodes/n1/drain"),
        ("POST", "/v1/agents/n1/sync"),
        ("GET", "/v1/tokens"),
    ],
)
def test_a_metrics_token_reads_nothing_else(
    cluster: Cluster, scraper: str, method: str, path: str
) -> None:
    with cluster.client(None) as client:
        answer = client.request(
            method, path, headers={"Authorization": f"Bearer {scraper}"}, json={}
        )
    assert answer.status_code == 403, (path, answer.text)


def test_the_answer_is_gzipped_for_a_scraper_that_accepts_it(
    cluster: Cluster, scraper: str
) -> None:
    auth = {"Authorization": f"Bearer {scraper}"}
    with cluster.client(None) as client:
        packed = client.get("/metrics", headers={**auth, "Accept-Encoding": "gzip"})
        plain = client.get("/metrics", headers={**auth, "Accept-Encoding": "identity"})
    assert packed.headers["content-encoding"] == "gzip"
    assert "content-encoding" not in plain.headers
    assert packed.num_bytes_downloaded < len(plain.content)
    names = {f.name for f in text_string_to_metric_families(packed.text)}  # decoded by httpx
    assert names == {f.name for f in text_string_to_metric_families(plain.text)}
