"""Fairshare: the account tree, usage accounting, classic fairshare and Fair Tree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from builders import cluster, node
from gpufleet.core.accounts import (
    PARENT,
    ROOT,
    Account,
    AccountTree,
    AccountUsage,
    FloatArray,
    User,
)
from gpufleet.core.job import Job, JobState, QoS, RunningJob
from gpufleet.core.model import InvalidSpec, Request
from gpufleet.core.state import Assignment
from gpufleet.policies.config import Policy, PolicyConfig
from gpufleet.policies.fairshare import (
    FairshareArgs,
    accrue,
    billable_gpu_seconds,
    charge,
    classic,
    decay,
    factors,
    fair_tree,
)


def usage_of(tree: AccountTree, **by_user: float) -> FloatArray:
    """Usage charged to users given as ``account__user=value``."""
    out = np.zeros(len(tree))
    for key, value in by_user.items():
        account, user = key.split("__")
        out[tree.user(account, user)] = value
    return out


# -- the account tree ---------------------------------------------------------


@pytest.mark.parametrize(
    ("accounts", "users", "field", "fragment"),
    [
        ([Account("a", parent="nope")], [], "accounts.a.parent", "unknown account 'nope'"),
        ([Account("a", parent="a")], [], "accounts.a.parent", "cycle a -> a"),
        (
            [Account("a", parent="c"), Account("b", parent="a"), Account("c", parent="b")],
            [],
            "accounts.a.parent",
            "cycle a -> c -> b -> a",
        ),
        ([Account("a", shares=0)], [], "accounts.a.shares", "positive number, got 0"),
        ([Account("a", shares=-2)], [], "accounts.a.shares", "got -2"),
        ([Account("a", shares=float("nan"))], [], "accounts.a.shares", "got nan"),
        ([Account("a"), Account("a")], [], "accounts.a", "defined twice"),
        ([Account("a", priority=-1)], [], "accounts.a.priority", "zero or more, got -1"),
        ([Account("a")], [User("u", "a", priority=-3)], "users.u.priority", "got -3"),
        ([Account(ROOT)], [], "accounts.root", "other than 'root'"),
        ([Account("a")], [User("u", "b")], "users.u.account", "unknown account 'b'"),
        ([Account("a")], [User("u", "a", shares=0)], "users.u.shares", "got 0"),
        ([Account("a")], [User("u", "a"), User("u", "a")], "users.u", "'a' twice"),
        ([Account("a")], [User("u", "a", "mine")], "users.u.shares", "or 'parent', got 'mine'"),  # type: ignore[arg-type]
    ],
)
def test_tree_rejects_naming_the_key(
    accounts: list[Account], users: list[User], field: str, fragment: str
) -> None:
    with pytest.raises(InvalidSpec) as err:
        AccountTree(accounts, users)
    assert err.value.field == field
    assert fragment in err.value.reason
    assert "\n" not in str(err.value)


def test_tree_orders_parents_first_whatever_the_input_order() -> None:
    tree = AccountTree(
        [Account("team", parent="org", shares=2), Account("org", shares=3)],
        [User("alice", "team"), User("alice", "org", shares=5)],
    )
    assert tree.names == ("root", "org", "team", "alice", "alice")
    assert tree.parent.tolist() == [-1, 0, 1, 2, 1]
    assert tree.user("org", "alice") == 4
    assert tree.is_user.tolist() == [False, False, False, True, True]
    assert tree.n_users == 2


def test_rollup_sums_children_into_parents() -> None:
    tree = AccountTree(
        [Account("org"), Account("t1", "org"), Account("t2", "org")],
        [User("a", "t1"), User("b", "t1"), User("c", "t2")],
    )
    rolled = tree.rollup(usage_of(tree, t1__a=1.0, t1__b=2.0, t2__c=4.0))
    # t1 = 1 + 2 = 3; t2 = 4; org = 3 + 4 = 7; root = 7
    assert rolled[tree.account("t1")] == 3.0
    assert rolled[tree.account("t2")] == 4.0
    assert rolled[tree.account("org")] == 7.0
    assert rolled[0] == 7.0


def test_normalized_shares_multiply_down_the_tree() -> None:
    tree = AccountTree(
        [Account("a", shares=40), Account("d", shares=60), Account("b", "a", 30)],
        [User("u1", "b"), User("u2", "b", shares=3)],
    )
    norm = tree.normalized_shares()
    # a = 40/100 = 0.4; b is a's only child: 0.4; u2 = 3/4 of b = 0.3
    assert norm[tree.account("a")] == pytest.approx(0.4)
    assert norm[tree.account("b")] == pytest.approx(0.4)
    assert norm[tree.user("b", "u2")] == pytest.approx(0.3)


def test_association_priority_inherits_unless_set() -> None:
    tree = AccountTree(
        [Account("org", priority=5), Account("team", "org"), Account("vip", "org", priority=9)],
        [User("a", "team"), User("b", "vip"), User("c", "team", priority=1)],
    )
    # a inherits team, which inherits org (5); b inherits vip (9); c sets its own (1)
    assert tree.priority[tree.user("team", "a")] == 5
    assert tree.priority[tree.user("vip", "b")] == 9
    assert tree.priority[tree.user("team", "c")] == 1


# -- usage accounting ---------------------------------------------------------


def test_billable_gpu_seconds_multiplies_weight_and_usage_factor() -> None:
    billed = billable_gpu_seconds(
        np.array([3600.0, 3600.0]), np.array([2.0, 1.0]), np.array([1.0, 0.5])
    )
    # 3600 x 2 (H100 weight) x 1 = 7200; 3600 x 1 x 0.5 (half-price QoS) = 1800
    assert billed.tolist() == [7200.0, 1800.0]


@pytest.mark.parametrize(
    ("elapsed", "half_life", "expected"),
    [
        (0, 100, 800.0),  # no time passed
        (100, 100, 400.0),  # one half-life: 800 / 2
        (300, 100, 100.0),  # three half-lives: 800 / 8
        (50, 100, 800.0 / 2**0.5),  # half a half-life: 800 / sqrt(2)
        (10_000, 0, 800.0),  # half-life 0 disables decay
    ],
)
def test_decay_halves_every_half_life(elapsed: int, half_life: int, expected: float) -> None:
    assert decay(np.array([800.0]), elapsed, half_life)[0] == pytest.approx(expected)


def test_decay_rejects_time_running_backwards() -> None:
    with pytest.raises(ValueError, match="elapsed_s"):
        decay(np.array([1.0]), -1, 100)


def test_accrue_decays_then_charges_each_association() -> None:
    usage = np.array([0.0, 100.0, 40.0])
    after = accrue(usage, 60, 60, np.array([2, 2, 1]), np.array([5.0, 5.0, 1.0]))
    # [0, 100/2 + 1, 40/2 + 5 + 5]
    assert after.tolist() == [0.0, 51.0, 30.0]
    assert usage.tolist() == [0.0, 100.0, 40.0]


def test_charge_bills_running_jobs_to_their_associations() -> None:
    tree = AccountTree([Account("team")], [User("alice", "team"), User("bob", "team")])
    state = cluster(node("h").gpus(8).model("H100-80GB"), node("t").gpus(4).model("T4"))

    def running(
        id: str, user: str, request: Request, node: int, qos: str = "normal", account: str = "team"
    ) -> RunningJob:
        job = Job(
            id, user, account, qos, "batch", request, 0, 3600, state=JobState.RUNNING, start_time=0
        )
        return RunningJob(job, (Assignment(node, gpus=(0,)),), 3600)

    jobs = [
        running("h", "alice", Request(gpus=2), node=0),
        running("t", "bob", Request(gpu_milli=500), node=1, qos="cheap"),
        running("x", "eve", Request(gpus=4), node=1),  # no association (an admin): the account
        running("y", "eve", Request(gpus=4), node=0, account="other"),  # unknown: bills nobody
    ]
    qos = {"normal": QoS("normal"), "cheap": QoS("cheap", usage_factor=0.5)}
    args = FairshareArgs(gpu_billing_weights={"H100-80GB": 3.0}, half_life_s=100)
    before = AccountUsage(tree, usage_of(tree, team__alice=1000.0))
    after = charge(before, jobs, state, qos, 100, args)
    # alice: 1000 halved over one half-life = 500, + 2 GPUs x 100 s x 3 (H100) x 1 = 600 -> 1100
    # bob: 0.5 GPU x 100 s x 1 (T4 unlisted) x 0.5 (QoS cheap) = 25
    # eve's x, to the account itself: 4 GPUs x 100 s x 1 (T4) = 400
    assert after.usage[tree.user("team", "alice")] == pytest.approx(1100.0)
    assert after.usage[tree.user("team", "bob")] == pytest.approx(25.0)
    assert after.usage[tree.account("team")] == pytest.approx(400.0)
    assert after.usage.sum() == pytest.approx(1525.0)
    assert tree.rollup(after.usage)[tree.account("team")] == pytest.approx(1525.0)


def test_account_usage_must_match_its_tree() -> None:
    tree = AccountTree([Account("team")], [User("alice", "team")])
    with pytest.raises(InvalidSpec, match="usage: \\(2,\\) entries for 3 associations"):
        AccountUsage(tree, np.zeros(2))


def test_args_reject_a_negative_half_life_naming_the_key() -> None:
    with pytest.raises(ValidationError, match="half_life_s"):
        FairshareArgs(half_life_s=-1)


def test_args_reject_a_negative_billing_weight_naming_the_model() -> None:
    with pytest.raises(ValidationError, match=r"gpu_billing_weights\.T4"):
        FairshareArgs(gpu_billing_weights={"T4": -1.0})


def test_billing_weight_defaults_to_one() -> None:
    args = FairshareArgs(gpu_billing_weights={"H100-80GB": 2.0})
    assert args.billing_weight("H100-80GB") == 2.0
    assert args.billing_weight("T4") == 1.0


# -- classic fairshare --------------------------------------------------------


def slurm_example() -> tuple[AccountTree, np.ndarray]:
    """The worked example of Slurm's "Classic Fairshare Algorithm" page.

    Accounts A (40 shares) and D (60) under the root; B (30) and C (10) under A;
    E (25) and F (35) under D. User 1 is in B, users 2 and 3 hold one share each
    in C, user 4 is in E and user 5 in F. Users 1, 2 and 4 used 0.2, 0.25 and
    0.25 of the machine: the page normalises by the machine's capacity, not by
    the 0.7 used, hence ``total_usage=1``.
    """
    tree = AccountTree(
        [
            Account("A", shares=40),
            Account("D", shares=60),
            Account("B", "A", 30),
            Account("C", "A", 10),
            Account("E", "D", 25),
            Account("F", "D", 35),
        ],
        [User("u1", "B"), User("u2", "C"), User("u3", "C"), User("u4", "E"), User("u5", "F")],
    )
    return tree, usage_of(tree, B__u1=0.2, C__u2=0.25, E__u4=0.25)


def test_classic_reproduces_slurms_worked_example() -> None:
    tree, usage = slurm_example()
    table = classic(tree, usage, total_usage=1.0)
    users = [tree.user(a, u) for a, u in (("B", "u1"), ("C", "u2"), ("C", "u3"), ("E", "u4"))]
    users.append(tree.user("F", "u5"))
    # effective usage of the accounts: B 0.2 + (0.45 - 0.2) x 30/40 = 0.3875,
    # C 0.25 + (0.45 - 0.25) x 10/40 = 0.3, E 0.25 + 0 = 0.25, F 0 + 0.25 x 35/60 = 0.1458
    accounts = [tree.account(a) for a in "BCEF"]
    assert table.effective_usage[accounts] == pytest.approx([0.3875, 0.3, 0.25, 0.1458], abs=1e-4)
    # users: u2 0.25 + (0.3 - 0.25) x 1/2 = 0.275; u3 0 + 0.3 x 1/2 = 0.15
    assert table.norm_shares[users] == pytest.approx([0.3, 0.05, 0.05, 0.25, 0.35])
    # F = 2^(-U_E/S): 2^(-.3875/.3), 2^(-.275/.05), 2^(-.15/.05), 2^(-.25/.25), 2^(-.1458/.35)
    assert np.round(table.factor[users], 3).tolist() == [0.408, 0.022, 0.125, 0.5, 0.749]


def test_classic_defaults_to_normalising_by_the_tree_total() -> None:
    tree, usage = slurm_example()
    table = classic(tree, usage)
    # the 0.7 charged is now the whole: u1 0.2/0.7
    assert table.norm_usage[tree.user("B", "u1")] == pytest.approx(0.2 / 0.7)
    with pytest.raises(ValueError, match="total_usage"):
        classic(tree, usage, total_usage=0.5)


def test_classic_dampening_softens_the_factor() -> None:
    tree, usage = slurm_example()
    u2 = tree.user("C", "u2")
    # d = 2: 2^(-.275/.05/2) = 2^-2.75 = 0.1487
    damped = classic(tree, usage, total_usage=1.0, dampening_factor=2.0).factor[u2]
    assert damped == pytest.approx(2**-2.75)


def test_classic_without_usage_gives_everyone_one() -> None:
    tree, usage = slurm_example()
    assert classic(tree, usage * 0).factor.tolist() == [1.0] * len(tree)


# -- Fair Tree ----------------------------------------------------------------


def test_fair_tree_ranks_all_of_an_underserved_account_above_an_overserved_one() -> None:
    tree = AccountTree(
        [Account("busy", shares=50), Account("quiet", shares=50)],
        [User("b1", "busy"), User("b2", "busy"), User("q1", "quiet"), User("q2", "quiet")],
    )
    # busy: 90 of 100 used for half the shares -> LF 0.5/0.9 = 0.56; quiet: 0.5/0.1 = 5.
    # b1 has never run anything yet still ranks below q2, the heaviest quiet user.
    table = fair_tree(tree, usage_of(tree, busy__b2=90.0, quiet__q1=2.0, quiet__q2=8.0))
    fs = {tree.names[i]: table.factor[i] for i in range(len(tree)) if tree.is_user[i]}
    # walk: quiet (q1: 0.5/0.2 = 2.5, q2: 0.5/0.8) then busy (b1: inf, b2: 0.5/1.0)
    # 4 users: q1 4/4, q2 3/4, b1 2/4, b2 1/4
    assert fs == {"q1": 1.0, "q2": 0.75, "b1": 0.5, "b2": 0.25}
    assert table.level_fs[tree.account("busy")] == pytest.approx(0.5 / 0.9)


def test_fair_tree_walks_every_level_depth_first() -> None:
    tree, usage = slurm_example()
    table = fair_tree(tree, usage)
    # root's children: D (0.6/0.25*0.7 -> 0.6/(0.25/0.7) = 1.68) before A (0.4/(0.45/0.7) = 0.62)
    # under D: F (no usage, inf) before E; under A: B (0.75/(0.2/0.45) = 1.69) before C
    # under C: u3 (no usage) before u2. Order u5, u4, u1, u3, u2 -> 5/5 .. 1/5
    order = [("F", "u5"), ("E", "u4"), ("B", "u1"), ("C", "u3"), ("C", "u2")]
    assert [table.factor[tree.user(a, u)] for a, u in order] == [1.0, 0.8, 0.6, 0.4, 0.2]
    assert table.level_fs[tree.account("D")] == pytest.approx(0.6 / (0.25 / 0.7))


def test_fair_tree_sibling_users_with_equal_level_fs_share_a_rank() -> None:
    tree = AccountTree(
        [Account("a")],
        [User("x", "a"), User("y", "a"), User("z", "a"), User("w", "a", shares=2)],
    )
    # x, y: never ran -> inf, tied; z: 0.2/0.2 = 1 and w: 0.4/0.8 = 0.5
    table = fair_tree(tree, usage_of(tree, a__z=2.0, a__w=8.0))
    fs = [table.factor[tree.user("a", u)] for u in "xyzw"]
    # x and y share rank 4 -> 4/4; z is third met -> 2/4; w 1/4 (competition ranking)
    assert fs == [1.0, 1.0, 0.5, 0.25]


def test_fair_tree_ties_survive_rounding() -> None:
    tree = AccountTree([Account("a")], [User("x", "a", shares=1), User("y", "a", shares=3)])
    # LF x = 0.25/(0.1/0.4), y = 0.75/(0.3/0.4): both 1 on paper, not bit-for-bit in floats
    table = fair_tree(tree, usage_of(tree, a__x=0.1, a__y=0.3))
    assert table.factor[tree.user("a", "x")] == table.factor[tree.user("a", "y")] == 1.0


def test_fair_tree_user_ties_with_a_sibling_account_despite_rounding() -> None:
    tree = AccountTree(
        [Account("a"), Account("s", "a", shares=3)],
        [User("u", "a"), User("s1", "s"), User("s2", "s")],
    )
    # u: 0.25 / (0.7 / 2.8) = 1.0; s: 0.75 / (2.1 / 2.8) = 1.0000000000000002 in floats.
    # Still a tie: u sorts first (3/3), s's first user s2 (no usage) shares its rank,
    # s1 is third met -> 1/3.
    table = fair_tree(tree, usage_of(tree, a__u=0.7, s__s1=0.7 * 3))
    assert table.level_fs[tree.account("s")] > table.level_fs[tree.user("a", "u")]
    fs = [table.factor[tree.user(a, u)] for a, u in (("a", "u"), ("s", "s2"), ("s", "s1"))]
    assert fs == [1.0, 1.0, pytest.approx(1 / 3)]


def test_fair_tree_merges_tied_sibling_accounts() -> None:
    tree = AccountTree(
        [Account("a"), Account("b"), Account("c")],
        [User("a1", "a"), User("a2", "a"), User("b1", "b"), User("c1", "c")],
    )
    # a and b used 10 of 40 each: LF (1/3)/(1/4) = 4/3, tied; c used 20: LF 2/3.
    # Merged, a's and b's users sort together: a1 0.5/0.2 = 2.5, b1 1/1 = 1, a2 0.5/0.8.
    table = fair_tree(tree, usage_of(tree, a__a1=2.0, a__a2=8.0, b__b1=10.0, c__c1=20.0))
    order = [("a", "a1"), ("b", "b1"), ("a", "a2"), ("c", "c1")]
    # without the merge b1 would come after a2
    assert [table.factor[tree.user(a, u)] for a, u in order] == [1.0, 0.75, 0.5, 0.25]


def test_fair_tree_can_visit_tied_sibling_accounts_in_turn_as_slurms_code_does() -> None:
    tree = AccountTree(
        [Account("a"), Account("b"), Account("c")],
        [User("a1", "a"), User("a2", "a"), User("b1", "b"), User("c1", "c")],
    )
    usage = usage_of(tree, a__a1=2.0, a__a2=8.0, b__b1=10.0, c__c1=20.0)
    # a and b tie (LF 4/3) as above. In turn: a's users first, a1 4/4 and a2 3/4; then
    # b, tied, so its first user b1 shares a2's rank 3/4; c1 is the fourth met: 1/4.
    table = fair_tree(tree, usage, tied_accounts="in_turn")
    order = [("a", "a1"), ("a", "a2"), ("b", "b1"), ("c", "c1")]
    assert [table.factor[tree.user(a, u)] for a, u in order] == [1.0, 0.75, 0.75, 0.25]
    # the profile option reaches the factors
    args = FairshareArgs(tied_accounts="in_turn")
    assert factors(tree, usage, args).tolist() == table.factor.tolist()
    assert factors(tree, usage, FairshareArgs()).tolist() == fair_tree(tree, usage).factor.tolist()


def test_fair_tree_shows_norm_shares_among_siblings_as_sshare_does() -> None:
    tree, usage = slurm_example()
    table = fair_tree(tree, usage)
    # B holds 30 of A's 40 shares: 0.75 (the whole-cluster 0.3 is classic's); u1 is
    # B's only user: 1; u2 one of C's two: 0.5; D 60 of 100: 0.6.
    names = [("B", None), ("B", "u1"), ("C", "u2"), ("D", None)]
    index = [tree.user(a, u) if u else tree.account(a) for a, u in names]
    assert table.norm_shares[index] == pytest.approx([0.75, 1.0, 0.5, 0.6])
    assert classic(tree, usage).norm_shares[index] == pytest.approx([0.3, 0.3, 0.05, 0.6])


def parent_tree() -> tuple[AccountTree, FloatArray]:
    """Accounts A and B of one share each; x and y hold a share each in A, p takes
    A's fairshare (FairShare=parent); w is in B. x used 3, p 1, y and w nothing."""
    tree = AccountTree(
        [Account("A"), Account("B")],
        [User("x", "A"), User("y", "A"), User("p", "A", PARENT), User("w", "B")],
    )
    return tree, usage_of(tree, A__x=3.0, A__p=1.0)


