"""MIG layout changes not yet reported done, so a restarted controller sends them again.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mig_orders",
        sa.Column("node", sa.String(128), primary_key=True),
        sa.Column("gpu", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("layout", sa.JSON),
        sa.Column("time", sa.Double, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the store never drops data")
