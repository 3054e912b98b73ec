"""The snapshot refuses what it cannot use rather than scheduling on it silently."""

from __future__ import annotations

import numpy as np
import pytest

from builders import cluster, node
from gpufleet.core.accounts import Account, AccountTree, AccountUsage, User
from gpufleet.core.snapshot import Snapshot


def test_accounts_must_be_usage_not_the_bare_tree() -> None:
    tree = AccountTree([Account("vision")], [User("alice", "vision")])
    state = cluster(node("a").gpus(1))
    # The tree alone would give every job fairshare 0 without a word.
    with pytest.raises(TypeError, match=r"Snapshot\.accounts: .* got AccountTree"):
        Snapshot(state, (), (), {}, {}, 0, accounts=tree)  # type: ignore[arg-type]
    usage = AccountUsage(tree, np.zeros(len(tree)))
    assert Snapshot(state, (), (), {}, {}, 0, accounts=usage).accounts is usage