def test_a_parent_user_is_left_out_of_its_siblings_share_sum() -> None:
    tree, _ = parent_tree()
    x, y, p = (tree.user("A", u) for u in "xyp")
    # x and y split A's 1/2 between them, 1/4 each (not 1/6 as with p holding a share);
    # p shows A's own share.
    assert tree.normalized_shares()[[x, y, p]] == pytest.approx([0.25, 0.25, 0.5])
    assert tree.local_shares()[[x, y, p]] == pytest.approx([0.5, 0.5, 0.5])
    assert tree.use_parent.tolist() == [u in (p,) for u in range(len(tree))]


def test_classic_gives_a_parent_user_its_accounts_usage_and_shares() -> None:
    tree, usage = parent_tree()
    table = classic(tree, usage)
    x, y, p, w = (tree.user(a, u) for a, u in (("A", "x"), ("A", "y"), ("A", "p"), ("B", "w")))
    # A: U = U_E = 4/4 = 1, S = 1/2 -> 2^(-2) = 0.25, and so p.
    # x: U_E = 0.75 + (1 - 0.75) x 1/2 = 0.875, S = 0.25 -> 2^(-3.5); y: 0.5 / 0.25 -> 2^(-2)
    assert table.effective_usage[p] == table.effective_usage[tree.account("A")] == 1.0
    assert table.factor[[x, y, p, w]] == pytest.approx([2**-3.5, 0.25, 0.25, 1.0])


