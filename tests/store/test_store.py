"""The store opens, migrates from empty and from the previous revision, and keeps data."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.adapters.store import GroupWriter, Store
from gpufleet.adapters.store import tables as t
from store.databases import Database, job_row


def test_upgrade_from_empty_reaches_head_and_matches_the_tables(db: Database) -> None:
    store = db.open()
    assert store.revision() is None
    store.migrate()
    assert store.revision() == Store.head()
    with store.read() as conn:
        names = set(sa.inspect(conn).get_table_names())
        for table in t.metadata.sorted_tables:
            columns = {c["name"] for c in sa.inspect(conn).get_columns(table.name)}
            assert columns == {c.name for c in table.columns}, table.name
    assert names >= {table.name for table in t.metadata.sorted_tables}
    store.close()


def test_upgrade_from_the_previous_revision_keeps_rows(db: Database) -> None:
    store = db.open()
    store.migrate("0001")
    with store.write() as conn:
        conn.execute(t.jobs.insert(), [job_row(1)])
    store.migrate()
    assert store.revision() == Store.head()
    store.migrate()  # at head already: nothing to do
    with store.read() as conn:
        assert conn.execute(sa.select(t.jobs.c.job_id)).scalars().all() == ["1"]
        assert conn.execute(sa.select(sa.func.count()).select_from(t.audit)).scalar() == 0
    store.close()


def test_group_writer_isolates_a_failing_unit(db: Database) -> None:
    store = db.open()
    store.migrate()
    writer = GroupWriter(store)
    good = [writer.submit(lambda c, i=i: c.execute(t.jobs.insert(), [job_row(i)])) for i in (1, 2)]
    dup = writer.submit(lambda c: c.execute(t.jobs.insert(), [job_row(1)]))
    for f in good:
        f.result()
    try:
        dup.result()
        raise AssertionError("a duplicate primary key must fail")
    except sa.exc.IntegrityError:
        pass
    writer.stop()
    with store.read() as conn:
        assert sorted(conn.execute(sa.select(t.jobs.c.id)).scalars()) == [1, 2]
    store.close()


def test_sqlite_runs_in_wal_mode_with_normal_sync(tmp_path: object) -> None:
    from gpufleet.adapters.store import sqlite_url

    store = Store(sqlite_url(str(tmp_path)))
    with store.read() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    store.close()


def test_merged_inserts_and_copy_keep_every_row_and_its_json(db: Database) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from gpufleet.adapters.store.store import COPY_ROWS

    store = db.open()
    store.migrate()
    writer = GroupWriter(store)
    big = [{**job_row(i), "request": {"cpu_milli": i, "env": {"A": "x y"}}} for i in range(1, 601)]
    assert len(big) >= COPY_ROWS  # PostgreSQL copies these
    writer.insert([(t.jobs, big)])
    with ThreadPoolExecutor(8) as pool:  # small ones from many threads merge into few batches
        list(pool.map(lambda i: writer.insert([(t.jobs, [job_row(i)])]), range(1000, 1100)))
    writer.stop()
    with store.read() as conn:
        rows = conn.execute(sa.select(t.jobs.c.id, t.jobs.c.request).order_by(t.jobs.c.id)).all()
    assert len(rows) == 700
    assert rows[599].request == {"cpu_milli": 600, "env": {"A": "x y"}}
    assert rows[600].request == {"cpu_milli": 1000}
    store.close()


def test_inserted_rows_may_share_json_and_list_their_keys_in_any_order(db: Database) -> None:
    store = db.open()
    store.migrate()
    shared = {"command": ["true"], "env": {"A": "1"}}
    first = job_row(1, spec=shared, node_list=None, held=True)
    second = dict(reversed(job_row(2, spec=shared, node_list=["n1"], held=False).items()))
    with store.write() as conn:
        store.insert(conn, t.jobs, [first, second])
    with store.read() as conn:
        rows = conn.execute(
            sa.select(t.jobs.c.job_id, t.jobs.c.spec, t.jobs.c.node_list, t.jobs.c.held)
            .order_by(t.jobs.c.id)
        ).all()
    assert [tuple(r) for r in rows] == [("1", shared, None, True), ("2", shared, ["n1"], False)]
    store.close()


def test_keyed_inserts_skip_existing_keys_and_the_second_of_a_batch(db: Database) -> None:
    import threading

    store = db.open()
    store.migrate()
    writer = GroupWriter(store)

    def key(user: str, rid: str) -> tuple[sa.Table, tuple[tuple[str, str], ...]]:
        return (t.jobs, (("user", user), ("request_id", rid)))

    def row(pk: int, user: str, rid: str) -> dict[str, object]:
        return job_row(pk, user=user, request_id=rid)

    first = writer.insert_new_future([(t.jobs, [row(1, "ana", "r1")])], key("ana", "r1"))
    assert first.result() is None
    gate = threading.Event()
    blocker = writer.submit(lambda c: gate.wait(10))  # holds the writer: the rest queue up
    futures = [
        writer.insert_new_future([(t.jobs, [row(2, "ana", "r1")])], key("ana", "r1")),  # stored
        writer.insert_new_future([(t.jobs, [row(3, "ana", "r2")])], key("ana", "r2")),  # new
        writer.insert_new_future([(t.jobs, [row(4, "ana", "r2")])], key("ana", "r2")),  # 2nd
        writer.insert_new_future([(t.jobs, [row(5, "bob", "r1")])], key("bob", "r1")),  # new
    ]
    gate.set()
    blocker.result()
    stored, new, second, other = (f.result() for f in futures)
    writer.stop()
    assert stored is not None and stored["id"] == 1
    assert new is None and other is None
    assert second is not None and second["id"] == 3
    with store.read() as conn:
        assert sorted(conn.execute(sa.select(t.jobs.c.id)).scalars()) == [1, 3, 5]
    store.close()
