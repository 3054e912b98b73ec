"""Bad keys in policy files, simulator profiles and sweep specs read in the files' own
words: ``key.path: what is wrong``, never pydantic's ("Extra inputs are not permitted")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.policies.config import PolicyError, parse_policy
from gpufleet.sim.grid import GridError, load_spec
from gpufleet.sim.profile import ProfileError, profile_from_dict

QOS_KEYS = (
    "name, priority, preempt, preempt_mode, grace_s, usage_factor, preempt_exempt_s, "
    "max_jobs_per_user, max_gpus_per_user, max_gpus_per_account, group_gpus, max_wall_s"
)

POLICY_CASES = [
    (
        "nvme = 1",
        "policy: nvme: unknown key (known: ordering, placement, backfill, preemption, "
        "qos, partitions, accounts, users, reservations, predict, mig, windows, autoscale)",
    ),
    ("[[qos]]\nname = 'fast'\nnvme = 1", f"policy: qos.fast.nvme: unknown key (known: {QOS_KEYS})"),
    ("[[partitions]]\nname = 'gpu'\nnodes = 'a'", "policy: partitions.gpu.nodes: must be a list"),
    ("[[qos]]\npriority = 1", "policy: qos.1.name: required"),
    ("[[qos]]\nname = 'x'\npriority = 'high'", "policy: qos.x.priority: must be a whole number"),
    (
        "[[qos]]\nname = 'x'\npriority = -1",
        "policy: qos.x.priority: must be greater than or equal to 0",
    ),
    ("[[accounts]]\nname = 'a'\nshares = 'lots'", "policy: accounts.a.shares: must be a number"),
    ("[preemption]\nenabled = 'maybe'", "policy: preemption.enabled: must be true or false"),
    (
        "[ordering]\nplugin = 'lifo'",
        "policy: ordering.plugin: must be 'fifo', 'multifactor', 'sjf' or 'las'",
    ),
    ("ordering = 3", "policy: ordering: must be a table"),
    ("[placement]\nplugin = 3", "policy: placement.plugin: must be a string"),
]


@pytest.mark.parametrize(("text", "message"), POLICY_CASES)
def test_policy_file_messages(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as e:
        parse_policy(text)
    assert str(e.value) == message


PROFILE_CASES = [
    ({"sim": {"interval": 1}}, "sim.interval: unknown key (known: interval_s, "),
    ({"sim": {"mtbf_s": "often"}}, "sim.mtbf_s: must be a number"),
    ({"sim": {"seed": -1}}, "sim.seed: must be greater than or equal to 0"),
    ({"sim": 5}, "sim: must be a table"),
    ({"qos": {"name": "x"}}, "qos: must be a list"),
    ({"backfill": {"mode": "easy", "bogus": 2}}, "backfill.bogus: unknown key (known: "),
    ({"mig": {"repartition": "yes"}}, "mig.repartition: must be true or false"),
    ({"predict": {"quantile": "0.9"}}, "predict.quantile: must be a number"),
    ({"predict": {"history": 2, "min_history": 3}}, "predict.min_history: 3 is more than"),
    ({"sim": {"interval_s": "60"}}, "sim.interval_s: must be a whole number"),
    ({"sim": {"oracle_limits": "yes"}}, "sim.oracle_limits: must be true or false"),
    ({"backfill": {"max_job_test": "500"}}, "backfill.max_job_test: must be a whole number"),
    (
        {
            "sim": {"time_origin": "epoch"},
            "windows": [{"name": "night", "policy": {"backfill": {"max_job_test": "5"}}}],
        },
        "windows.night.policy.backfill.max_job_test: must be a whole number",
    ),
]


@pytest.mark.parametrize(("data", "start"), PROFILE_CASES)
def test_profile_messages(data: dict[str, object], start: str) -> None:
    with pytest.raises(ProfileError) as e:
        profile_from_dict(data, "p")
    assert str(e.value).startswith(start)
    assert "Input should" not in str(e.value)
    assert "Extra inputs" not in str(e.value)


def test_sweep_spec_names_the_point_and_key(tmp_path: Path) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text('[grid]\n"sim.interval_s" = [60, "soon"]\n')
    with pytest.raises(GridError) as e:
        load_spec(spec)
    assert str(e.value).endswith("sim.interval_s: must be a whole number")
    assert "Input should" not in str(e.value)


def test_sweep_spec_unknown_table_lists_the_known(tmp_path: Path) -> None:
    spec = tmp_path / "sweep.toml"
    spec.write_text('[grids]\n"sim.interval_s" = [60]\n')
    with pytest.raises(GridError) as e:
        load_spec(spec)
    assert str(e.value) == f"{spec}: grids: unknown key (known: profile, grid)"