def test_fair_tree_ranks_a_parent_user_first_among_its_siblings() -> None:
    tree, _ = parent_tree()
    table = fair_tree(tree, usage_of(tree, A__x=3.0, A__p=1.0, A__y=0.5))
    # B (no usage, LF inf) before A. Under A, of 4.5 used: p has LF inf despite its
    # usage; y 0.5 / (0.5 / 4.5) = 4.5; x 0.5 / (3 / 4.5) = 0.75. As shares=1, p
    # would have 1/3 / (1 / 4.5) = 1.5 and come after y.
    order = [("B", "w"), ("A", "p"), ("A", "y"), ("A", "x")]
    assert [table.factor[tree.user(a, u)] for a, u in order] == [1.0, 0.75, 0.5, 0.25]
    assert table.level_fs[tree.user("A", "p")] == np.inf


def test_fair_tree_user_tied_with_a_sibling_account_shares_its_first_rank() -> None:
    tree = AccountTree([Account("a"), Account("sub", "a")], [User("u", "a"), User("s1", "sub")])
    # neither u nor sub has usage: both inf under a; u sorts first, sub's s1 ties with it
    table = fair_tree(tree, np.zeros(len(tree)))
    assert table.factor[tree.user("a", "u")] == table.factor[tree.user("sub", "s1")] == 1.0


