"""API tokens in the store: issue, revoke and list them, and the server's lookup cache.

Light on purpose: ``gpufleet token`` works on the store through this module
alone, without a server and without loading the scheduler (no engine, numpy
or policies). The controller's token methods delegate here too.

A token is ``gf_`` plus 32 random bytes (URL-safe); the store keeps only its
SHA-256 (``persist.token_hash``), so a secret appears once, in ``issue_token``'s
result.

Revocation: ``TokenCache`` keeps a valid token for ``CACHE_TTL_S`` seconds,
so a token revoked in the store by another process (``gpufleet token
revoke``) stops working on a running server within that time; a revocation
through the server's own API clears its cache and takes effect at once.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import sqlalchemy as sa

from gpufleet.adapters.store import GroupWriter, Store
from gpufleet.adapters.store import tables as t
from gpufleet.api.schemas import USER_NAME_RULE, Role, is_user_name
from gpufleet.controller import persist
from gpufleet.controller.errors import Invalid, NotFound
from gpufleet.controller.views import TokenCreated, TokenOut

TOKEN_PREFIX = "gf_"
ROLES: tuple[Role, ...] = ("admin", "operator", "user", "node", "metrics", "alerts")
CACHE_TTL_S = 5.0
"""How long a server trusts a valid token without reading the store again."""
CACHE_SIZE = 4096
"""How many valid tokens a server remembers at most (least recently used go first)."""

Target = GroupWriter | Store
"""Where a change is written: the server's group writer, or the store itself (CLI)."""


def _write(target: Target, unit: Callable[[sa.Connection], bool]) -> bool:
    if isinstance(target, Store):
        with target.write() as conn:
            return unit(conn)
    return target.call(unit)


def _token_out(row: sa.Row[tuple[object, ...]]) -> TokenOut:
    return TokenOut.model_validate(row, from_attributes=True)


def issue_token(
    target: Target,
    *,
    name: str,
    user: str,
    role: Role,
    node: str | None,
    now: float,
    who: str = "system",
) -> TokenCreated:
    """Create and store a token, audited as ``who``; the secret is in the result only.

    Invalid (field ``body.user``, ``body.role`` or ``body.node``) unless ``user``
    is a user name (``schemas.USER_NAME``, as principals), ``role`` is one of
    ``ROLES`` and ``node`` is given exactly for role ``node``.
    """
    if not is_user_name(user):
        raise Invalid("body.user", USER_NAME_RULE)
    if role not in ROLES:
        raise Invalid("body.role", f"must be one of {', '.join(ROLES)}")
    if (role == "node") != (node is not None):
        raise Invalid("body.node", "give a node for, and only for, role node")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    created = TokenCreated(
        id=secrets.token_hex(8),
        name=name,
        user=user,
        role=role,
        node=node,
        created=now,
        token=secret,
    )

    def unit(conn: sa.Connection) -> bool:
        row = created.model_dump(exclude={"token"})
        conn.execute(t.tokens.insert().values(**row, hash=persist.token_hash(secret)))
        persist.audit(
            conn,
            time=now,
            who=who,
            action="token.create",
            target=created.id,
            detail={"user": user, "role": role, "node": node, "name": name},
        )
        return True

    _write(target, unit)
    return created


def revoke_token(target: Target, *, token_id: str, now: float, who: str = "system") -> None:
    """Mark a token revoked, audited as ``who``; NotFound if no such id.

    Revoking a revoked token again changes nothing but the audit log.
    """

    def unit(conn: sa.Connection) -> bool:
        done = conn.execute(t.tokens.update().where(t.tokens.c.id == token_id).values(revoked=True))
        if done.rowcount == 0:
            return False
        persist.audit(conn, time=now, who=who, action="token.revoke", target=token_id, detail={})
        return True

    if not _write(target, unit):
        raise NotFound(f"token {token_id}: no such token")


def list_tokens(store: Store) -> list[TokenOut]:
    """Every token, revoked ones included, oldest first; never a secret."""
    with store.read() as conn:
        rows = conn.execute(sa.select(t.tokens).order_by(t.tokens.c.created, t.tokens.c.id))
        return [_token_out(r) for r in rows]


def find_token(store: Store, secret: str) -> TokenOut | None:
    """The unrevoked token whose secret is ``secret``; None if unknown or revoked."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    return _find(store, persist.token_hash(secret))


def _find(store: Store, digest: str) -> TokenOut | None:
    with store.read() as conn:
        row = conn.execute(sa.select(t.tokens).where(t.tokens.c.hash == digest)).first()
    return None if row is None or row.revoked else _token_out(row)


class TokenCache:
    """``find_token`` with memory: valid tokens only, each for at most ``ttl_s`` seconds.

    Unknown and revoked tokens are never remembered, so made-up tokens cannot
    grow it and every one costs a store read; at most ``size`` valid tokens
    are kept, the least recently used dropped first. Keys are the SHA-256 of
    the secrets. ``clock`` is monotonic seconds. Safe to use from many threads.
    """

    def __init__(
        self,
        store: Store,
        *,
        ttl_s: float = CACHE_TTL_S,
        size: int = CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.ttl_s = ttl_s
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._cleared = 0
        self._valid: OrderedDict[str, tuple[float, TokenOut]] = OrderedDict()

    def cached(self, secret: str) -> TokenOut | None:
        """The token ``secret`` stands for if remembered and fresh, else None (no I/O)."""
        if not secret.startswith(TOKEN_PREFIX):
            return None
        digest = persist.token_hash(secret)
        with self._lock:
            hit = self._valid.get(digest)
            if hit is None or self._clock() >= hit[0]:
                return None
            self._valid.move_to_end(digest)
            return hit[1]

    def find(self, secret: str) -> TokenOut | None:
        """The token ``secret`` stands for, or None if unknown or revoked (within ``ttl_s``)."""
        if not secret.startswith(TOKEN_PREFIX):
            return None
        digest = persist.token_hash(secret)
        now = self._clock()
        with self._lock:
            hit = self._valid.get(digest)
            if hit is not None and now < hit[0]:
                self._valid.move_to_end(digest)
                return hit[1]
            self._valid.pop(digest, None)
            cleared = self._cleared
        found = _find(self.store, digest)
        if found is not None:
            with self._lock:
                # A clear() during the read may be a revocation the read missed.
                if cleared != self._cleared:
                    return found
                self._valid[digest] = (now + self.ttl_s, found)
                self._valid.move_to_end(digest)
                while len(self._valid) > self.size:
                    self._valid.popitem(last=False)
        return found

    def clear(self) -> None:
        """Forget every token: the next use of each reads the store."""
        with self._lock:
            self._valid.clear()
            self._cleared += 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._valid)
