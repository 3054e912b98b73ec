"""The controller's configuration file: every problem named by its key, and ``config check``."""

from __future__ import annotations

import copy
import json
import math
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.cli.main import main
from gpufleet.controller.config import (
    ConfigError,
    ControllerConfig,
    PrincipalConfig,
    ServerConfig,
    config_from_dict,
    load_config,
)
from gpufleet.controller.setup import setup_from_config
from gpufleet.policies.config import PolicyConfig
from gpufleet.policies.validation import model_of

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "controller.toml"
DEMO = ROOT / "examples" / "demo-node.toml"
DOCS = ROOT / "docs" / "configuration.md"

NODE = '[[nodes]]\nnames = "n[1-2]"\ncpu_milli = 8000\nmemory_mib = 65536\n'
ACCOUNT = '[[policy.accounts]]\nname = "vision"\n'


def problems(text: str) -> list[str]:
    """The problems ``text`` has, as ``key: message`` lines (none: it is valid)."""
    try:
        config_from_dict(tomllib.loads(text))
    except ConfigError as e:
        return list(e.problems)
    return []


def test_example_builds_the_site_it_describes() -> None:
    built = load_config(EXAMPLE).build()
    # 2 DGX x 8 + 4 A100 servers x 4 + 1 MIG node x 8 = 40 GPUs
    assert (len(built.nodes), sum(len(n.gpus) for n in built.nodes)) == (7, 40)
    assert list(built.partitions) == ["batch", "interactive", "scavenge"]
    assert built.qos["high"].preempt == ("scavenger",)
    assert (built.default_partition, built.default_qos) == ("batch", "normal")
    assert built.principals["bob"].default_account == "vision"
    assert built.server.heartbeat_timeout_s == 90  # 30 s x 3 missed heartbeats
    tree = built.accounts
    # carol is listed in [[policy.users]] with 2 shares; the principals' other
    # (user, account) pairs get 1 share: alice/vision, bob/vision, bob/nlp, olga/ops
    assert tree.shares[tree.user("nlp", "carol")] == 2
    assert tree.shares[tree.user("nlp", "bob")] == 1
    assert tree.n_users == 5
    assert built.profile().preemption is not None
    assert built.summary() == "7 nodes, 40 GPUs, 3 partitions, 3 QoS, 4 accounts, 5 principals"


def test_an_empty_file_is_a_working_configuration(tmp_path: Path) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("")
    built = load_config(path).build()
    assert (built.default_partition, built.default_qos) == ("default", "normal")
    assert built.nodes == ()  # agents register them
    assert built.summary() == "0 nodes, 0 GPUs, 1 partition, 1 QoS, 0 accounts, 0 principals"


def test_default_qos_is_normal_wherever_it_is_listed() -> None:
    text = '[[policy.qos]]\nname = "high"\n[[policy.qos]]\nname = "normal"\n'
    assert config_from_dict(tomllib.loads(text)).build().default_qos == "normal"
    text = '[[policy.qos]]\nname = "high"\n[[policy.qos]]\nname = "low"\n'
    assert config_from_dict(tomllib.loads(text)).build().default_qos == "high"  # the first


@pytest.mark.parametrize("path", [EXAMPLE, DEMO])
def test_effective_config_round_trips_through_json(path: Path) -> None:
    config = load_config(path)
    stored = json.loads(json.dumps(config.to_dict()))
    assert config_from_dict(stored) == config
    assert "default_partition" not in ControllerConfig().to_dict()["server"]  # no nulls


def test_priority_calc_s_reaches_the_controller_setup() -> None:
    """PriorityCalcPeriod is the controller's, as the simulator's is [sim]'s: not the policy's."""
    assert setup_from_config(ControllerConfig().build()).priority_calc_s == 300
    config = config_from_dict(tomllib.loads("[server]\npriority_calc_s = 60\n"))
    assert setup_from_config(config.build()).priority_calc_s == 60