def test_factors_selects_the_algorithm() -> None:
    tree, usage = slurm_example()
    u2 = tree.user("C", "u2")
    assert factors(tree, usage, FairshareArgs()).tolist() == fair_tree(tree, usage).factor.tolist()
    # classic normalises by the tree's 0.7 here, so u2 is not the page's 0.022
    assert factors(tree, usage, FairshareArgs(algorithm="classic"))[u2] == pytest.approx(
        classic(tree, usage).factor[u2]
    )


@pytest.mark.parametrize(
    "args", [FairshareArgs(algorithm="fair_tree"), FairshareArgs(algorithm="classic")]
)
def test_usage_must_match_the_tree(args: FairshareArgs) -> None:
    tree, usage = slurm_example()
    with pytest.raises(ValueError, match="usage: 3 entries for 12 associations"):
        factors(tree, usage[:3], args)
    with pytest.raises(ValueError, match="usage: must be finite"):
        factors(tree, -usage, args)


# -- convergence --------------------------------------------------------------


@st.composite
def trees(draw: st.DrawFn, *, nested: bool) -> AccountTree:
    """Two to four organisations with 1-100 shares; each holds users directly
    (``nested=False``: one user each) or one to three teams of one to three users.
    """
    orgs = [
        Account(f"o{i}", shares=draw(st.integers(1, 100))) for i in range(draw(st.integers(2, 4)))
    ]
    if not nested:
        return AccountTree(orgs, [User("u", o.name) for o in orgs])
    teams = [
        Account(f"{o.name}t{j}", o.name, shares=draw(st.integers(1, 10)))
        for o in orgs
        for j in range(draw(st.integers(1, 3)))
    ]
    users = [
        User(f"u{k}", t.name, shares=draw(st.integers(1, 10)))
        for t in teams
        for k in range(draw(st.integers(1, 3)))
    ]
    return AccountTree(orgs + teams, users)


