"""The policy file: a valid one builds a profile; every mistake names its key."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from pydantic import BaseModel

from gpufleet import policies
from gpufleet.policies.backfill import Backfill
from gpufleet.policies.config import PolicyError, parse_policy
from gpufleet.policies.preemption import CheapestVictims
from gpufleet.policies.priority import Multifactor
from gpufleet.policies.queue import Fifo
from gpufleet.policies.tables import StrictTable

GOOD = """
[ordering]
plugin = "multifactor"
[ordering.multifactor]
weight_qos = 5000
weight_age = 10

[placement]
plugin = "best-fit"

[backfill]
mode = "conservative"
window_s = 3600

[preemption]
enabled = true

[[qos]]
name = "normal"
max_gpus_per_user = 16

[[qos]]
name = "high"
priority = 100
preempt = ["normal"]

[[partitions]]
name = "gpu"
max_time_s = 86400
allowed_qos = ["normal", "high"]

[[accounts]]
name = "vision"

[[users]]
name = "alice"
account = "vision"
"""


def test_a_valid_policy_builds_its_profile() -> None:
    policy = parse_policy(GOOD, "policy.toml")
    profile = policy.profile()
    assert isinstance(profile.ordering, Multifactor)
    assert profile.ordering.args.weight_qos == 5000
    assert isinstance(profile.backfill, Backfill)
    assert profile.backfill.args.mode == "conservative"
    assert isinstance(profile.preemption, CheapestVictims)
    assert policy.qos["high"].preempt == ("normal",)
    assert policy.qos["normal"].max_gpus_per_user == 16
    assert policy.partitions["gpu"].max_time_s == 86400
    assert policy.accounts.names == ("root", "vision", "alice")


def test_without_accounts_a_partition_may_allow_any_account() -> None:
    # Jobs then charge the accounts they name (a replayed trace's), so none is unknown.
    policy = parse_policy('[[partitions]]\nname = "p"\nallowed_accounts = ["lab"]\n')
    assert policy.partitions["p"].allowed_accounts == ("lab",)


def test_defaults_are_a_strict_fifo_free_of_preemption() -> None:
    profile = parse_policy('[ordering]\nplugin = "fifo"\n').profile()
    assert isinstance(profile.ordering, Fifo)
    assert profile.backfill is None
    assert profile.preemption is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[ordering.multifactor]\nweight_age = -1\n",
            "policy.toml: ordering.multifactor.weight_age: must be greater than or equal",
        ),
        (
            '[ordering]\nplugin = "lottery"\n',
            "policy.toml: ordering.plugin: must be 'fifo', 'multifactor', 'sjf' or 'las'",
        ),
        ('[placement]\nplugin = "tetris"\n', "policy.toml: placement.plugin: unknown"),
        (
            '[[qos]]\nname = "high"\npreempt = ["high"]\n',
            "policy.toml: qos.high.preempt: a QoS cannot preempt itself",
        ),
        (
            '[[qos]]\nname = "high"\npreempt = ["gold"]\n',
            "policy.toml: qos.high.preempt: unknown QoS 'gold'",
        ),
        (
            '[[qos]]\nname = "a"\n[[qos]]\nname = "b"\nmax_gpus_per_user = -2\n',
            "policy.toml: qos.b.max_gpus_per_user: must be greater than or equal to 0",
        ),
        (
            '[[accounts]]\nname = "x"\nparent = "y"\n[[accounts]]\nname = "y"\nparent = "x"\n',
            "policy.toml: accounts.x.parent: cycle x -> y -> x",
        ),
        ('[backfill]\nmode = "greedy"\n', "policy.toml: backfill.mode: must be"),
        ("[backfill]\nwindow_s = 0\n", "policy.toml: backfill.window_s: must be greater"),
        ("[surprise]\n", "policy.toml: surprise: unknown key (known: ordering, placement, "),
        ("[ordering\n", "policy.toml: not valid TOML"),
        (
            '[[partitions]]\nname = "p"\n[[partitions]]\nname = "p"\n',
            "policy.toml: partitions.p: defined twice",
        ),
        (
            '[[accounts]]\nname = "a"\n[[partitions]]\nname = "p"\nallowed_accounts = ["zzz"]\n',
            "policy.toml: partitions.p.allowed_accounts: unknown account 'zzz'",
        ),
        (
            '[[accounts]]\nname = "a"\n[[reservations]]\nname = "r"\nstart = 0\nend = 1\ngpus = 1\n'
            'accounts = ["zzz"]\n',
            "policy.toml: reservations.r.accounts: unknown account 'zzz'",
        ),
    ],
)
def test_a_mistake_names_its_key(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.toml")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[backfill]\nmax_job_test = "500"\n', "backfill.max_job_test: must be a whole number"),
        ("[backfill]\nwindow_s = 3600.0\n", "backfill.window_s: must be a whole number"),
        (
            '[ordering.multifactor]\nweight_age = "1000"\n',
            "ordering.multifactor.weight_age: must be a whole number",
        ),
        (
            '[ordering.multifactor]\nfavor_small = "yes"\n',
            "ordering.multifactor.favor_small: must be true or false",
        ),
        (
            '[ordering.multifactor.fairshare]\ndampening_factor = "2"\n',
            "ordering.multifactor.fairshare.dampening_factor: must be a number",
        ),
        ('[ordering]\nqueue_depth = "100"\n', "ordering.queue_depth: must be a whole number"),
        ('[ordering.sjf]\naging = "0.5"\n', "ordering.sjf.aging: must be a number"),
        ('[ordering.las]\nthresholds_gpu_s = ["3600"]\n', "ordering.las.thresholds_gpu_s.1: must"),
        ('[preemption]\nenabled = "true"\n', "preemption.enabled: must be true or false"),
        ('[[qos]]\nname = "q"\npriority = "5"\n', "qos.q.priority: must be a whole number"),
        ('[[partitions]]\nname = "p"\npreemptible = 1\n', "partitions.p.preemptible: must be"),
        ('[[accounts]]\nname = "a"\nshares = "2"\n', "accounts.a.shares: must be a number"),
    ],
)
def test_a_string_for_a_number_or_a_bool_is_refused(text: str, message: str) -> None:
    # Lax pydantic would read "500" as 500 and "yes" as true: a quoting slip passes unseen.
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.toml")
    assert str(err.value).startswith(f"policy.toml: {message}")
    assert "\n" not in str(err.value)


def test_whole_numbers_for_floats_and_arrays_for_lists_are_taken() -> None:
    text = (
        "[ordering]\nplugin = 'las'\n[ordering.las]\nthresholds_gpu_s = [3600, 36000.5]\n"
        "[ordering.sjf]\naging = 1\n[ordering.multifactor.fairshare]\ndampening_factor = 2\n"
        "[preemption]\nenabled = true\nby = ['qos']\n"
        "[[accounts]]\nname = 'a'\nshares = 2\n"
        "[[windows]]\nname = 'night'\ndays = ['weekdays']\n"
        "[windows.policy.preemption]\nby = ['qos']\n"
    )
    policy = parse_policy(text).windowed(("night",))
    c = policy.config
    assert c.ordering.las.thresholds_gpu_s == (3600.0, 36000.5)
    assert c.ordering.sjf.aging == 1.0
    assert c.preemption.by == ("qos",)
    assert c.accounts[0].shares == 2.0


def test_every_policy_table_model_is_strict() -> None:
    """Every pydantic model of ``policies`` derives from the one strict base."""
    package = Path(policies.__file__).parent
    for path in sorted(package.rglob("*.py")):
        name = ".".join(("gpufleet", *path.relative_to(package.parent).with_suffix("").parts))
        module = importlib.import_module(name.removesuffix(".__init__"))
        for value in vars(module).values():
            ours = isinstance(value, type) and value.__module__ == module.__name__
            if ours and issubclass(value, BaseModel):
                assert issubclass(value, StrictTable), value
