"""``gpufleet import slurm``: a Slurm site's files become a cluster file and a profile
that load, say what Slurm said, and name what they leave out."""

from __future__ import annotations

import json
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


NODE = "NodeName=n1 CPUs=8 RealMemory=64000 Gres=gpu:h100:8\n"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def imported_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], conf: str, *args: str
) -> tuple[dict[str, Any], str]:
    out = tmp_path / "out"
    status, _, err = run([write(tmp_path, "slurm.conf", conf), *args, "--out", str(out)], capsys)
    assert status == 0, err
    return tomllib.loads((out / "policy.toml").read_text()), err


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], conf: str, *args: str) -> str:
    out = tmp_path / "out"
    status, stdout, err = run(
        [write(tmp_path, "slurm.conf", conf), *args, "--out", str(out)], capsys
    )
    assert (status, stdout) == (2, ""), err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert not out.exists()
    return err


def test_a_write_failure_is_one_line_and_leaves_no_half_written_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    (out / "policy.toml").mkdir(parents=True)
    status, _, err = run([write(tmp_path, "slurm.conf", NODE), "--out", str(out)], capsys)
    assert status == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert "policy.toml" in err
    assert sorted(p.name for p in out.iterdir()) == ["policy.toml"]  # no cluster.toml, no temp


# each error names the input file, its line (or row) and the Slurm key
@pytest.mark.parametrize(
    ("conf", "table", "fragment"),
    [
        (NODE + "PartitionName=p Nodes=n1\nPartitionName=p\n", None, "line 3: PartitionName: 'p'"),
        (NODE + "SchedulerParameters=bf_window=0\n", None, "line 2: bf_window: must be 1"),
        (NODE + 'PartitionName="" Nodes=n1\n', None, "line 2: PartitionName: needs a name"),
        (NODE + "PartitionName= Nodes=n1\n", None, "line 2: PartitionName: needs a name"),
        (NODE + "NodeName=n[1-2] CPUs=8\n", None, "line 2: NodeName: 'n1' is also defined"),
        (
            NODE,
            ("--assoc", "Cluster|Account|User|Par Name|Share\nc|a||x|1\nc|x||a|1\n"),
            "assoc.txt, line 3: Par Name: cycle a -> x -> a",
        ),
        (
            NODE,
            ("--assoc", "Cluster|Account|User|Par Name|Share\nc|a||ghost|1\n"),
            "assoc.txt, line 2: Par Name: unknown account 'ghost'",
        ),
        (
            NODE,
            ("--qos", "Name|Priority|Preempt\nnormal|1|ghost\n"),
            "qos.txt, line 2: Preempt: unknown QoS 'ghost'",
        ),
    ],
)
def test_errors_name_the_input_file_line_and_key(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    conf: str,
    table: tuple[str, str] | None,
    fragment: str,
) -> None:
    args = [table[0], write(tmp_path, table[0][2:] + ".txt", table[1])] if table else []
    err = refused(tmp_path, capsys, conf, *args)
    assert fragment in err
    assert ".conf" in err or ".txt" in err


def test_a_file_that_is_not_utf8_names_its_line_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "slurm.conf"
    path.write_bytes(NODE.encode() + b"NodeName=n2 \xff\n")
    status, _, err = run([str(path), "--out", str(tmp_path / "out")], capsys)
    assert status == 2 and f"{path}, line 2: not UTF-8" in err and err.count("line") == 1, err


def test_slurms_line_syntax_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = (
        "NodeName=n1 CPUs=8 \\\n"
        "  RealMemory=64000 Gres=gpu:h100:8 Feature=a\\#b  # a comment\n"
        "PartitionName = p Nodes = n1 MaxTime=60\n"
    )
    policy, _ = imported_policy(tmp_path, capsys, conf)
    assert policy["partitions"][0]["max_time_s"] == 3600
    nodes = load_cluster(tmp_path / "out" / "cluster.toml")
    assert (nodes[0].cpu_milli, nodes[0].memory_mib, nodes[0].labels) == (8000, 64000, {"a#b": ""})


def test_include_reads_the_file_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "site").mkdir()
    write(tmp_path, "site/nodes.conf", "NodeName=n[1-2] CPUs=8 Gres=gpu:h100:8\n")
    write(tmp_path, "site/parts.conf", "Include site/nodes.conf\n")  # from slurm.conf's dir
    policy, _ = imported_policy(
        tmp_path, capsys, "Include site/parts.conf\nPartitionName=p Nodes=n[1-2]\n"
    )
    assert policy["partitions"][0]["nodes"] == ["n1", "n2"]
    assert len(load_cluster(tmp_path / "out" / "cluster.toml")) == 2


