"""Opening the store: the engine, its connection settings, and the migrations.

SQLite (the default, one file in the data directory) runs in WAL mode with
``synchronous=NORMAL``: a commit is in the WAL file, handed to the OS, before
the call returns, so it survives a SIGKILL or crash of the controller
process; only a power loss or kernel crash may lose the last transactions
(FULL would fsync the WAL on every commit for that, at several times the
cost per commit). The controller acknowledges nothing before its commit
returns, so every acknowledged submission survives a killed controller.
A busy timeout rides out the moments another process (``gpufleet token
create`` against a running server) holds the write lock, and foreign keys
are enforced.

PostgreSQL: ``postgresql+psycopg://...``. ``schema`` puts every table
(Alembic's version table too) in that schema via ``search_path``, creating
it if needed: tests share one database this way.
"""

from __future__ import annotations

import contextlib
import json as _json
import operator
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

MIGRATIONS = Path(__file__).parent / "migrations"
COPY_ROWS = 500
BUSY_TIMEOUT_MS = 10_000
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def sqlite_url(data_dir: Path | str) -> str:
    """The default store URL: ``DIR/gpufleet.db``."""
    return f"sqlite:///{Path(data_dir) / 'gpufleet.db'}"


PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def private_dir(path: Path) -> None:
    """Make the data directory ``path`` (and missing parents), mode 0700, and make an
    existing one of ours 0700: it holds the store and the token files."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    if path.stat().st_uid == os.geteuid():
        path.chmod(PRIVATE_DIR)


def private_database(path: Path) -> None:
    """Create the SQLite file ``path`` mode 0600 before SQLite opens it (its ``-wal``
    and ``-shm`` files take the database's mode), and make existing ones of ours 0600:
    the store holds job scripts and submitting environments. A missing directory
    is made 0700; an existing one is left as it is."""
    path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            st = file.lstat()
            if st.st_uid == os.geteuid() and stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
                file.chmod(PRIVATE_FILE)


class Store:
    """An engine on the store's database, plus reads, writes and migrations.

    ``read()`` yields a connection in a read transaction (a consistent view;
    on SQLite it never blocks writers). ``write()`` yields one in a write
    transaction committed on exit and rolled back on an exception; on
    SQLite it takes the write lock at BEGIN (``BEGIN IMMEDIATE``), so two
    writers queue on the busy timeout instead of failing on a lock upgrade.
    """

    def __init__(self, url: str, *, schema: str | None = None, pool_size: int = 8) -> None:
        self.url = sa.make_url(url)
        self.schema = schema
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        if schema is not None and not _SCHEMA.match(schema):
            raise ValueError(f"schema: not a plain lower-case SQL name: {schema!r}")
        if self.is_sqlite:
            if schema is not None:
                raise ValueError("schema: SQLite has no schemas")
            self.engine = self._sqlite_engine(pool_size)
        else:
            self.engine = self._server_engine(schema, pool_size)

    def _sqlite_engine(self, pool_size: int) -> sa.Engine:
        database = self.url.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            private_database(Path(database))
        engine = sa.create_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=pool_size,
            # Transactions are begun by hand below, not by the sqlite3 module.
            connect_args={"isolation_level": None, "check_same_thread": False},
        )

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi: Any, _record: Any) -> None:
            cur = dbapi.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: sa.Connection) -> None:
            write = conn.get_execution_options().get("store_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def _server_engine(self, schema: str | None, pool_size: int) -> sa.Engine:
        connect_args: dict[str, Any] = {}
        if schema is not None:
            connect_args["options"] = f"-csearch_path={schema}"
            bootstrap = sa.create_engine(self.url, poolclass=sa.NullPool)
            with bootstrap.begin() as conn:
                conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            bootstrap.dispose()
        return sa.create_engine(
            self.url,
            pool_size=pool_size,
            max_overflow=pool_size,
            pool_pre_ping=True,
            connect_args=connect_args,
        )

    @contextmanager
    def read(self) -> Iterator[sa.Connection]:
        """A connection in a read transaction, ended (rolled back) on exit."""
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """A connection in a write transaction, committed on a clean exit."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(store_write=True)
            with conn.begin():
                yield conn

    def insert(
        self, conn: sa.Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Insert ``rows`` (all with the same keys) in the open transaction of ``conn``.

        The rows go to the driver as tuples, past SQLAlchemy's per-value
        processing, and a JSON value shared by many rows (an array job's spec)
        is serialised once: a 10,000-task array costs one statement, not
        10,000 objects' worth of Python. PostgreSQL gets COPY for
        ``COPY_ROWS`` rows or more, several times faster than INSERTs.
        """
        if not rows:
            return
        columns = list(rows[0])
        pick = operator.itemgetter(*columns)
        json_at = [i for i, c in enumerate(columns) if isinstance(table.c[c].type, sa.JSON)]
        texts: dict[int, str] = {}  # id() of a value -> its JSON; the rows keep them alive

        def dumps(value: Any) -> str:
            text = texts.get(id(value))
            if text is None:
                text = texts[id(value)] = _json.dumps(value)
            return text

        values: list[list[Any]] = []
        for row in rows:
            items = list(pick(row)) if len(columns) > 1 else [pick(row)]
            for i in json_at:
                if items[i] is not None:
                    items[i] = dumps(items[i])
            values.append(items)
        names = ", ".join(f'"{c}"' for c in columns)
        raw = conn.connection.driver_connection
        assert raw is not None
        if self.is_sqlite:
            marks = ", ".join("?" * len(columns))
            raw.executemany(f'INSERT INTO "{table.name}" ({names}) VALUES ({marks})', values)
            return
        with raw.cursor() as cur:
            if len(values) < COPY_ROWS:
                marks = ", ".join(["%s"] * len(columns))
                cur.executemany(f'INSERT INTO "{table.name}" ({names}) VALUES ({marks})', values)
                return
            with cur.copy(f'COPY "{table.name}" ({names}) FROM STDIN') as copy:
                for items in values:
                    copy.write_row(items)

    # -- migrations ----------------------------------------------------------------

    def _alembic(self, conn: sa.Connection) -> Config:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        return cfg

    def migrate(self, revision: str = "head") -> None:
        """Upgrade the schema to ``revision``. Never drops data; a no-op when current."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(store_write=True)
            command.upgrade(self._alembic(conn), revision)
            conn.commit()

    def revision(self) -> str | None:
        """The schema revision the database is at (None for an empty database)."""
        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    @staticmethod
    def head() -> str:
        """The newest revision this code ships."""
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        head = ScriptDirectory.from_config(cfg).get_current_head()
        assert head is not None
        return head

    def drop_schema(self) -> None:
        """Drop the PostgreSQL schema this store was opened with (test clean-up)."""
        if self.schema is None:
            raise ValueError("drop_schema: the store was opened without a schema")
        self.engine.dispose()
        bootstrap = sa.create_engine(self.url, poolclass=sa.NullPool)
        with bootstrap.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        bootstrap.dispose()

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
