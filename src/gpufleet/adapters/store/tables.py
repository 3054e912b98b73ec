"""The store's tables (SQLAlchemy Core), as the newest migration leaves them.

Times are Unix seconds as floats. JSON columns hold lists and objects the
controller writes and reads back whole. Job rows have an internal integer
``id`` (the key every other table uses) and the user-facing ``job_id``:
``"123"`` for a plain job, ``"123_4"`` for task 4 of array job 123 (both
share ``job_num`` 123).

The migrations under ``migrations/versions`` create exactly these tables; a
test compares the two, so a change here without a migration fails.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

# SQLite autoincrements only a column typed exactly INTEGER PRIMARY KEY.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Time: sa.Double[float] = sa.Double()

jobs = sa.Table(
    "jobs",
    metadata,
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
    # Only an operator or admin may release an admin hold (``held`` is set too).
    sa.Column("admin_hold", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("nice", sa.Integer, nullable=False, server_default="0"),
    sa.Column("submit_time", Time, nullable=False),
    sa.Column("begin_time", Time),
    sa.Column("start_time", Time),
    sa.Column("end_time", Time),
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
    # The run's end is recorded but a node has not confirmed it gone: its room stays held.
    sa.Column("cleanup", sa.Boolean, nullable=False, server_default=sa.false()),
    # A gang's tasks that ended so far in this run: node -> how.
    sa.Column("task_exits", sa.JSON),
    sa.UniqueConstraint("user", "request_id", name="uq_jobs_user_request_id"),
)
sa.Index("ix_jobs_user_id", jobs.c.user, jobs.c.id)
sa.Index("ix_jobs_state_id", jobs.c.state, jobs.c.id)
sa.Index("ix_jobs_user_state_id", jobs.c.user, jobs.c.state, jobs.c.id)
sa.Index("ix_jobs_job_num", jobs.c.job_num)
sa.Index("ix_jobs_account_id", jobs.c.account, jobs.c.id)
sa.Index("ix_jobs_partition_id", jobs.c.partition, jobs.c.id)

job_history = sa.Table(
    "job_history",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("job", sa.BigInteger, sa.ForeignKey("jobs.id"), nullable=False),
    sa.Column("time", Time, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
)
sa.Index("ix_job_history_job", job_history.c.job)

job_runs = sa.Table(
    "job_runs",
    metadata,
    sa.Column("job", sa.BigInteger, sa.ForeignKey("jobs.id"), primary_key=True),
    sa.Column("run", sa.Integer, primary_key=True),
    sa.Column("start_time", Time, nullable=False),
    sa.Column("end_time", Time),
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
sa.Index("ix_job_runs_start", job_runs.c.start_time)
sa.Index("ix_job_runs_end", job_runs.c.end_time)

nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("inventory", sa.JSON, nullable=False),
    sa.Column("gpu_uuids", sa.JSON, nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("drain", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("reason", sa.String(1024), nullable=False, server_default=""),
    sa.Column("registered", Time),
    sa.Column("last_heartbeat", Time),
)

# Pool nodes asked of a provider whose agents have not registered yet: a restarted
# controller waits for them (and gives them up in time) instead of asking again.
booting_nodes = sa.Table(
    "booting_nodes",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("pool", sa.String(128), nullable=False),
    sa.Column("created", Time, nullable=False),
)

# MIG layout changes sent to a node's agent and not yet reported done: a restarted
# controller keeps the GPU out of work and sends them again. ``layout``: the
# protocol's ``PROFILE@START`` list, null to turn MIG off.
mig_orders = sa.Table(
    "mig_orders",
    metadata,
    sa.Column("node", sa.String(128), primary_key=True),
    sa.Column("gpu", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("layout", sa.JSON),
    sa.Column("time", Time, nullable=False),
)

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(256), nullable=False),
    sa.Column("user", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("node", sa.String(128)),
    sa.Column("hash", sa.String(64), nullable=False, unique=True),
    sa.Column("created", Time, nullable=False),
    sa.Column("revoked", sa.Boolean, nullable=False, server_default=sa.false()),
)

store_meta = sa.Table(
    "store_meta",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

audit = sa.Table(
    "audit",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("time", Time, nullable=False),
    sa.Column("who", sa.String(128), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("target", sa.String(256), nullable=False, server_default=""),
    sa.Column("detail", sa.JSON, nullable=False),
)

config = sa.Table(
    "config",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("time", Time, nullable=False),
    sa.Column("who", sa.String(128), nullable=False),
    sa.Column("document", sa.JSON, nullable=False),
)