@pytest.mark.parametrize(
    ("included", "fragment"),
    [
        (None, "slurm.conf, line 2: Include: "),  # missing
        ("Include slurm.conf\n", "more.conf, line 1: Include: includes itself"),
    ],
)
def test_a_missing_or_cyclic_include_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], included: str | None, fragment: str
) -> None:
    if included is not None:
        write(tmp_path, "more.conf", included)
    err = refused(tmp_path, capsys, NODE + "Include more.conf\n")
    assert fragment in err


@pytest.mark.parametrize(
    ("gres_type", "model"),
    [
        ("a100-sxm4-40gb", "A100-40GB"),
        ("a100_pcie_40gb", "A100-40GB"),
        ("v100-sxm2-16gb", "V100M16"),
        ("nvidia_h100_80gb_hbm3", "H100-80GB"),
        ("l40s", "L40S"),
        ("l4", "L4"),
        ("l40", None),  # a 48 GB card the catalog lacks: not the L4
        ("h100nvl", None),
        ("h100_94gb", None),
    ],
)
def test_gpu_types_match_by_family_and_memory_not_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], gres_type: str, model: str | None
) -> None:
    conf = f"NodeName=n1 CPUs=8 Gres=gpu:{gres_type}:4\n"
    if model is None:
        assert f"GPU type {gres_type!r} names no known model" in refused(tmp_path, capsys, conf)
    else:
        imported_policy(tmp_path, capsys, conf)
        assert load_cluster(tmp_path / "out" / "cluster.toml")[0].gpu_model == model


def test_gres_conf_types_each_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gres = write(
        tmp_path,
        "gres.conf",
        "NodeName=n[1-2] Name=gpu Type=a100 File=/dev/nvidia[0-3]\n"
        "NodeName=n[3-4] Name=gpu Type=h100 File=/dev/nvidia[0-3]\n"
        "NodeName=n4 Name=gpu Type=v100 File=/dev/nvidia4\n",
    )
    conf = "NodeName=n[1-4] CPUs=8 RealMemory=1000 Gres=gpu:4\n"
    _, err = imported_policy(tmp_path, capsys, conf, "--gres", gres)
    nodes = load_cluster(tmp_path / "out" / "cluster.toml")
    assert [n.gpu_model for n in nodes] == ["A100-80GB"] * 2 + ["H100-80GB"] * 2
    assert "n4: GPU types h100 and v100" in err


def test_mig_gres_is_refused_not_imported_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = "NodeName=n1 CPUs=8 Gres=gpu:1g.10gb:7\n"
    err = refused(tmp_path, capsys, conf, "--gpu-model", "1g.10gb=A100-80GB")
    assert "line 1: Gres: GPU type '1g.10gb' is a MIG slice" in err and "gpus.mig" in err


PREEMPT_CONF = """SchedulerType=sched/backfill
PreemptType={kind}
PreemptMode=REQUEUE
NodeName=n1 CPUs=8 RealMemory=64000 Gres=gpu:h100:8
PartitionName=batch Nodes=n1 Default=YES PriorityTier=1
PartitionName=short Nodes=n1 PriorityTier=2 MaxTime=60
"""
PREEMPT_SACCT = """JobID|User|Account|Partition|QOS|Submit|Start|End|Elapsed|Timelimit|State|NNodes|ReqTRES|AllocTRES
1|alice|a|batch|normal|2026-11-02T09:00:00|2026-11-02T09:00:00|2026-11-02T10:00:00|01:00:00|02:00:00|COMPLETED|1|cpu=8,gres/gpu=8,node=1|cpu=8,gres/gpu=8,node=1
2|bob|a|short|normal|2026-11-02T09:10:00|2026-11-02T10:00:00|2026-11-02T10:10:00|00:10:00|00:30:00|COMPLETED|1|cpu=8,gres/gpu=8,node=1|cpu=8,gres/gpu=8,node=1
"""  # noqa: E501


