"""The live providers and the configuration of pools: real processes, no shell."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import pytest

from controller.test_config import problems
from gpufleet.adapters.inventory import nodes_from_groups
from gpufleet.controller.scaling import CommandProvider, ProviderConfig, provider
from gpufleet.core.model import GPU, Node
from gpufleet.core.pools import NodePool

TEMPLATE = Node("t", 8000, 32768, tuple(GPU(i, "L4", 24 * 1024) for i in range(2)))
POOL = NodePool("burst", TEMPLATE, max_nodes=3, boot_s=60, price_gpu_hour=1.5)
# A site's program: writes what it got (argv, stdin, environment) to the file named in argv.
RECORD = (
    "import json, os, sys; body = sys.stdin.read(); "
    "env = {k: v for k, v in os.environ.items() if k.startswith('GPUFLEET_')}; "
    "line = json.dumps({'argv': sys.argv[1:], 'stdin': body, 'env': env}); "
    "open(sys.argv[1], 'a').write(line + '\\n'); "
    "sys.exit(int(sys.argv[2]))"
)


def calls(path: Path, count: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 30
    while not path.exists() or len(path.read_text().splitlines()) < count:
        assert time.monotonic() < deadline, "the program never ran"
        time.sleep(0.05)
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_command_provider_passes_the_spec_as_json_and_env(tmp_path: Path) -> None:
    out = tmp_path / "calls.jsonl"
    create = [sys.executable, "-c", RECORD, str(out), "0"]
    delete = [sys.executable, "-c", RECORD, str(out), "0"]
    issued: list[str] = []

    def token_for(name: str) -> str:
        issued.append(name)
        return "gf_secret"

    p = CommandProvider(create, delete, "http://ctl:6817", token_for)
    p.create(POOL, POOL.node("burst-2"), 100)
    (made,) = calls(out, 1)
    spec = json.loads(str(made["stdin"]))
    assert spec["action"] == "create" and spec["node"] == "burst-2" and spec["pool"] == "burst"
    assert (spec["server"], spec["token"], spec["boot_s"]) == ("http://ctl:6817", "gf_secret", 60)
    assert spec["price_gpu_hour"] == 1.5 and issued == ["burst-2"]
    # the inventory is the node's own cluster-file group: it reads back as the same node
    assert nodes_from_groups([spec["inventory"]], "spec") == [POOL.node("burst-2")]
    env = made["env"]
    assert isinstance(env, dict)
    assert env["GPUFLEET_ACTION"] == "create" and env["GPUFLEET_NODE"] == "burst-2"
    assert env["GPUFLEET_URL"] == "http://ctl:6817" and env["GPUFLEET_AGENT_TOKEN"] == "gf_secret"
    p.delete(POOL, "burst-2", 200)
    deleted = calls(out, 2)[1]
    assert json.loads(str(deleted["stdin"])) == {
        "action": "delete", "node": "burst-2", "pool": "burst"
    }  # fmt: skip
    assert "GPUFLEET_AGENT_TOKEN" not in deleted["env"]  # type: ignore[operator]


def test_a_failing_program_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "calls.jsonl"
    fail = [sys.executable, "-c", RECORD, str(out), "3"]
    p = CommandProvider(fail, fail, "http://ctl:6817", lambda name: "gf_x")
    with caplog.at_level(logging.ERROR, logger="gpufleet.controller.scaling"):
        p.create(POOL, POOL.node("burst-1"), 0)
        calls(out, 1)
        deadline = time.monotonic() + 30
        while not any("exit status 3" in r.message for r in caplog.records):
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
    assert "create burst-1 (pool burst): exit status 3" in caplog.text
    with caplog.at_level(logging.ERROR, logger="gpufleet.controller.scaling"):
        # a missing program is logged, never raised into the cycle
        CommandProvider(["/no/such/program"], fail, "u", lambda n: "t").create(
            POOL, POOL.node("burst-3"), 0
        )
    assert "create burst-3: cannot run /no/such/program" in caplog.text


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"kind": "command", "create": ["x"]}, "needs create and delete"),
        ({"kind": "local"}, "needs state_dir"),
        ({"kind": "cloud"}, "kind"),
    ],
)
def test_provider_tables_are_checked(table: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProviderConfig.model_validate(table)


def test_a_provider_needs_a_server_url() -> None:
    config = ProviderConfig(kind="local", state_dir="x")
    with pytest.raises(ValueError, match=r"provider\.server"):
        provider(config, lambda name: "t")


POOLS = """
[[pools]]
name = "burst"
max_nodes = 2
cpu_milli = 8000
memory_mib = 32768
[[policy.partitions]]
name = "burst"
pools = ["burst"]
"""


def test_configuration_of_pools() -> None:
    provider_table = '[provider]\nkind = "local"\nstate_dir = "pool"\n'
    assert problems(POOLS + provider_table) == []
    assert problems(POOLS) == ["provider: [[pools]] need a [provider] to create their nodes"]
    bad = POOLS.replace("max_nodes = 2", "max_nodes = 0") + provider_table
    assert problems(bad) == ["pools.1.max_nodes: must be at least 1 and min_nodes, got 0"]
    # declared nodes: a partition may name the pool, but not an unknown one
    node = '[[nodes]]\nnames = "n1"\ncpu_milli = 1000\nmemory_mib = 1024\n'
    assert problems(node + POOLS + provider_table) == []
    typo = (node + POOLS + provider_table).replace('pools = ["burst"]', 'pools = ["brust"]')
    assert problems(typo)[0].startswith("policy.partitions.burst.pools: unknown pool 'brust'")
