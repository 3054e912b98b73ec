"""Pool nodes still booting, so a restarted controller neither asks for them again nor
forgets to give them up.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "booting_nodes",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("pool", sa.String(128), nullable=False),
        sa.Column("created", sa.Double, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the store never drops data")
