"""A controller built from one configuration file: principals, their accounts, config patches."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.harness import ADMIN, inventory, spec
from gpufleet.api.agent_schemas import AgentRegister
from gpufleet.controller.clock import ManualClock
from gpufleet.controller.config import load_config
from gpufleet.controller.errors import Conflict, Forbidden, Invalid
from gpufleet.controller.service import Controller, Principal
from gpufleet.controller.setup import setup_from_config
from store.databases import Database

CONFIG = """
[server]
interval_s = 60
heartbeat_interval_s = 10
missed_heartbeats = 3
kill_grace_s = 5

[policy.ordering]
plugin = "multifactor"

[[policy.qos]]
name = "normal"

[[policy.partitions]]
name = "gpu"

[[policy.accounts]]
name = "vision"

[[policy.accounts]]
name = "nlp"

[[policy.accounts]]
name = "ops"

[[nodes]]
names = "n1"
cpu_milli = 32000
memory_mib = 262144
gpus = { model = "A100-80GB", count = 4 }

[[principals]]
name = "ana"
accounts = ["vision", "nlp"]

[[principals]]
name = "bob"
accounts = ["nlp"]

[[principals]]
name = "root"
role = "admin"
"""


def configured(db: Database, tmp_path: Path, clock: ManualClock) -> Controller:
    path = tmp_path / "controller.toml"
    path.write_text(CONFIG)
    config = load_config(path)
    setup = setup_from_config(config.build(str(path)), config.to_dict())
    ctl = Controller(setup=setup, db_url=db.url, clock=clock, schema=db.schema)
    ctl.start(loop=False)
    return ctl


@pytest.fixture
def ctl(db: Database, tmp_path: Path) -> Iterator[Controller]:
    c = configured(db, tmp_path, ManualClock())
    yield c
    c.stop()


def login(ctl: Controller, user: str) -> Principal:
    made = ctl.create_token(principal=ADMIN, name=user, user=user, role="user")
    who = ctl.authenticate(token=made.token)
    assert who is not None
    return who


def test_the_file_sets_the_server_timings_and_the_declared_nodes(ctl: Controller) -> None:
    assert ctl.setup.heartbeat_timeout_s == 30  # 3 missed x 10 s
    assert ctl.setup.kill_grace_s == 5
    assert [n.name for n in ctl.list_nodes(principal=ADMIN)] == ["n1"]


def test_the_first_account_is_the_default_and_the_others_may_be_named(ctl: Controller) -> None:
    ana = login(ctl, "ana")
    assert ana.allowed_accounts == ("vision", "nlp")
    default = ctl.submit(principal=ana, spec=spec()).job_id
    other = ctl.submit(principal=ana, spec=spec(account="nlp")).job_id
    assert ctl.get_job(principal=ana, job_id=default).account == "vision"
    assert ctl.get_job(principal=ana, job_id=other).account == "nlp"


def test_an_account_not_the_users_is_refused_naming_the_field(ctl: Controller) -> None:
    bob = login(ctl, "bob")
    with pytest.raises(Forbidden) as e:
        ctl.submit(principal=bob, spec=spec(account="vision"))
    assert e.value.message.startswith("body.account: ")
    assert ctl.list_jobs(principal=bob).jobs == []


def test_a_missing_account_is_invalid_for_a_user_too_not_forbidden(ctl: Controller) -> None:
    # 403 says the account exists but is not the user's; one that does not exist is a typo.
    bob = login(ctl, "bob")
    with pytest.raises(Invalid) as e:
        ctl.submit(principal=bob, spec=spec(account="nope"))
    assert (e.value.field, e.value.reason) == ("body.account", "no account 'nope'")


def test_an_admin_with_no_account_must_name_one(ctl: Controller) -> None:
    # As Slurm: the default account comes from an association, and the admin has none.
    made = ctl.create_token(principal=ADMIN, name="root", user="root", role="admin")
    root = ctl.authenticate(token=made.token)
    assert root is not None
    with pytest.raises(Invalid) as e:
        ctl.submit(principal=root, spec=spec())
    assert (e.value.field, e.value.reason) == (
        "body.account",
        "root has no default account; name one with --account (accounts: vision, nlp, ops)",
    )
    job = ctl.submit(principal=root, spec=spec(account="ops")).job_id
    assert ctl.get_job(principal=root, job_id=job).account == "ops"
    assert ctl.setup.max_array_size == 1001  # the file names none: Slurm's default


def test_only_an_operator_or_admin_may_set_a_negative_nice(ctl: Controller) -> None:
    # As Slurm: a negative nice raises a job over its peers, a privilege.
    ana = login(ctl, "ana")
    with pytest.raises(Forbidden) as e:
        ctl.submit(principal=ana, spec=spec(nice=-1))
    assert e.value.message.startswith("body.nice: ")
    assert ctl.list_jobs(principal=ana).jobs == []
    assert ctl.submit(principal=ana, spec=spec(nice=100)).job_id  # lowering its own is fine
    operator = Principal(user="op", role="operator")
    assert ctl.submit(principal=operator, spec=spec(nice=-10_000, account="ops")).job_id


def test_a_pending_jobs_priority_is_the_one_the_last_cycle_ranked_it_by(ctl: Controller) -> None:
    ana = login(ctl, "ana")
    ctl.register_agent(principal=ADMIN, node="n1", body=AgentRegister(inventory=inventory("n1")))
    whole = spec(gpus_per_node=4)
    running = ctl.submit(principal=ana, spec=whole).job_id
    plain = ctl.submit(principal=ana, spec=whole).job_id
    nice = ctl.submit(principal=ana, spec=spec(gpus_per_node=4, nice=100)).job_id
    held = ctl.submit(principal=ana, spec=spec(hold=True)).job_id

    def priority(job: str) -> float | None:
        return ctl.get_job(principal=ana, job_id=job).priority

    assert priority(plain) is None  # no cycle has ranked it yet
    ctl.run_cycle_now()
    assert ctl.get_job(principal=ana, job_id=running).state == "RUNNING"
    assert priority(running) is None and priority(held) is None
    plain_priority = priority(plain)
    assert plain_priority is not None and plain_priority > 0
    assert priority(nice) == pytest.approx(plain_priority - 100)  # multifactor subtracts nice
    listed = {j.job_id: j.priority for j in ctl.list_jobs(principal=ana).jobs}
    assert listed[plain] == plain_priority


def test_a_user_with_no_principal_entry_has_no_account_to_charge(ctl: Controller) -> None:
    # As Slurm with AccountingStorageEnforce=associations: no association, no job.
    carol = login(ctl, "carol")
    for account in (None, "nlp", "vision", "nope"):
        with pytest.raises(Forbidden) as e:
            ctl.submit(principal=carol, spec=spec(account=account))
        assert e.value.message.startswith("body.account: carol has no account to charge")
    with pytest.raises(Invalid) as bad:  # an operator may charge any account that exists
        ctl.submit(principal=ADMIN, spec=spec(account="nope"))
    assert bad.value.field == "body.account"
    assert ctl.submit(principal=ADMIN, spec=spec(account="nlp")).job_id


NO_ACCOUNTS = """
[[policy.qos]]
name = "normal"

