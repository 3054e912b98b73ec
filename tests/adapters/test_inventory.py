"""Cluster files: hostlists, defaults, topology, MIG, and one-line errors naming group and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.adapters.inventory import (
    ClusterFileError,
    expand_hostlist,
    load_cluster,
    nodes_from_groups,
)
from gpufleet.cli.main import main
from gpufleet.core.catalog import GPU_MEMORY_MIB
from gpufleet.core.mig import MigInstance
from gpufleet.core.state import ClusterState

ROOT = Path(__file__).parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "cluster.toml"
EXAMPLE = ROOT / "examples" / "cluster.toml"

GROUP = """
[[nodes]]
names = "n[1-2]"
cpu_milli = 8000
memory_mib = 65536
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n1", ["n1"]),
        ("dgx-[01-03]", ["dgx-01", "dgx-02", "dgx-03"]),  # zero-padded to lo's width
        ("g[8-10]", ["g8", "g9", "g10"]),  # no padding: lo is one digit
        ("g[1,3-4],cpu", ["g1", "g3", "g4", "cpu"]),  # list and range, then a plain name
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),  # 2 x 2 product
        ("a, b", ["a", "b"]),
    ],
)
def test_hostlist_expands_in_order(text: str, names: list[str]) -> None:
    assert expand_hostlist(text) == names


@given(
    prefix=st.text("abcxyz-", min_size=1, max_size=4),
    lo=st.integers(0, 500),
    span=st.integers(0, 50),
    width=st.integers(1, 4),
)
def test_hostlist_range_is_every_number_once_padded(
    prefix: str, lo: int, span: int, width: int
) -> None:
    names = expand_hostlist(f"{prefix}[{lo:0{width}d}-{lo + span}]")
    assert names == [f"{prefix}{n:0{width}d}" for n in range(lo, lo + span + 1)]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("n[1-2", "unbalanced"),
        ("n[[1]]", "unbalanced"),
        ("n[3-1]", "runs backwards"),
        ("n[a-b]", "not a number"),
        ("n1,,n2", "empty name"),
        ("n[0-200000]", "more than 100,000"),
    ],
)
def test_bad_hostlist_says_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        expand_hostlist(text)


def test_fixture_loads_every_key() -> None:
    nodes = load_cluster(FIXTURE)
    assert [n.name for n in nodes] == ["h1", "h2", "a1", "a2", "a3", "m1", "cpu1"]
    h1, a1, m1, cpu1 = nodes[0], nodes[2], nodes[5], nodes[6]
    assert (h1.pool, h1.switch, dict(h1.labels)) == ("train", "sw1", {"rack": "r1"})
    assert [g.numa for g in h1.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.nvlink_domain for g in h1.gpus} == {0}  # nvlink = "all": one board
    assert [g.nvlink_domain for g in a1.gpus] == [0, 0, 1, 1]  # "pairs": i // 2
    assert [g.numa for g in a1.gpus] == [0, 0, 0, 0]  # numa defaults to 0
    assert h1.gpus[0].memory_mib == GPU_MEMORY_MIB["H100-80GB"]  # from the catalog
    assert [g.memory_mib for g in m1.gpus] == [40000, 40000]  # given, overrides the catalog
    assert [g.nvlink_domain for g in m1.gpus] == [0, 1]  # "none": each its own
    # "3g.20gb,3g.20gb": unplaced instances take the lowest free valid start, 0 then 4
    assert m1.gpus[0].mig == (MigInstance("3g.20gb", 0), MigInstance("3g.20gb", 4))
    assert m1.gpus[1].mig is None
    assert (cpu1.gpus, cpu1.pool, cpu1.switch) == ((), "default", "")


