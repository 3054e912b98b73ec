"""The audit log and the versioned effective configuration.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("who", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(256), nullable=False, server_default=""),
        sa.Column("detail", sa.JSON, nullable=False),
    )
    op.create_table(
        "config",
        sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("who", sa.String(128), nullable=False),
        sa.Column("document", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the store never drops data")