def grant_to_the_highest_factor(tree: AccountTree, args: FairshareArgs, rounds: int) -> FloatArray:
    """Each round, one unit of GPU time goes to the user with the highest factor.

    Usage decays with a half-life of 200 rounds; returns each association's
    share of the rolled-up usage.
    """
    usage = np.zeros(len(tree))
    users = np.flatnonzero(tree.is_user)
    for _ in range(rounds):
        winner = users[np.argmax(factors(tree, usage, args)[users])]
        usage = accrue(usage, 1, 200, np.array([winner]), np.array([1.0]))
    rolled = tree.rollup(usage)
    return rolled / float(rolled[0])


@settings(max_examples=15)
@given(tree=trees(nested=True))
def test_fair_tree_converges_to_the_shares_at_every_level(tree: AccountTree) -> None:
    got = grant_to_the_highest_factor(tree, FairshareArgs(algorithm="fair_tree"), 400)
    assert got == pytest.approx(tree.normalized_shares(), abs=0.03)


@settings(max_examples=15)
@given(tree=trees(nested=False))
def test_classic_converges_to_the_shares_with_one_user_per_account(tree: AccountTree) -> None:
    got = grant_to_the_highest_factor(tree, FairshareArgs(algorithm="classic"), 400)
    assert got == pytest.approx(tree.normalized_shares(), abs=0.03)


