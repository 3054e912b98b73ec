"""sbatch's node options in the controller: nodelist, exclude, constraint, exclusive, begin.

On a manual clock, against SQLite and PostgreSQL: the cycle honours what
the job was submitted with, also after a restart, and submission refuses
what could never run, naming the field. Last, the options once through
``gpufleet submit`` against ``gpufleet up``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli.live import SITE, running_up
from controller.harness import ADMIN, ANA, Cluster, inventory, spec
from gpufleet.adapters.inventory import nodes_from_groups
from gpufleet.api.agent_schemas import AgentRegister
from gpufleet.cli.main import main
from gpufleet.controller.errors import Invalid
from gpufleet.core.job import Partition
from store.databases import Database

LABELS = {"n1": {"zone": "eu", "ib": "yes"}, "n2": {"zone": "us"}}


def register(cluster: Cluster, name: str) -> None:
    body = AgentRegister(inventory={**inventory(name), "labels": LABELS.get(name, {})})
    cluster.ctl.register_agent(principal=ADMIN, node=name, body=body)


@pytest.fixture
def cluster(db: Database) -> Iterator[Cluster]:
    # Agents that stay quiet through the clock's jumps keep their nodes up.
    c = Cluster(db, heartbeat_timeout_s=7200.0)
    for name in ("n1", "n2"):
        register(c, name)
    yield c
    c.ctl.stop()


def submit(cluster: Cluster, **fields: Any) -> str:
    return cluster.ctl.submit(principal=ANA, spec=spec(**fields)).job_id


def reason(cluster: Cluster, job_id: str) -> str:
    return cluster.ctl.get_job(principal=ANA, job_id=job_id).reason


@pytest.mark.parametrize("node", ["n1", "n2"])
def test_a_nodelist_job_runs_only_there(cluster: Cluster, node: str) -> None:
    jobs = [submit(cluster, nodelist=[node]) for _ in range(5)]
    cluster.ctl.run_cycle_now()
    # Four fit on the node's 4 GPUs; the fifth waits though the other node is empty.
    assert [cluster.state(j) for j in jobs] == ["RUNNING"] * 4 + ["PENDING"]
    assert {cluster.where(j) for j in jobs[:4]} == {node}
    assert reason(cluster, jobs[4]) == "Resources"


def test_a_gang_runs_on_the_nodes_of_its_list(cluster: Cluster) -> None:
    job = submit(cluster, nodes=2, nodelist=["n2", "n1"])
    cluster.ctl.run_cycle_now()
    assert sorted(cluster.ctl.get_job(principal=ANA, job_id=job).node_list) == ["n1", "n2"]


@pytest.mark.parametrize("node", ["n1", "n2"])
def test_exclude_keeps_a_job_off_the_node(cluster: Cluster, node: str) -> None:
    jobs = [submit(cluster, exclude=[node]) for _ in range(5)]
    cluster.ctl.run_cycle_now()
    assert [cluster.state(j) for j in jobs] == ["RUNNING"] * 4 + ["PENDING"]
    assert {cluster.where(j) for j in jobs[:4]} == {"n1", "n2"} - {node}


@pytest.mark.parametrize(
    ("constraint", "where"),
    [("ib", "n1"), ("zone=us", "n2"), ("zone=us|ib&zone=eu", None), ("ib&zone=us", "")],
)
def test_a_constraint_selects_nodes_by_label(
    cluster: Cluster, constraint: str, where: str | None
) -> None:
    jobs = [submit(cluster, constraint=constraint, gpus_per_node=4) for _ in range(2)]
    cluster.ctl.run_cycle_now()
    running = [cluster.where(j) for j in jobs if cluster.state(j) == "RUNNING"]
    if where is None:  # either node
        assert sorted(running) == ["n1", "n2"]
    elif where:
        assert running == [where]
        assert reason(cluster, jobs[1]) == "Resources"
    else:  # no node has both
        assert running == []
        assert {reason(cluster, j) for j in jobs} == {"ReqNodeNotAvail"}


def test_an_exclusive_job_takes_an_idle_node_and_shares_it_with_nobody(
    cluster: Cluster,
) -> None:
    first = submit(cluster)
    cluster.ctl.run_cycle_now()
    busy = cluster.where(first)
    whole = submit(cluster, exclusive=True)
    cluster.ctl.run_cycle_now()
    assert cluster.state(whole) == "RUNNING"
    idle = cluster.where(whole)
    assert idle != busy
    fill = submit(cluster, gpus_per_node=3)  # the busy node's other GPUs
    late = submit(cluster)  # 3 GPUs are free on the exclusive job's node
    cluster.ctl.run_cycle_now()
    assert cluster.where(fill) == busy
    assert cluster.state(late) == "PENDING"
    # Nothing is free for it either: the busy node is full.
    assert reason(cluster, late) == "Resources"


def test_an_exclusive_job_waits_while_anything_runs_on_its_nodes(cluster: Cluster) -> None:
    small = [submit(cluster, nodelist=[n]) for n in ("n1", "n2")]
    whole = submit(cluster, exclusive=True)
    cluster.ctl.run_cycle_now()
    assert [cluster.state(j) for j in small] == ["RUNNING", "RUNNING"]
    assert cluster.state(whole) == "PENDING"
    cluster.sync("n2")
    cluster.exit("n2", small[1], 1)
    cluster.ctl.run_cycle_now()
    assert (cluster.state(whole), cluster.where(whole)) == ("RUNNING", "n2")


def test_begin_waits_with_begin_time_until_the_clock_passes_it(cluster: Cluster) -> None:
    clock = cluster.clock
    job = submit(cluster, begin=int(clock.now()) + 600)
    assert reason(cluster, job) == "BeginTime"  # at once, before any cycle
    cluster.ctl.run_cycle_now()
    assert (cluster.state(job), reason(cluster, job)) == ("PENDING", "BeginTime")
    clock.advance(599)
    cluster.ctl.run_cycle_now()
    assert (cluster.state(job), reason(cluster, job)) == ("PENDING", "BeginTime")
    clock.advance(1)
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"


def test_begin_time_shows_before_an_unmet_dependency(cluster: Cluster) -> None:
    clock = cluster.clock
    first = submit(cluster, hold=True)
    job = submit(cluster, begin=int(clock.now()) + 600, dependency=f"afterok:{first}")
    cluster.ctl.run_cycle_now()
    assert (cluster.state(job), reason(cluster, job)) == ("PENDING", "BeginTime")
    clock.advance(600)
    cluster.ctl.run_cycle_now()
    assert (cluster.state(job), reason(cluster, job)) == ("PENDING", "Dependency")

def test_a_begin_in_the_past_starts_at_once(cluster: Cluster) -> None:
    job = submit(cluster, begin=int(cluster.clock.now()) - 60)
    cluster.ctl.run_cycle_now()
    assert cluster.state(job) == "RUNNING"


def test_constraints_survive_a_restart(cluster: Cluster) -> None:
    clock = cluster.clock
    whole = submit(cluster, nodelist=["n2"], exclusive=True)
    later = submit(cluster, begin=int(clock.now()) + 600)
    held = submit(cluster, constraint="zone=us", hold=True)  # n2 only
    cluster.ctl.run_cycle_now()
    cluster.sync("n2")
    cluster.restart()
    for name in ("n1", "n2"):
        register(cluster, name)
    cluster.ctl.release_job(principal=ANA, job_id=held)
    cluster.ctl.run_cycle_now()
    assert (cluster.state(whole), cluster.where(whole)) == ("RUNNING", "n2")
    assert (cluster.state(held), reason(cluster, held)) == ("PENDING", "Resources")
    assert (cluster.state(later), reason(cluster, later)) == ("PENDING", "BeginTime")
    cluster.exit("n2", whole, 1)
    clock.advance(600)
    cluster.ctl.run_cycle_now()
    assert (cluster.state(held), cluster.where(held)) == ("RUNNING", "n2")
    assert cluster.state(later) == "RUNNING"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"constraint": "ib&"}, "body.constraint", "a feature is missing"),
        ({"constraint": "(ib|zone=eu"}, "body.constraint", "missing ')'"),
        ({"constraint": "ib;zone"}, "body.constraint", "unexpected"),
        ({"nodelist": ["n1", "n9"]}, "body.nodelist", "no node 'n9'"),
        ({"nodelist": ["n7", "n9"]}, "body.nodelist", "no node 'n7' (and 1 more)"),
        ({"exclude": ["n9"]}, "body.exclude", "no node 'n9'"),
        ({"nodelist": ["n1", "n2"], "exclude": ["n2"]}, "body.exclude", "'n2' is also in"),
        ({"nodelist": ["n1", "n1"], "nodes": 2}, "body.nodelist", "names 1 node(s) but"),
    ],
)
def test_submission_refuses_what_could_never_run(
    cluster: Cluster, fields: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(Invalid) as e:
        submit(cluster, **fields)
    assert e.value.field == field
    assert message in e.value.reason
    assert cluster.ctl.list_jobs(principal=ANA).jobs == []


def test_a_node_is_known_once_its_agent_registers(cluster: Cluster) -> None:
    with pytest.raises(Invalid) as e:
        submit(cluster, nodelist=["n3"])
    assert e.value.field == "body.nodelist"
    register(cluster, "n3")
    job = submit(cluster, nodelist=["n3"])
    cluster.ctl.run_cycle_now()
    assert cluster.where(job) == "n3"


def test_a_declared_node_is_known_before_its_agent_registers(db: Database) -> None:
    declared = Cluster(db, nodes=nodes_from_groups([inventory("n5")], source="test"))
    try:
        job = declared.ctl.submit(principal=ANA, spec=spec(nodelist=["n5"])).job_id
        declared.ctl.run_cycle_now()
        assert declared.state(job) == "PENDING"
    finally:
        declared.ctl.stop()


def test_a_nodelist_must_lie_in_the_partition(db: Database) -> None:
    parted = Cluster(db, partitions={"gpu": Partition("gpu", nodes=("n1",))})
    try:
        for name in ("n1", "n2"):
            register(parted, name)
        with pytest.raises(Invalid) as e:
            parted.ctl.submit(principal=ANA, spec=spec(nodelist=["n1", "n2"]))
        assert (e.value.field, e.value.reason) == ("body.nodelist", "'n2' is not in partition gpu")
        assert parted.ctl.submit(principal=ANA, spec=spec(nodelist=["n1"])).job_id
    finally:
        parted.ctl.stop()


def test_the_options_through_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def submit(*options: str) -> tuple[int, str, str]:
        status = main(["submit", "--parsable", "--wrap", "true", "-p", "debug", *options])
        out, err = capsys.readouterr()
        return status, out.strip(), err

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with running_up(tmp_path / "data", SITE) as up:
        monkeypatch.setenv("GPUFLEET_URL", up.url)
        monkeypatch.setenv("GPUFLEET_TOKEN", up.tokens["ada"])
        status, ran, err = submit("-w", "local", "--exclusive", "-b", "now-1minute")
        assert (status, err) == (0, "")
        status, never, err = submit("-C", "no-such-label")
        assert (status, err) == (0, "")
        assert up.wait_final(ran, "ada") == "COMPLETED"
        with up.api("ada") as api:
            deadline = time.monotonic() + 30
            while (job := api.get(f"/v1/jobs/{never}").json())["reason"] != "ReqNodeNotAvail":
                assert time.monotonic() < deadline, job
                time.sleep(0.1)
        status, out, err = submit("-w", "local", "-x", "local,elsewhere")
        assert (status, out) == (2, "")
        assert err == "error: submit: body.exclude: no node 'elsewhere'\n"
