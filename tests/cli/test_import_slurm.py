"""``gpufleet import slurm``: a Slurm site's files become a cluster file and a profile
that load, say what Slurm said, and name what they leave out."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpufleet.adapters.inventory import load_cluster
from gpufleet.cli.main import main
from gpufleet.sim.profile import load_profile

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "slurm"
FILES = [
    str(EXAMPLE / "slurm.conf"),
    "--gres",
    str(EXAMPLE / "gres.conf"),
    "--qos",
    str(EXAMPLE / "qos.txt"),
    "--assoc",
    str(EXAMPLE / "assoc.txt"),
]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["import", "slurm", *args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    status, _, err = run([*FILES, "--out", str(tmp_path)], capsys)
    assert status == 0, err
    return tmp_path, err


def dig(doc: dict[str, Any], dotted: str) -> object:
    value: Any = doc
    for key in dotted.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


# slurm.conf / sacctmgr setting -> where it lands in policy.toml
@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("ordering.plugin", "multifactor"),  # PriorityType=priority/multifactor
        ("ordering.multifactor.weight_age", 10000),  # PriorityWeightAge
        ("ordering.multifactor.weight_job_size", 2000),  # PriorityWeightTRES=GRES/gpu=2000
        ("ordering.multifactor.weight_assoc", 0),  # unset: Slurm's 0, not gpufleet's default
        ("ordering.multifactor.max_age_s", 86400),  # PriorityMaxAge=1-0
        ("ordering.multifactor.fairshare.half_life_s", 604800),  # PriorityDecayHalfLife=7-0
        ("ordering.multifactor.fairshare.tied_accounts", "in_turn"),  # Slurm's code
        # TRESBillingWeights GRES/gpu:h100=2.0, and GRES/gpu=1.0 for the rest
        ("ordering.multifactor.fairshare.gpu_billing_weights.H100-80GB", 2.0),
        ("ordering.multifactor.fairshare.gpu_billing_weights.A100-80GB", 1.0),
        ("backfill.mode", "conservative"),  # sched/backfill reserves every job it tests
        ("backfill.resolution_s", 60),  # bf_resolution=60
        ("backfill.window_s", 172800),  # bf_window=2880 minutes
        ("preemption.enabled", True),  # PreemptType=preempt/qos
        ("partitions.0.name", "batch"),  # Default=YES comes first
        ("partitions.0.max_time_s", 172800),  # MaxTime=2-00:00:00
        ("partitions.1.max_time_s", 3600),  # MaxTime=60 (minutes)
        ("partitions.1.priority_tier", 2),
        ("partitions.1.nodes", ["gpu13", "gpu14", "gpu15", "gpu16"]),
        ("qos.1.max_gpus_per_user", 32),  # MaxTRESPU=gres/gpu=32
        ("qos.1.max_wall_s", 86400),  # MaxWall=1-00:00:00
        ("qos.2.grace_s", 120),  # GraceTime=00:02:00
        ("qos.2.group_gpus", 64),  # GrpTRES=gres/gpu=64
        ("qos.2.usage_factor", 0.5),
        ("accounts.1.parent", "research"),  # Par Name
        ("users.2.shares", "parent"),  # FairShare=parent
        ("sim.priority_calc_s", 300),  # PriorityCalcPeriod=5
        ("ordering.multifactor.calc_period_s", 300),  # and age follows it
        ("sim.interval_s", 5),  # a cycle at least every bf_interval
        ("backfill.interval_s", 5),  # a backfill pass every bf_interval, main passes between
        ("backfill.will_run_window_s", 30),  # cons_tres's will-run test batches ends by 30 s
    ],
)
def test_the_policy_says_what_slurm_said(
    imported: tuple[Path, str], key: str, expected: object
) -> None:
    out, _ = imported
    policy = tomllib.loads((out / "policy.toml").read_text())
    assert dig(policy, key) == expected


def test_the_files_load_and_unmodelled_settings_are_named(imported: tuple[Path, str]) -> None:
    out, err = imported
    nodes = load_cluster(out / "cluster.toml")
    assert len(nodes) == 16
    # gpu01-12: Gres=gpu:h100:8; gpu13-16: untyped in slurm.conf, a100 in gres.conf
    assert {n.name: n.gpu_model for n in nodes if n.name in ("gpu01", "gpu16")} == {
        "gpu01": "H100-80GB",
        "gpu16": "A100-80GB",
    }
    assert (nodes[0].cpu_milli, nodes[0].memory_mib, len(nodes[0].gpus)) == (64000, 515000, 8)
    assert nodes[0].labels == {"h100": "", "ib": ""}  # Feature=h100,ib
    profile = load_profile(out / "policy.toml")
    assert profile.policy.accounts.use_parent[profile.policy.accounts.user("vision", "svc-vision")]
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1
    for name in ("AccountingStorageEnforce", "TRESBillingWeights=CPU"):
        assert name in warning[0]
    assert "SelectTypeParameters" not in warning[0]  # CR_Core_Memory: what gpufleet counts


# select settings -> the placement plugin and the will-run's node choice, and what is named
@pytest.mark.parametrize(
    ("conf", "placement", "will_run", "named"),
    [
        (
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory",
            "cons-tres",
            "consecutive",
            None,
        ),
        ("", "cons-tres", "consecutive", None),  # cons_tres is Slurm's default
        (
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core,CR_LLN",
            "best-fit",
            "best-fit",
            "SelectTypeParameters=CR_LLN",
        ),
        (
            "SelectType=select/cons_tres\nTopologyPlugin=topology/tree",
            "best-fit",
            "best-fit",
            "TopologyPlugin=topology/tree",
        ),
        ("SelectType=select/linear", "best-fit", "best-fit", "SelectType=select/linear"),
        (
            "SelectTypeParameters=CR_Core,CR_Pack_Nodes",
            "cons-tres",
            "consecutive",
            "SelectTypeParameters=CR_Pack_Nodes",
        ),
    ],
)
def test_slurms_node_choice_is_imported_where_modelled(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    conf: str,
    placement: str,
    will_run: str,
    named: str | None,
) -> None:
    path = tmp_path / "slurm.conf"
    nodes = "NodeName=n[1-2] CPUs=8 Gres=gpu:h100:8"
    path.write_text(f"{conf}\nSchedulerType=sched/backfill\n{nodes}\n")
    status, _, err = run([str(path), "--out", str(tmp_path / "out")], capsys)
    assert status == 0, err
    policy = tomllib.loads((tmp_path / "out" / "policy.toml").read_text())
    assert (policy["placement"]["plugin"], policy["backfill"]["will_run_nodes"]) == (
        placement,
        will_run,
    )
    if named is None:
        assert "Select" not in err and "Topology" not in err, err
    else:
        assert named in err


@pytest.mark.parametrize(
    ("conf", "fragment"),
    [
        (
            "NodeName=n1 CPUs=8 Gres=gpu:b300:8\n",
            "line 1: Gres: GPU type 'b300' names no known model",
        ),
        ("NodeName=n[1-2 CPUs=8\n", "line 1: NodeName:"),
        ("PartitionName=p Nodes=ALL MaxTime=soon\nNodeName=n1\n", "line 1: MaxTime: 'soon'"),
        ("NodeName=n1 CPUs=eight\n", "line 1: CPUs: 'eight' is not a whole number"),
        ("SchedulerType=sched/backfill\n", "NodeName: no node is defined"),
        ("NodeName n1\n", "line 1: NodeName: expected Key=Value"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], conf: str, fragment: str
) -> None:
    path = tmp_path / "slurm.conf"
    path.write_text(conf)
    status, out, err = run([str(path), "--out", str(tmp_path / "out")], capsys)
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert fragment in err
    assert not (tmp_path / "out").exists()


def test_a_gpu_type_can_be_mapped_and_a_missing_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "slurm.conf"
    path.write_text("NodeName=n1 CPUs=8 RealMemory=64000 Gres=gpu:b300:4\n")
    args = [str(path), "--gpu-model", "b300=H200-141GB", "--out", str(tmp_path / "out")]
    status, _, err = run(args, capsys)
    assert status == 0, err
    assert load_cluster(tmp_path / "out" / "cluster.toml")[0].gpu_model == "H200-141GB"
    status, _, err = run([*args, "--qos", str(tmp_path / "nope.txt")], capsys)
    assert status == 2 and "nope.txt" in err and len(err.splitlines()) == 1
