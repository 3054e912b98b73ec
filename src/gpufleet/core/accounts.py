"""The account tree that fairshare divides the cluster by.

An organisation's accounts nest (organisation -> team -> ...), and users hold
associations with the accounts they may charge, as in Slurm's sacctmgr. Every
association carries raw shares: a node's slice of its parent is its shares
over the shares of all its siblings, so shares at one level need not sum to
anything in particular.

The tree is static configuration, stored columnar: association ``i`` has
``parent[i]``, ``shares[i]`` and ``is_user[i]``; index 0 is the implicit root,
and every parent precedes its children, so one pass in index order visits
parents first. Usage is not part of the tree: it changes every cycle and lives
in arrays over the same indices (see ``policies.fairshare``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from gpufleet.core.model import InvalidSpec

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

ROOT = "root"
"""The implicit top of every tree; accounts with this parent hang off the whole cluster."""
PARENT: Final = "parent"
"""A user's shares that stand for its account's (Slurm's ``FairShare=parent``)."""


@dataclass(frozen=True, slots=True)
class Account:
    """An account under ``parent`` (another account, or ``ROOT``).

    ``priority`` is Slurm's association Priority, read by the multifactor
    association factor; None inherits the parent's (the root's is 0).
    """

    name: str
    parent: str = ROOT
    shares: float = 1.0
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class User:
    """A user's association with one account; a user may hold several.

    ``shares`` of ``PARENT`` (Slurm's ``FairShare=parent``): the user is left
    out of its siblings' share sum and takes its account's fairshare (see
    ``policies.fairshare``).
    """

    name: str
    account: str
    shares: float | Literal["parent"] = 1.0
    priority: int | None = None


class AccountTree:
    """Validated, columnar account tree.

    Raises InvalidSpec naming the offending key (``accounts.NAME.parent``,
    ``users.NAME.shares``, ...) for an unknown or cyclic parent, a duplicate
    name, shares that are not a positive finite number, or a negative priority.
    """

    def __init__(self, accounts: Sequence[Account], users: Sequence[User]) -> None:
        by_name: dict[str, Account] = {}
        for acct in accounts:
            key = f"accounts.{acct.name}"
            if not acct.name or acct.name == ROOT:
                raise InvalidSpec(key, f"an account needs a name other than {ROOT!r}")
            if acct.name in by_name:
                raise InvalidSpec(key, "defined twice")
            _check(key, acct.shares, acct.priority)
            by_name[acct.name] = acct

        names: list[str] = [ROOT]
        parent: list[int] = [-1]
        shares: list[float] = [1.0]
        priority: list[int] = [0]
        index = {ROOT: 0}

        def add(name: str, p: int, node_shares: float, node_priority: int | None) -> int:
            """Append one association under parent ``p``; it inherits a missing priority."""
            names.append(name)
            parent.append(p)
            shares.append(node_shares)
            priority.append(priority[p] if node_priority is None else node_priority)
            return len(names) - 1

        # Parents before children: place each account after walking up to a placed ancestor.
        for acct in accounts:
            chain: list[Account] = []
            cursor = acct
            while cursor.name not in index:
                if cursor in chain:
                    looped = [*chain[chain.index(cursor) :], cursor]
                    loop = " -> ".join(a.name for a in looped)
                    raise InvalidSpec(f"accounts.{cursor.name}.parent", f"cycle {loop}")
                chain.append(cursor)
                if cursor.parent != ROOT and cursor.parent not in by_name:
                    raise InvalidSpec(
                        f"accounts.{cursor.name}.parent", f"unknown account {cursor.parent!r}"
                    )
                if cursor.parent == ROOT:
                    break
                cursor = by_name[cursor.parent]
            for a in reversed(chain):
                index[a.name] = add(a.name, index[a.parent], a.shares, a.priority)
        n_accounts = len(names)

        # account -> user -> index: two lookups allocate nothing, unlike a tuple key
        self._users: dict[str, dict[str, int]] = {}
        parent_users: list[int] = []
        for user in users:
            key = f"users.{user.name}"
            if not user.name:
                raise InvalidSpec(key, "a user needs a name")
            if user.account != ROOT and user.account not in by_name:  # root: a top-level user
                raise InvalidSpec(f"{key}.account", f"unknown account {user.account!r}")
            members = self._users.setdefault(user.account, {})
            if user.name in members:
                raise InvalidSpec(key, f"associated with account {user.account!r} twice")
            if isinstance(user.shares, str):
                if user.shares != PARENT:
                    raise InvalidSpec(
                        f"{key}.shares",
                        f"must be a positive number or {PARENT!r}, got {user.shares!r}",
                    )
                _check(key, 1.0, user.priority)
                parent_users.append(len(names))
                raw = 0.0  # counts in no sibling's share sum
            else:
                _check(key, user.shares, user.priority)
                raw = user.shares
            members[user.name] = add(user.name, index[user.account], raw, user.priority)

        self._accounts = index
        self.names: tuple[str, ...] = tuple(names)
        self.parent: IntArray = np.array(parent, dtype=np.int64)
        self.shares: FloatArray = np.array(shares, dtype=np.float64)
        self.priority: IntArray = np.array(priority, dtype=np.int64)
        self.is_user: BoolArray = np.arange(len(names)) >= n_accounts
        self.use_parent: BoolArray = np.zeros(len(names), dtype=np.bool_)
        self.use_parent[parent_users] = True
        kids: list[list[int]] = [[] for _ in names]
        for i in range(1, len(names)):
            kids[parent[i]].append(i)
        self.children: tuple[tuple[int, ...], ...] = tuple(tuple(k) for k in kids)
        # Each node's siblings' shares summed (its own included); 1 for the root.
        totals = np.zeros(len(names))
        np.add.at(totals, self.parent[1:], self.shares[1:])
        self.sibling_shares: FloatArray = np.where(
            np.arange(len(names)) == 0, 1.0, totals[np.maximum(self.parent, 0)]
        )

    def __len__(self) -> int:
        return len(self.names)

    @property
    def n_users(self) -> int:
        return int(self.is_user.sum())

    def account(self, name: str) -> int:
        """Index of an account (``ROOT`` is 0); KeyError if there is none."""
        return self._accounts[name]

    def user(self, account: str, name: str) -> int:
        """Index of the association of user ``name`` with ``account``; KeyError if none."""
        return self._users[account][name]

    def lookup(self, accounts: Iterable[str], users: Iterable[str]) -> IntArray:
        """Indices of the (account, user) associations, pairwise; -1 where the tree has none."""
        get = self._users.get
        none: dict[str, int] = {}
        return np.array(
            [get(a, none).get(u, -1) for a, u in zip(accounts, users, strict=True)],
            dtype=np.int64,
        )

    def charged_to(self, accounts: Iterable[str], users: Iterable[str]) -> IntArray:
        """Where the usage of jobs of (account, user), pairwise, is charged: the user's
        association, or else the account itself (an operator's or admin's job on an
        account they have no association with); -1 where the tree has neither."""
        get, find = self._users.get, self._accounts.get
        none: dict[str, int] = {}
        return np.array(
            [get(a, none).get(u, find(a, -1)) for a, u in zip(accounts, users, strict=True)],
            dtype=np.int64,
        )

    def rollup(self, usage: FloatArray) -> FloatArray:
        """Usage of every association including all its descendants'.

        ``usage`` holds what was charged to each association directly
        (normally only to users); an account's result is that plus the sum
        over its children, as Slurm accumulates usage up the tree.
        """
        total = np.array(usage, dtype=np.float64, copy=True)
        for i in range(len(total) - 1, 0, -1):  # children come after their parents
            total[self.parent[i]] += total[i]
        return total

    def local_shares(self) -> FloatArray:
        """Each association's shares over its siblings' (Fair Tree's "Norm Shares").

        A ``PARENT`` user shows its account's, as Slurm does.
        """
        local = np.divide(
            self.shares, self.sibling_shares, out=np.zeros(len(self)), where=self.sibling_shares > 0
        )
        return np.where(self.use_parent, local[np.maximum(self.parent, 0)], local)

    def normalized_shares(self) -> FloatArray:
        """Each association's fraction of the whole cluster (classic's "Norm Shares").

        A node's share of its parent times the parent's normalised share; the
        root is 1 and the users of the tree together hold at most 1. A
        ``PARENT`` user has its account's (and is not counted in that sum).
        """
        local = self.local_shares()
        norm = np.ones(len(self))
        for i in range(1, len(self)):
            p = self.parent[i]
            norm[i] = norm[p] if self.use_parent[i] else local[i] * norm[p]
        return norm


@dataclass(frozen=True, slots=True)
class AccountUsage:
    """The tree with each association's decayed usage: what a driver carries between cycles.

    ``usage`` is aligned with the tree's associations and holds what was
    charged to each directly (see ``policies.fairshare.charge``). It is
    immutable: new usage is a new ``AccountUsage``.
    """

    tree: AccountTree
    usage: FloatArray

    def __post_init__(self) -> None:
        if np.shape(self.usage) != (len(self.tree),):
            raise InvalidSpec(
                "usage", f"{np.shape(self.usage)} entries for {len(self.tree)} associations"
            )
        # A private read-only copy: orderings may cache what they derive from it.
        usage = np.array(self.usage, dtype=np.float64)
        usage.flags.writeable = False
        object.__setattr__(self, "usage", usage)


def _check(key: str, shares: float, priority: int | None) -> None:
    if not (math.isfinite(shares) and shares > 0):
        raise InvalidSpec(f"{key}.shares", f"must be a positive number, got {shares}")
    if priority is not None and priority < 0:
        raise InvalidSpec(f"{key}.priority", f"must be zero or more, got {priority}")
