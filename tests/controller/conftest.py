from collections.abc import Iterator

import pytest

from controller.harness import Cluster
from store.databases import Database, db

__all__ = ["cluster", "db"]


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    """The harness's controller with both its nodes registered (a module may define its own)."""
    c = Cluster(db)
    c.register()
    yield c
    c.ctl.stop()
