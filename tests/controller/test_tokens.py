"""controller.tokens: tokens in the store, the server's cache of valid ones, and a
``gpufleet token`` that never loads the scheduler."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.adapters.store import Store
from gpufleet.controller.errors import Invalid, NotFound
from gpufleet.controller.tokens import (
    TokenCache,
    find_token,
    issue_token,
    list_tokens,
    revoke_token,
)
from gpufleet.controller.views import TokenCreated
from store.databases import Database


@pytest.fixture
def store(db: Database) -> Iterator[Store]:
    opened = db.open()
    opened.migrate()
    yield opened
    opened.close()


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(store: Store, user: str = "ana", now: float = 0.0) -> TokenCreated:
    return issue_token(store, name=user, user=user, role="user", node=None, now=now)


def test_issue_list_revoke(store: Store) -> None:
    first = make(store, "ana", now=1.0)
    node = issue_token(store, name="agent", user="n1", role="node", node="n1", now=2.0)
    assert first.token.startswith("gf_") and first.token != node.token
    listed = list_tokens(store)
    assert [(t.id, t.user, t.node, t.revoked) for t in listed] == [
        (first.id, "ana", None, False),
        (node.id, "n1", "n1", False),
    ]
    assert all(not hasattr(t, "token") for t in listed)
    found = find_token(store, first.token)
    assert found is not None and found.id == first.id
    revoke_token(store, token_id=first.id, now=3.0)
    revoke_token(store, token_id=first.id, now=4.0)  # again: no error
    assert find_token(store, first.token) is None
    assert [t.revoked for t in list_tokens(store)] == [True, False]
    with pytest.raises(NotFound):
        revoke_token(store, token_id="nosuch", now=5.0)


@pytest.mark.parametrize(
    ("role", "node", "field"),
    [("user", "n1", "body.node"), ("node", None, "body.node"), ("root", None, "body.role")],
)
def test_issue_refuses_a_bad_role_or_node(
    store: Store, role: str, node: str | None, field: str
) -> None:
    with pytest.raises(Invalid) as raised:
        issue_token(store, name="x", user="x", role=role, node=node, now=0.0)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert list_tokens(store) == []


def test_cache_keeps_a_valid_token_until_it_expires(store: Store) -> None:
    clock = Ticks()
    cache = TokenCache(store, ttl_s=5.0, clock=clock)
    made = make(store)
    assert cache.find(made.token) is not None
    revoke_token(store, token_id=made.id, now=1.0)  # as another process would
    clock.now = 4.9
    assert cache.find(made.token) is not None
    clock.now = 5.0
    assert cache.find(made.token) is None
    assert len(cache) == 0


def test_cache_clear_makes_a_revocation_immediate(store: Store) -> None:
    cache = TokenCache(store, clock=Ticks())
    made = make(store)
    assert cache.find(made.token) is not None
    revoke_token(store, token_id=made.id, now=1.0)
    cache.clear()
    assert cache.find(made.token) is None


def test_cache_never_remembers_unknown_tokens(store: Store) -> None:
    cache = TokenCache(store, clock=Ticks())
    for i in range(100):
        assert cache.find(f"gf_unknown{i}") is None
    assert cache.find("not-a-token") is None
    assert len(cache) == 0
    # Nor a miss: a token unknown a moment ago works once it exists.
    made = make(store)
    assert cache.find(made.token) is not None
    assert len(cache) == 1


def test_cache_drops_the_least_recently_used(store: Store) -> None:
    cache = TokenCache(store, size=2, clock=Ticks())
    one, two, three = (make(store, u) for u in ("a", "b", "c"))
    for made in (one, two, one, three):  # two is now the least recently used
        assert cache.find(made.token) is not None
    assert len(cache) == 2
    for made in (one, two, three):
        revoke_token(store, token_id=made.id, now=1.0)
    assert [cache.find(m.token) is not None for m in (one, two, three)] == [True, False, True]


def test_token_commands_do_not_load_the_scheduler(tmp_path: Path) -> None:
    heavy = ("numpy", "numba", "matplotlib", "gpufleet.engine", "gpufleet.controller.service")
    code = (
        "import sys\n"
        "from gpufleet.cli.main import main\n"
        "for argv in sys.argv[1:]:\n"
        "    assert main(argv.split()) == 0, argv\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    data = f"--data {tmp_path}"
    commands = [f"token create --user root --role admin {data}", f"token list --json {data}"]
    done = subprocess.run(
        [sys.executable, "-c", code, *commands],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
    assert '"user": "root"' in done.stdout