def test_mig_keys_take_ranges_and_all(tmp_path: Path) -> None:
    gpus = '\n[nodes.gpus]\nmodel = "A100-80GB"\ncount = 4\n[nodes.gpus.mig]\n'
    nodes = load_cluster(write(tmp_path, GROUP + gpus + '"1-2" = "7g.80gb"\n'))
    assert [g.mig for g in nodes[0].gpus] == [None, (("7g.80gb", 0),), (("7g.80gb", 0),), None]
    nodes = load_cluster(write(tmp_path, GROUP + gpus + 'all = ""\n'))
    assert all(g.mig == () for g in nodes[1].gpus)  # MIG on, no instances yet


def test_explicit_domain_and_numa_lists(tmp_path: Path) -> None:
    gpus = 'gpus = { model = "L4", count = 3, nvlink = [5, 5, 9], numa = 1 }\n'
    gpu = load_cluster(write(tmp_path, GROUP + gpus))[0].gpus
    assert [(g.nvlink_domain, g.numa) for g in gpu] == [(5, 1), (5, 1), (9, 1)]


def test_example_loads_and_the_state_accepts_it() -> None:
    nodes = load_cluster(EXAMPLE)
    # 2 DGX x 8 + 4 A100 servers x 4 + 1 MIG node x 8 = 40 GPUs
    assert len(nodes) == 7
    assert sum(len(n.gpus) for n in nodes) == 40
    assert {n.pool for n in nodes} == {"train", "infer"}
    assert {n.switch for n in nodes} == {"sw1", "sw2"}
    state = ClusterState(nodes)
    # GPUs 0-3 with seven 1g.10gb each, GPUs 4-5 with two 3g.40gb each: 4*7 + 2*2 = 32
    assert len(state.mig_node) == 32


BAD = [
    # (file text, expected message tail)
    ("[[nodes]]\nnames = 'x'\ncpu_milli = 1\n", "group 1 (x): memory_mib: required"),
    (GROUP + "colour = 'red'\n", "group 1 (n[1-2]): colour: unknown key"),
    (GROUP + "gpus = { model = 'H100', count = 1 }\n", "gpus.model: unknown GPU model 'H100'"),
    (GROUP + "gpus = { model = 'L4', count = 1, nvme = 2 }\n", "gpus.nvme: unknown key"),
    (GROUP + "gpus = { model = 'L4', count = 0 }\n", "gpus.count: must be 1 to 1024, got 0"),
    (GROUP + "gpus = { model = 'L4', count = 2000 }\n", "gpus.count: must be 1 to 1024"),
    # Past what the core's 64-bit sums can hold: refused, never an overflow.
    (GROUP + "gpus = { model = 'L4', count = 99999999999999999999 }\n", "gpus.count: must be at"),
    (GROUP.replace("8000", "99999999999999999999"), "cpu_milli: must be at most 1099511627776"),
    (
        GROUP + "gpus = { model = 'L4', count = 2, nvlink = [0, 99999999999999999999] }\n",
        "gpus.nvlink: must hold integers from 0 to",
    ),
    (
        GROUP + "gpus = { model = 'A100-80GB', count = 1, memory_mib = 40960, "
        "mig = { 0 = '7g.80gb' } }\n",
        "gpus.memory_mib: a MIG layout needs the A100-80GB's 81920 MiB, got 40960",
    ),
    (GROUP + "gpus = { model = 'L4', count = 2, numa = [0] }\n", "gpus.numa: lists 1 values"),
    (GROUP + "gpus = { model = 'L4', count = 3, nvlink = 'pairs' }\n", "even GPU count"),
    (GROUP + "gpus = { model = 'L4', count = 2, nvlink = 'ring' }\n", "'ring' is not one of"),
    (GROUP + "gpus = { model = 'L4', count = 2, numa = [0, -1] }\n", "gpus.numa: must hold"),
    (GROUP + "gpus = { model = 'L4', count = 1, memory_mib = 0 }\n", "gpus.memory_mib: must be"),
    (GROUP + "cpu = 1\n", "cpu: unknown key"),
    (GROUP.replace("8000", "'8'"), "cpu_milli: must be an integer"),
    (GROUP.replace("8000", "-8"), "cpu_milli: must be zero or more"),
    (GROUP + "labels = { rack = 1 }\n", "labels: must be a table of strings"),
    (GROUP.replace("n[1-2]", "n[2-1]"), "group 1 (n[2-1]): names: bad hostlist"),
    (GROUP.replace("n[1-2]", "n[1-2],n2"), "names: 'n2' is listed twice"),
    (GROUP + GROUP.replace("n[1-2]", "n[2-3]"), "group 2 (n[2-3]): names: 'n2' is also declared"),
    (GROUP + "mig = {}\n", "mig: unknown key"),
    (
        GROUP + "gpus = { model = 'A100-80GB', count = 1, mig = { 0 = '3g.40gb@2' } }\n",
        "gpus.mig.0: 3g.40gb cannot start at slot 2",
    ),
    (
        GROUP + "gpus = { model = 'A100-80GB', count = 1, mig = { 0 = '7g.80gb,1g.10gb' } }\n",
        "gpus.mig.0: no room left for 1g.10gb",
    ),
    (
        GROUP + "gpus = { model = 'A100-80GB', count = 2, mig = { 2 = '7g.80gb' } }\n",
        "gpus.mig.2: key must be a GPU index or range in 0..1",
    ),
    (
        GROUP + "gpus = { model = 'A100-80GB', count = 2, mig = { all = '', 1 = '' } }\n",
        "gpus.mig.1: GPU 1 is given two layouts",
    ),
    (GROUP + "gpus = { model = 'L4', count = 1, mig = { 0 = '1g.6gb' } }\n", "not support MIG"),
    ("[cluster]\nname = 'x'\n", "cluster.toml: cluster: unknown key (known: nodes, pools)"),
    ("", "nodes: declare at least one [[nodes]] group"),
    ("[[nodes]\n", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_file_is_one_line_naming_group_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ClusterFileError) as info:
        load_cluster(path)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(f"{path}: ") or str(info.value).startswith(f"{path}, ")
    assert "\n" not in str(info.value)
    assert message in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match=r"nope\.toml: no such file"):
        load_cluster(tmp_path / "nope.toml")