BAD = [
    # (file text, the one problem it has)
    (
        "colour = 1\n",
        "colour: unknown key (known: server, policy, nodes, principals, alerts, pools, provider)",
    ),
    ("[server]\ninterval = 5\n", "server.interval: unknown key (known: interval_s,"),
    ("[server]\ninterval_s = 0\n", "server.interval_s: must be greater than or equal to 1"),
    ("[server]\npriority_calc_s = -1\n", "server.priority_calc_s: must be greater"),
    ("[server]\nkill_grace_s = 'soon'\n", "server.kill_grace_s: must be a whole number"),
    # A quoted number is no number, as in the policy tables.
    ("[server]\nkill_grace_s = '30'\n", "server.kill_grace_s: must be a whole number"),
    ("[[principals]]\nname = 'ana'\naccounts = 'vision'\n", "principals.ana.accounts: must"),
    ("[server]\ndefault_stdout = 'out-%N'\n", "server.default_stdout: unknown pattern '%N'"),
    ("[server]\ndefault_stdout = ''\n", "server.default_stdout: must be a non-empty path"),
    ("[server]\ndefault_partition = 'gpu'\n", "server.default_partition: unknown partition 'gpu'"),
    ("[server]\ndefault_qos = 'hi'\n", "server.default_qos: unknown QoS 'hi' (known: normal)"),
    ("[[server]]\n", "server: must be a table"),
    ("[policy]\nsim = {}\n", "policy.sim: unknown key (known: ordering, placement,"),
    ("[policy.ordering]\nplugin = 'lottery'\n", "policy.ordering.plugin: must be 'fifo'"),
    ("[policy.placement]\nplugin = 'x'\n", "policy.placement.plugin: unknown placement plugin"),
    (
        "[policy.ordering.multifactor]\nweight_age = -1\n",
        "policy.ordering.multifactor.weight_age: must be greater than or equal to 0",
    ),
    ("[policy.mig]\nrepartition = 'yes'\n", "policy.mig.repartition: must be true or false"),
    ("[policy.mig]\nmin_interval_s = '60'\n", "policy.mig.min_interval_s: must be a whole"),
    ("[policy.predict]\nordering = 'off'\n", "policy.predict.ordering: must be true or false"),
    ("[policy.predict]\nquantile = '0.9'\n", "policy.predict.quantile: must be a number"),
    ("[policy.autoscale]\nidle_s = '600'\n", "policy.autoscale.idle_s: must be a whole"),
    ("[policy.backfill]\nmax_job_test = '500'\n", "policy.backfill.max_job_test: must be"),
    (
        "[policy.ordering.multifactor]\nweight_age = '1000'\n",
        "policy.ordering.multifactor.weight_age: must be a whole number",
    ),
    ("[policy.preemption]\nenabled = 'yes'\n", "policy.preemption.enabled: must be true"),
    (
        "[policy.predict]\nhistory = 3\nmin_history = 4\n",
        "policy.predict.min_history: 4 is more than history (3)",
    ),
    ("[[policy.qos]]\nname = 'hi'\nx = 1\n", "policy.qos.hi.x: unknown key (known: name,"),
    ("[[policy.qos]]\npriority = 1\n", "policy.qos.1.name: required"),  # no name: position
    ("[[policy.qos]]\nname = 'a'\npreempt = ['a']\n", "policy.qos.a.preempt: a QoS cannot"),
    ("[[policy.qos]]\nname = 'a'\npreempt = ['b']\n", "policy.qos.a.preempt: unknown QoS 'b'"),
    ("policy.qos = []\n", "policy.qos: define at least one QoS"),
    ("policy.partitions = []\n", "policy.partitions: define at least one partition"),
    (
        "[[policy.partitions]]\nname = 'p'\nallowed_accounts = ['x']\n",
        "policy.partitions.p.allowed_accounts: unknown account 'x' (no account is defined)",
    ),
    (
        "[[policy.partitions]]\nname = 'p'\nallowed_qos = ['x']\n",
        "policy.partitions.p.allowed_qos: unknown QoS 'x'",
    ),
    (
        "[[policy.partitions]]\nname = 'p'\ndefault_time_s = 7200\nmax_time_s = 3600\n",
        "policy.partitions.p.default_time_s: 7200 s is over max_time_s (3600 s)",
    ),
    (ACCOUNT + "parent = 'org'\n", "policy.accounts.vision.parent: unknown account 'org'"),
    (ACCOUNT + "shares = 0\n", "policy.accounts.vision.shares: must be a positive"),
    (ACCOUNT * 2, "policy.accounts.vision: defined twice"),
    (
        ACCOUNT + "[[policy.accounts]]\nname = 'x'\nparent = 'y'\n"
        "[[policy.accounts]]\nname = 'y'\nparent = 'x'\n",
        "policy.accounts.x.parent: cycle x -> y -> x",
    ),
    ("[[policy.users]]\nname = 'u'\naccount = 'a'\n", "policy.users.u.account: unknown account"),
    (
        "[[policy.reservations]]\nname = 'r'\nstart = 10\nend = 5\nnodes = ['n1']\n",
        "policy.reservations.r.end: must be after start",
    ),
    (
        "[[policy.reservations]]\nname = 'r'\nstart = 0\nend = 5\n",
        "policy.reservations.r: give either nodes or gpus",
    ),
    (
        NODE + "[[policy.partitions]]\nname = 'p'\nnodes = ['n3']\n",
        "policy.partitions.p.nodes: unknown node 'n3' (known: n1, n2)",
    ),
    (
        NODE + "[[policy.partitions]]\nname = 'p'\npools = ['train']\n",
        "policy.partitions.p.pools: unknown pool 'train' (known: default)",
    ),
    (
        NODE + "[[policy.reservations]]\nname = 'r'\nstart = 0\nend = 5\nnodes = ['x']\n",
        "policy.reservations.r.nodes: unknown node 'x'",
    ),
    ("nodes = {}\n", "nodes: must be a list"),
    ("nodes = [1]\n", "nodes.1: must be a table"),
    (NODE.replace("8000", "'8'"), "nodes.n[1-2].cpu_milli: must be an integer, got '8'"),
    (NODE + "gpus = { model = 'H900', count = 1 }\n", "nodes.n[1-2].gpus.model: unknown GPU"),
    (NODE + "colour = 1\n", "nodes.n[1-2].colour: unknown key (known: names,"),
    (NODE.replace('names = "n[1-2]"\n', ""), "nodes.1.names: required"),
    (NODE + NODE.replace("n[1-2]", "n2"), "nodes.n2.names: 'n2' is also declared in group 1"),
    ("[[principals]]\nrole = 'user'\n", "principals.1.name: required"),
    ("[[principals]]\nname = '-x'\n", "principals.-x.name: must be 1-64 letters"),
    ("[[principals]]\nname = 'a'\nrole = 'god'\n", "principals.a.role: must be 'admin'"),
    ("[[principals]]\nname = 'a'\naccounts = 'v'\n", "principals.a.accounts: must be"),
    ("[[principals]]\nname = 'a'\n" * 2, "principals.a: defined twice"),
    (
        ACCOUNT + "[[principals]]\nname = 'a'\naccounts = ['v']\n",
        "principals.a.accounts: unknown account 'v' (known: vision)",
    ),
    (
        ACCOUNT + "[[principals]]\nname = 'a'\naccounts = ['vision', 'vision']\n",
        "principals.a.accounts.vision: listed twice",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_file_names_the_key(text: str, expected: str) -> None:
    found = problems(text)
    assert len(found) == 1, found
    assert found[0].startswith(expected)


def test_every_problem_of_every_table_is_reported() -> None:
    text = """
        colour = 1
        [server]
        interval_s = 0
        kill_grace_s = -1
        [[policy.qos]]
        name = "high"
        priority = -3
        [[nodes]]
        names = "n1"
        cpu_milli = "lots"
        memory_mib = 1
        [[nodes]]
        names = "n2"
        [[principals]]
        name = "a"
        role = "god"
    """
    keys = [p.partition(": ")[0] for p in problems(text)]
    assert sorted(keys) == [
        "colour",
        "nodes.n1.cpu_milli",
        "nodes.n2.cpu_milli",
        "policy.qos.high.priority",
        "principals.a.role",
        "server.interval_s",
        "server.kill_grace_s",
    ]


def test_every_cross_table_problem_is_reported() -> None:
    text = (
        NODE
        + """
        [server]
        default_partition = "gpu"
        [[policy.qos]]
        name = "normal"
        preempt = ["scav", "normal"]
        [[policy.partitions]]
        name = "p"
        nodes = ["n9"]
        [[policy.accounts]]
        name = "a"
        parent = "b"
        [[principals]]
        name = "alice"
        accounts = ["a", "zz"]
    """
    )
    keys = [p.partition(": ")[0] for p in problems(text)]
    assert sorted(keys) == [
        "policy.accounts.a.parent",
        "policy.partitions.p.nodes",
        "policy.qos.normal.preempt",  # preempts itself
        "policy.qos.normal.preempt",  # 'scav' is unknown
        "principals.alice.accounts",
        "server.default_partition",
    ]


def test_missing_unreadable_and_malformed_files(tmp_path: Path) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[server]\n")
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n")
    for path, message in [
        (tmp_path / "nope.toml", "no such file"),
        (binary, "not valid TOML"),
        (broken, "not valid TOML"),
        (tmp_path, "directory"),
    ]:
        with pytest.raises(ConfigError) as info:
            load_config(path)
        assert info.value.source == str(path)
        assert len(info.value.problems) == 1
        assert message in info.value.problems[0]


def test_check_prints_ok_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(DEMO)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{DEMO}: ok (1 node, 2 GPUs, 1 partition, 1 QoS, 0 accounts, 2 principals)\n"
    assert err == ""


def test_check_prints_one_line_per_problem(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[server]\ninterval = 5\n[[principals]]\nname = 'a'\nrole = 'god'\n")
    assert main(["config", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"error: {path}: server.interval: unknown key")
    assert lines[1].startswith(f"error: {path}: principals.a.role: must be")


def test_check_of_a_quoted_number_is_one_line_naming_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "quoted.toml"
    path.write_text(DEMO.read_text() + "\n[policy.backfill]\nmax_job_test = '500'\n")
    assert main(["config", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: {path}: policy.backfill.max_job_test: must be a whole number\n"


@pytest.mark.parametrize(
    "name", ["nope.toml", ".", "binary.toml"], ids=["missing", "directory", "binary"]
)
def test_check_of_an_unusable_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    (tmp_path / "binary.toml").write_bytes(b"\x00\xff")
    path = tmp_path / name
    assert main(["config", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {path}: ")


def test_the_documented_commands_print_what_the_page_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``$ gpufleet ...`` line of a console block runs from the repository root
    and prints the lines that follow it."""
    monkeypatch.chdir(ROOT)
    blocks = re.findall(r"```console\n(.*?)```", DOCS.read_text(), re.DOTALL)
    runs = [block.split("$ ")[1:] for block in blocks]
    commands = [run for block in runs for run in block]
    assert commands  # the page shows at least one
    for run in commands:
        command, _, shown = run.partition("\n")
        argv = shlex.split(command)
        assert argv[0] == "gpufleet"
        status = main(argv[1:])
        out, err = capsys.readouterr()
        assert (out + err).strip() == shown.strip(), command
        assert status == (2 if err else 0)


def test_the_page_names_every_key() -> None:
    text = DOCS.read_text()
    assert [k for k in ControllerConfig.model_fields if f"[{k}]" not in text] == []
    assert [k for k in PolicyConfig.model_fields if f"policy.{k}" not in text] == []
    tables = [PolicyConfig.model_fields[k].annotation for k in PolicyConfig.model_fields]
    models = [ServerConfig, PrincipalConfig, *filter(None, map(model_of, tables))]
    keys = [f"{m.__name__}.{key}" for m in models for key in m.model_fields]
    assert [key for key in keys if f"`{key.split('.')[1]}`" not in text] == []


# Any document, however wrong, is either a configuration or a ConfigError. Documents
# are the example with parts replaced, removed or added, so the junk reaches every table.

SCALARS = (
    st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=True)
    | st.booleans()
    | st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
    | st.sampled_from(["", "normal", "vision", "n1", "root", "H100-80GB", "0-3", "all"])
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text("abcnmqz_", min_size=1, max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def toml_value(value: Any) -> str:
    """One value as inline TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float | str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML's too
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    pairs = (f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
    return "{" + ", ".join(pairs) + "}"


@st.composite
def mutated_example(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(tomllib.loads(EXAMPLE.read_text()))
    for _ in range(draw(st.integers(1, 4))):
        node: Any = doc
        # Walk down a few levels, then replace, remove or add there.
        for _ in range(draw(st.integers(0, 4))):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            child = node[draw(st.sampled_from(keys))] if keys else None
            if not isinstance(child, dict | list):
                break
            node = child
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "add" or not keys:
            if isinstance(node, dict):
                node[draw(st.sampled_from(["name", "nodes", "zz", "shares"]))] = draw(JUNK)
            else:
                node.append(draw(JUNK))
        elif action == "remove":
            del node[draw(st.sampled_from(keys))]
        else:
            node[draw(st.sampled_from(keys))] = draw(JUNK)
    return doc


@given(mutated_example())
def test_junk_is_a_config_or_a_config_error(doc: dict[str, Any]) -> None:
    text = "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in doc.items())
    tomllib.loads(text)  # the generator writes valid TOML, so the junk reaches the checks
    try:
        config_from_dict(tomllib.loads(text)).build()
    except ConfigError as e:
        assert e.problems
        assert all(p and "\n" not in p for p in e.problems)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_a_config_or_a_config_error(tmp_path_factory: Any, data: bytes) -> None:
    path = tmp_path_factory.mktemp("junk") / "config.toml"
    path.write_bytes(data)
    try:
        load_config(path)
    except ConfigError as e:
        assert len(e.problems) >= 1
