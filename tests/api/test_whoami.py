"""``GET /v1/whoami``: the user and role a token stands for, on both stores."""

from __future__ import annotations

from api.conftest import TOKENS, Cluster
from api.helpers import problem


def test_every_token_learns_whom_it_stands_for(cluster: Cluster) -> None:
    for key, (user, role, node) in TOKENS.items():
        with cluster.client(key) as c:
            answer = c.get("/v1/whoami")
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"user": user, "role": role, "node": node}


def test_whoami_needs_a_token(cluster: Cluster) -> None:
    with cluster.client(None) as c:
        problem(c.get("/v1/whoami"), 401)
