"""The controller's durable store: SQLAlchemy tables, Alembic migrations, a group-commit writer."""

from gpufleet.adapters.store.store import Store, sqlite_url
from gpufleet.adapters.store.writer import GroupWriter

__all__ = ["GroupWriter", "Store", "sqlite_url"]
