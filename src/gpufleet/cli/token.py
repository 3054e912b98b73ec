"""``gpufleet token``: create, list and revoke API tokens directly in the store.

This is how the first admin token comes to exist: the commands need no
running server, only the data directory (or the store's URL). ``create``
makes the store if there is none and migrates it; ``list`` and ``revoke``
refuse a store that does not exist (a mistyped ``--data`` would otherwise
leave an empty one behind) and migrate one that does. A token's secret is printed once, on
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

from gpufleet.cli.output import (
    JSON_HELP,
    command_name,
    fail,
    print_json,
    print_table,
    timestamp,
)

if TYPE_CHECKING:
    from gpufleet.adapters.store import Store

token = typer.Typer(help="Create, list and revoke API tokens in the store.", no_args_is_help=True)

ROLES = ("admin", "operator", "user", "node", "metrics", "alerts")

Data = Annotated[
    Path | None, typer.Option("--data", help="the controller's data directory (SQLite store)")
]
Db = Annotated[str | None, typer.Option("--db", help="the store's URL instead of --data")]


@contextmanager
def open_store(
    command: str, data: Path | None, db: str | None, *, create: bool = False
) -> Iterator[Store]:
    """The store named by ``--data`` or ``--db``, migrated to head; one error line
    otherwise. Only with ``create`` is a store that does not exist made."""
    import sqlalchemy as sa

    from gpufleet.adapters.store import Store, sqlite_url

    if (data is None) == (db is None):
        fail(command, "give either --data DIR or --db URL")
    option = "--db" if db is not None else "--data"
    text = db if db is not None else sqlite_url(data or Path())
    try:
        url = sa.make_url(text)
    except (sa.exc.ArgumentError, ValueError) as e:
        fail(command, f"{option}: {str(e).splitlines()[0]}")
    missing = (
        f"--db: no gpufleet store at {url.render_as_string()}"
        if db is not None
        else f"--data: no gpufleet store in {data}"
    ) + " (token create makes one)"
    # Opening a SQLite store creates its file: look first, so as to leave nothing behind.
    if not create and url.get_backend_name() == "sqlite" and not _has_file(url.database):
        fail(command, missing)
    try:
        store = Store(text)
    except (sa.exc.ArgumentError, ValueError) as e:
        fail(command, f"{option}: {str(e).splitlines()[0]}")
    try:
        # An existing database or schema without gpufleet's tables is no store either.
        if not create and store.revision() is None:
            fail(command, missing)
        store.migrate()
        yield store
    except sa.exc.SQLAlchemyError as e:
        fail(command, f"{option}: cannot use the store: {str(e).splitlines()[0]}", 1)
    finally:
        store.close()


def _has_file(database: str | None) -> bool:
    """Whether a SQLite URL's database is a file with something in it; True for a
    ``file:`` URI, which ``Store.revision`` judges instead."""
    if database is not None and database.startswith("file:"):
        return True
    if not database or database == ":memory:":
        return False
    path = Path(database)
    return path.is_file() and path.stat().st_size > 0


@token.command("create")
def create(
    ctx: typer.Context,
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

    command = command_name(ctx.command_path)
    if role not in ROLES:
        fail(command, f"--role: {role!r} is not one of {', '.join(ROLES)}")
    for option, value in (("--user", user), ("--node", node), ("--name", name)):
        if value is not None and (value == "" or not value.isprintable()):
            fail(command, f"{option}: must be a non-empty printable name")
    with open_store(command, data, db, create=True) as store:
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
            fail(command, f"--{e.field.removeprefix('body.')}: {e.reason}")
    typer.echo(f"token {created.id} for {user} ({role}); the secret is shown once:", err=True)
    typer.echo(created.token)


@token.command("list")
def list_tokens(
    ctx: typer.Context,
    data: Data = None,
    db: Db = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Every token, revoked ones included, oldest first; never a secret."""
    from gpufleet.controller.tokens import list_tokens as stored_tokens

    with open_store(command_name(ctx.command_path), data, db) as store:
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
    ctx: typer.Context,
    token_id: Annotated[str, typer.Argument(help="the token's ID (see token list)")],
    data: Data = None,
    db: Db = None,
) -> None:
    """Revoke a token; revoking it again changes nothing."""
    import time

    from gpufleet.controller.errors import NotFound
    from gpufleet.controller.tokens import revoke_token

    command = command_name(ctx.command_path)
    if not token_id.isprintable():
        fail(command, "ID: must be printable")
    with open_store(command, data, db) as store:
        try:
            revoke_token(store, token_id=token_id, now=time.time(), who="gpufleet token")
        except NotFound:
            fail(command, f"ID: no token {token_id!r}")
    typer.echo(f"token {token_id} revoked")