def test_parsed_groups_read_like_a_file() -> None:
    group = {"names": "n[1-2]", "cpu_milli": 8000, "memory_mib": 65536}
    nodes = nodes_from_groups([group, {**group, "names": "m1", "pool": "p"}], "inline")
    assert [(n.name, n.pool) for n in nodes] == [("n1", "default"), ("n2", "default"), ("m1", "p")]
    with pytest.raises(ClusterFileError, match=r"^inline, group 1 \(n\[1-2\]\): cpu_milli"):
        nodes_from_groups([{**group, "cpu_milli": "8"}], "inline")


def test_collecting_reports_every_bad_group_and_keeps_the_good() -> None:
    good = {"names": "n[1-2]", "cpu_milli": 8000, "memory_mib": 65536}
    errors: list[ClusterFileError] = []
    groups = [
        good,
        {**good, "names": "x1", "cpu": 1},
        7,
        {**good, "names": "n2"},
        {**good, "names": "z"},
    ]
    nodes = nodes_from_groups(groups, "inline", errors)
    assert [n.name for n in nodes] == ["n1", "n2", "z"]  # groups 2, 3 and 4 are skipped
    found = [(e.index, e.key, e.reason.split(" (")[0]) for e in errors]
    assert found == [
        (2, "cpu", "unknown key"),
        (3, None, "must be a table"),
        (4, "names", "'n2' is also declared in group 1"),
    ]


@pytest.mark.slow  # 200 jobs through the default profile: several seconds
def test_example_replays_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    trace = "synthetic:n_jobs=200,seed=1,gpus_total=64"
    assert main(["sim", "run", "--cluster", str(EXAMPLE), "--trace", trace, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["jobs"] == 200
    assert summary["completed"] > 0
