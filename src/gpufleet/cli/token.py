"""``gpufleet token``: create, list and revoke API tokens directly in the store.

This is how the first admin token comes to exist: the commands need no
running server, only the data directory (or the store's URL), and they
migrate the store first if it is new. A token's secret is printed once, on
stdout alone, so ``gpufleet token create ... > admin.token`` keeps it; the
store holds only its SHA-256.

A running server trusts a token it has checked for a few seconds
(``controller.tokens.CACHE_TTL_S``, 5 s), so a revocation made here stops
the token there within that time.

Only the store and ``controller.tokens`` are loaded, never the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli.output import JSON_HELP, fail, print_json, print_table, timestamp

if TYPE_CHECKING:
    from gpufleet.adapters.store import Store

token = typer.Typer(help="Create, list and revoke API tokens in the store.", no_args_is_help=True)

ROLES = ("admin", "operator", "user", "node", "metrics", "alerts")

Data = Annotated[
    Path | None, typer.Option("--data", help="the controller's data directory (SQLite store)")
]
Db = Annotated[str | None, typer.Option("--db", help="the store's URL instead of --data")]


@contextmanager
def open_store(data: Path | None, db: str | None) -> Iterator[Store]:
    """The store named by ``--data`` or ``--db``, migrated to head; one error line otherwise."""
    import sqlalchemy as sa

    from gpufleet.adapters.store import Store, sqlite_url

    if (data is None) == (db is None):
        fail("--data", "give either --data DIR or --db URL")
    where = "--db" if db is not None else "--data"
    try:
        store = Store(db if db is not None else sqlite_url(data or Path()))
    except (sa.exc.ArgumentError, ValueError) as e:
        fail(where, str(e).splitlines()[0])
    try:
        store.migrate()
        yield store
    except sa.exc.SQLAlchemyError as e:
        fail(where, f"cannot use the store: {str(e).splitlines()[0]}", 1)
    finally:
        store.close()


@token.command("create")
def create(
    user: Annotated[str, typer.Option("--user", help="whom the token stands for")],
    role: Annotated[
        str, typer.Option("--role", help="admin, operator, user, node, metrics or alerts")
    ],
    node: Annotated[str | None, typer.Option("--node", help="the node, for role node")] = None,
    name: Annotated[str | None, typer.Option("--name", help="a label; default: the user")] = None,
    data: Data = None,
    db: Db = None,
) -> None:
    """Create a token and print its secret (once) on stdout."""
    import time

    from gpufleet.controller.errors import Invalid
    from gpufleet.controller.tokens import issue_token

    if role not in ROLES:
        fail("--role", f"{role!r} is not one of {', '.join(ROLES)}")
    for option, value in (("--user", user), ("--node", node), ("--name", name)):
        if value is not None and (value == "" or not value.isprintable()):
            fail(option, "must be a non-empty printable name")
    with open_store(data, db) as store:
        try:
            created = issue_token(
                store,
                name=name or user,
                user=user,
                role=role,  # type: ignore[arg-type]  # checked against ROLES above
                node=node,
                now=time.time(),
                who="gpufleet token",
            )
        except Invalid as e:
            fail("--" + e.field.removeprefix("body."), e.reason)
    typer.echo(f"token {created.id} for {user} ({role}); the secret is shown once:", err=True)
    typer.echo(created.token)


@token.command("list")
def list_tokens(
    data: Data = None,
    db: Db = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Every token, revoked ones included, oldest first; never a secret."""
    from gpufleet.controller.tokens import list_tokens as stored_tokens

    with open_store(data, db) as store:
        tokens = stored_tokens(store)
    if as_json:
        print_json(tokens)
        return
    print_table(
        ("ID", "NAME", "USER", "ROLE", "NODE", "CREATED", "REVOKED"),
        (
            (t.id, t.name, t.user, t.role, t.node or "", timestamp(t.created), "yes" * t.revoked)
            for t in tokens
        ),
    )


@token.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="the token's ID (see token list)")],
    data: Data = None,
    db: Db = None,
) -> None:
    """Revoke a token; revoking it again changes nothing."""
    import time

    from gpufleet.controller.errors import NotFound
    from gpufleet.controller.tokens import revoke_token

    if not token_id.isprintable():
        fail("ID", "must be printable")
    with open_store(data, db) as store:
        try:
            revoke_token(store, token_id=token_id, now=time.time(), who="gpufleet token")
        except NotFound:
            fail("ID", f"no token {token_id!r}")
    typer.echo(f"token {token_id} revoked")
