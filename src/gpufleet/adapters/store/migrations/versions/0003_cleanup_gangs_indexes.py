"""Runs ended but not yet confirmed gone, gang tasks' exits, and indexes for listing queues.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("cleanup", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("task_exits", sa.JSON))
    op.drop_index("ix_jobs_state", "jobs")
    op.create_index("ix_jobs_state_id", "jobs", ["state", "id"])
    op.create_index("ix_jobs_user_state_id", "jobs", ["user", "state", "id"])


def downgrade() -> None:
    raise NotImplementedError("the store never drops data")