def test_classic_misses_the_account_shares_when_users_split_an_account() -> None:
    """Why Fair Tree replaced classic: two accounts of equal shares, one with two users.

    At balance a user of ``pair`` has U_E = U/2 + (U - U/2) x 1/2 = 0.75 U over
    S = 0.25, so F = 2^(-3 U); ``solo``'s user has F = 2^(-2 U'). The factors
    meet at 3 U = 2 U', i.e. solo 0.6 and pair 0.4, not 0.5 each.
    """
    tree = AccountTree(
        [Account("solo"), Account("pair")],
        [User("s", "solo"), User("p1", "pair"), User("p2", "pair")],
    )
    shares = {
        a: grant_to_the_highest_factor(tree, FairshareArgs(algorithm=a), 400)[1]
        for a in ("classic", "fair_tree")
    }
    assert shares["classic"] == pytest.approx(0.6, abs=0.02)
    assert shares["fair_tree"] == pytest.approx(0.5, abs=0.02)


def users_under(tree: AccountTree, account: int) -> list[int]:
    below = [account]
    for i in below:
        below.extend(tree.children[i])
    return [i for i in below if tree.is_user[i]]


@given(tree=trees(nested=True), data=st.data())
def test_fair_tree_ranks_every_user_of_a_better_sibling_account_higher(
    tree: AccountTree, data: st.DataObject
) -> None:
    """Fair Tree's promise, for any usage: if account A has a higher Level Fairshare
    than its sibling B, every user under A has a higher factor than every user under B;
    and the factors are ranks, from 1 down to no less than 1/N.
    """
    usage = np.array(
        [data.draw(st.sampled_from([0.0, 1.0, 2.5, 40.0])) if u else 0.0 for u in tree.is_user]
    )
    table = fair_tree(tree, usage)
    users = np.flatnonzero(tree.is_user)
    assert table.factor[users].max() == 1.0
    assert table.factor[users].min() >= 1 / len(users)
    accounts = [i for i in range(1, len(tree)) if not tree.is_user[i]]
    for a in accounts:
        for b in accounts:
            same_parent = tree.parent[a] == tree.parent[b]
            if same_parent and table.level_fs[a] > table.level_fs[b] * (1 + 1e-6):
                worst_a = table.factor[users_under(tree, a)].min()
                assert worst_a > table.factor[users_under(tree, b)].max()


@given(tree=trees(nested=True), data=st.data())
def test_factors_lie_in_zero_one_for_any_usage(tree: AccountTree, data: st.DataObject) -> None:
    usage = np.array([data.draw(st.floats(0, 1e6)) if u else 0.0 for u in tree.is_user])
    for algorithm in (classic, fair_tree):
        factor = algorithm(tree, usage).factor
        assert np.all((factor >= 0) & (factor <= 1))


def test_a_policy_file_may_give_a_user_its_accounts_fairshare() -> None:
    config = PolicyConfig.model_validate(
        {"accounts": [{"name": "a"}], "users": [{"name": "u", "account": "a", "shares": "parent"}]}
    )
    tree = Policy(config).accounts
    assert tree.use_parent[tree.user("a", "u")]
    with pytest.raises(ValidationError, match="shares"):
        PolicyConfig.model_validate({"users": [{"name": "u", "account": "a", "shares": "mine"}]})
