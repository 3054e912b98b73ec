"""The policy file: a valid one builds a profile; every mistake names its key."""

from __future__ import annotations

import pytest

from gpufleet.policies.backfill import Backfill
from gpufleet.policies.config import PolicyError, parse_policy
from gpufleet.policies.preemption import CheapestVictims
from gpufleet.policies.priority import Multifactor
from gpufleet.policies.queue import Fifo

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
    ],
)
def test_a_mistake_names_its_key(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.toml")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)