@pytest.mark.parametrize(
    ("kind", "by", "preempted"),
    [("preempt/qos", ["qos"], False), ("preempt/partition_prio", ["partition_tier"], True)],
)
def test_partition_tiers_preempt_only_under_partition_prio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, by: list[str], preempted: bool
) -> None:
    qos = write(tmp_path, "qos.txt", "Name|Priority|Preempt|PreemptMode\nnormal|0||cluster\n")
    policy, _ = imported_policy(tmp_path, capsys, PREEMPT_CONF.format(kind=kind), "--qos", qos)
    assert policy["preemption"] == {"enabled": True, "by": by}
    trace = write(tmp_path, "sacct.txt", PREEMPT_SACCT)
    out = tmp_path / "out"
    args = ["--cluster", str(out / "cluster.toml"), "--profile", str(out / "policy.toml")]
    status = main(["sim", "run", *args, "--trace", f"sacct:{trace}", "--json"])
    stdout, err = capsys.readouterr()
    assert status == 0, err
    assert json.loads(stdout.splitlines()[-1])["preemptions"] == int(preempted)


def test_the_cluster_preempt_mode_reaches_qos_that_follow_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = "PreemptType=preempt/qos\nPreemptMode=CANCEL\n" + NODE
    qos = write(
        tmp_path,
        "qos.txt",
        "Name|Priority|Preempt|PreemptMode\nnormal|10|scav|cluster\nscav|0|||\nkeep|0||requeue\n",
    )
    policy, _ = imported_policy(tmp_path, capsys, conf, "--qos", qos)
    assert [q.get("preempt_mode") for q in policy["qos"]] == ["cancel", "cancel", "requeue"]
    _, err = imported_policy(tmp_path, capsys, conf)  # no QoS table: said, not dropped
    assert "PreemptMode=CANCEL" in err


ASSOC = "Cluster|Account|User|Par Name|Share\n"


def test_roots_users_are_kept_and_one_cluster_is_chosen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = "c|root|||1\nc|root|root||1\nc|root|alice||1\nc|a||root|1\nd|b||root|1\n"
    assoc = write(tmp_path, "assoc.txt", ASSOC + rows)
    err = refused(tmp_path, capsys, NODE, "--assoc", assoc)
    assert "assoc.txt: Cluster: rows of several clusters (c, d): choose one with --cluster" in err
    policy, _ = imported_policy(tmp_path, capsys, NODE, "--assoc", assoc, "--cluster", "c")
    assert [a["name"] for a in policy["accounts"]] == ["a"]
    assert policy["users"] == [{"name": "alice", "account": "root", "shares": 1.0}]
    assert load_profile(tmp_path / "out" / "policy.toml").policy.accounts.user("root", "alice")


def test_partition_nodes_must_exist_and_nodesets_are_expanded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = "NodeName=n[1-2] CPUs=8 Feature=big\nNodeName=n3 CPUs=8\n"
    err = refused(tmp_path, capsys, nodes + "PartitionName=p Nodes=n[1-4]\n")
    assert "line 3: Nodes: unknown node 'n4'" in err
    sets = "NodeSet=bigs Feature=big\nNodeSet=odd Nodes=n[1,3]\n"
    parts = "PartitionName=a Nodes=bigs\nPartitionName=b Nodes=odd,n2\n"
    policy, _ = imported_policy(tmp_path, capsys, nodes + sets + parts)
    assert [p["nodes"] for p in policy["partitions"]] == [["n1", "n2"], ["n1", "n3", "n2"]]


def test_scheduler_parameters_in_any_case_and_default_time_from_max_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = NODE + "SchedulerParameters=BF_INTERVAL=120\nPartitionName=p Nodes=n1 MaxTime=90\n"
    policy, err = imported_policy(tmp_path, capsys, conf)
    assert policy["backfill"]["interval_s"] == 120 and "BF_INTERVAL" not in err
    assert policy["partitions"][0]["default_time_s"] == 90 * 60


def test_default_queue_depth_bounds_the_main_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, err = imported_policy(tmp_path, capsys, NODE + "PartitionName=p Nodes=n1\n")
    assert policy["ordering"]["queue_depth"] == 100  # Slurm's default
    conf = NODE + "SchedulerParameters=default_queue_depth=40\nPartitionName=p Nodes=n1\n"
    policy, err = imported_policy(tmp_path, capsys, conf)
    assert policy["ordering"]["queue_depth"] == 40
    assert "SchedulerParameters=default_queue_depth" not in err  # modelled, not warned of
