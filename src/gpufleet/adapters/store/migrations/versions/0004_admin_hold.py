"""Which kind of hold a held job is under: its owner's (user) or an operator's (admin).

Jobs held before this revision were held by their owners or at submission:
they stay user holds (``admin_hold`` false), so nothing is rewritten.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("admin_hold", sa.Boolean, nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    raise NotImplementedError("the store never drops data")