[[policy.partitions]]
name = "gpu"

[[nodes]]
names = "n1"
cpu_milli = 32000
memory_mib = 262144
gpus = { model = "A100-80GB", count = 4 }
"""


def test_without_accounts_a_job_charges_the_default_and_none_other(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "controller.toml"
    path.write_text(NO_ACCOUNTS)
    config = load_config(path)
    setup = setup_from_config(config.build(str(path)), config.to_dict())
    ctl = Controller(setup=setup, db_url=db.url, clock=ManualClock(), schema=db.schema)
    ctl.start(loop=False)
    try:
        carol = login(ctl, "carol")
        with pytest.raises(Invalid) as e:
            ctl.submit(principal=carol, spec=spec(account="nope"))
        assert e.value.field == "body.account"
        job = ctl.submit(principal=carol, spec=spec()).job_id
        assert ctl.get_job(principal=carol, job_id=job).account == "default"
        assert ctl.submit(principal=carol, spec=spec(account="default")).job_id
    finally:
        ctl.stop()


def test_a_patch_is_validated_applied_at_the_next_cycle_and_audited(ctl: Controller) -> None:
    ana = login(ctl, "ana")
    body = AgentRegister(inventory=inventory("n1"))
    ctl.register_agent(principal=ADMIN, node="n1", body=body)
    with pytest.raises(Invalid) as e:
        ctl.patch_config(principal=ADMIN, patch={"policy": {"qos": [{"name": "x", "bad": 1}]}})
    assert e.value.field.startswith("body.patch.policy.qos")
    with pytest.raises(Invalid):
        ctl.submit(principal=ana, spec=spec(partition="big"))
    start = ctl.get_config(principal=ADMIN).version
    partitions = [{"name": "gpu"}, {"name": "big", "priority_tier": 1}]
    out = ctl.patch_config(
        principal=ADMIN, patch={"policy": {"partitions": partitions}}, version=start
    )
    assert out.version == start + 1
    with pytest.raises(Conflict):
        ctl.patch_config(principal=ADMIN, patch={}, version=start)
    job = ctl.submit(principal=ana, spec=spec(partition="big")).job_id
    ctl.run_cycle_now()
    assert ctl.get_job(principal=ana, job_id=job).state == "RUNNING"
    assert "big" in [p.name for p in ctl.list_partitions(principal=ADMIN)]
    assert ctl.list_audit(principal=ADMIN).entries[0].action == "config.patch"


def test_a_bad_patch_names_every_bad_key_where_it_is(ctl: Controller) -> None:
    patch = {
        "server": {"interval_s": -1, "kill_grace_s": "x"},
        "policy": {"bogus": 1},
        "principals": [{"name": "ana"}, {"name": "bob"}, {"name": "../x"}],
    }
    with pytest.raises(Invalid) as e:
        ctl.patch_config(principal=ADMIN, patch=patch)
    assert [field for field, _ in e.value.problems] == [
        "body.patch.server.interval_s",
        "body.patch.server.kill_grace_s",
        "body.patch.policy.bogus",
        "body.patch.principals[2].name",  # by position: a name may hold dots
    ]
    assert e.value.message.endswith("(and 3 more)")


def test_a_patch_survives_a_restart_and_a_changed_file_wins(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    ctl = configured(db, tmp_path, clock)
    patch = {"policy": {"partitions": [{"name": "gpu"}, {"name": "big"}]}}
    ctl.patch_config(principal=ADMIN, patch=patch)
    ctl.stop()
    ctl = configured(db, tmp_path, clock)
    assert "big" in [p.name for p in ctl.list_partitions(principal=ADMIN)]
    ctl.stop()
    global CONFIG
    saved = CONFIG
    CONFIG = CONFIG.replace('name = "gpu"', 'name = "gpu2"')
    try:
        with caplog.at_level(logging.WARNING, logger="gpufleet.controller.service"):
            ctl = configured(db, tmp_path, clock)
        # The patch is gone, and the log says which stored version the file replaced.
        assert "replaces stored v2 (root's patch)" in caplog.text
        assert [p.name for p in ctl.list_partitions(principal=ADMIN)] == ["gpu2"]
        assert ctl.get_config(principal=ADMIN).updated_by == "config-file"
        ctl.stop()
    finally:
        CONFIG = saved


def test_the_sites_default_output_pattern_is_fixed_at_submission(
    db: Database, tmp_path: Path
) -> None:
    path = tmp_path / "controller.toml"
    path.write_text(
        CONFIG.replace(
            "kill_grace_s = 5\n",
            "kill_grace_s = 5\ndefault_stdout = 'out-%x.%j.log'\n"
            "default_array_stdout = 'out-%A.%a.log'\n",
        )
    )
    config = load_config(path)
    setup = setup_from_config(config.build(str(path)), config.to_dict())
    ctl = Controller(setup=setup, db_url=db.url, clock=ManualClock(), schema=db.schema)
    ctl.start(loop=False)
    try:
        one = ctl.submit(principal=ADMIN, spec=spec(name="a", account="ops")).job_id
        many = ctl.submit(principal=ADMIN, spec=spec(array="0-1", account="ops")).job_id
        job = ctl.get_job(principal=ADMIN, job_id=one)
        assert job.stdout_path == job.stderr_path == f"/tmp/out-a.{one}.log"
        task = ctl.get_job(principal=ADMIN, job_id=f"{many}_1")
        assert task.stdout_path == f"/tmp/out-{many}.1.log"
    finally:
        ctl.stop()


def test_the_views_partition_states_are_the_cores() -> None:
    # Restated in the views so that token commands load no core; they must not drift.
    from typing import get_args

    from gpufleet.controller.views import PartitionStateName
    from gpufleet.core.job import PartitionState

    assert get_args(PartitionStateName) == get_args(PartitionState)
