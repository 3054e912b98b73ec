"""Alembic's entry point for the store's migrations.

The store runs migrations itself (``Store.migrate``), handing the open
connection over in ``config.attributes["connection"]``; there is no
``alembic.ini`` and no offline mode.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    # SQLite alters tables only by copying them; batch mode does that for us.
    render_as_batch=connection.dialect.name == "sqlite",
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
