"""Jobs with their history and runs, nodes, tokens and the store's metadata.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", BigId, primary_key=True, autoincrement=False),
        sa.Column("job_id", sa.String(64), nullable=False, unique=True),
        sa.Column("job_num", sa.BigInteger, nullable=False),
        sa.Column("array_task_id", sa.Integer),
        sa.Column("array_limit", sa.Integer),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("account", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(128), nullable=False),
        sa.Column("qos", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
        sa.Column("held", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("nice", sa.Integer, nullable=False, server_default="0"),
        sa.Column("submit_time", sa.Double, nullable=False),
        sa.Column("begin_time", sa.Double),
        sa.Column("start_time", sa.Double),
        sa.Column("end_time", sa.Double),
        sa.Column("time_limit_s", sa.Integer, nullable=False),
        sa.Column("exit_code", sa.Integer),
        sa.Column("signal", sa.Integer),
        sa.Column("run", sa.Integer, nullable=False, server_default="0"),
        sa.Column("restart_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("node_list", sa.JSON),
        sa.Column("gpu_uuids", sa.JSON),
        sa.Column("assignments", sa.JSON),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("dependency", sa.String(4096)),
        sa.Column("requeue", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("request_id", sa.String(128)),
        sa.Column("kill", sa.JSON),
        sa.UniqueConstraint("user", "request_id", name="uq_jobs_user_request_id"),
    )
    op.create_index("ix_jobs_user_id", "jobs", ["user", "id"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_job_num", "jobs", ["job_num"])
    op.create_index("ix_jobs_account_id", "jobs", ["account", "id"])
    op.create_index("ix_jobs_partition_id", "jobs", ["partition", "id"])
    op.create_table(
        "job_history",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("job", sa.BigInteger, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("time", sa.Double, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
    )
    op.create_index("ix_job_history_job", "job_history", ["job"])
    op.create_table(
        "job_runs",
        sa.Column("job", sa.BigInteger, sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("run", sa.Integer, primary_key=True),
        sa.Column("start_time", sa.Double, nullable=False),
        sa.Column("end_time", sa.Double),
        sa.Column("node_list", sa.JSON, nullable=False),
        sa.Column("gpu_milli", sa.Integer, nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("account", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(128), nullable=False),
        sa.Column("qos", sa.String(128), nullable=False),
        sa.Column("outcome", sa.String(16)),
        sa.Column("exit_code", sa.Integer),
        sa.Column("signal", sa.Integer),
    )
    op.create_index("ix_job_runs_start", "job_runs", ["start_time"])
    op.create_index("ix_job_runs_end", "job_runs", ["end_time"])
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("inventory", sa.JSON, nullable=False),
        sa.Column("gpu_uuids", sa.JSON, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("drain", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
        sa.Column("registered", sa.Double),
        sa.Column("last_heartbeat", sa.Double),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("user", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("node", sa.String(128)),
        sa.Column("hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created", sa.Double, nullable=False),
        sa.Column("revoked", sa.Boolean, nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "store_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("the store never drops data")
