"""Loader for gpufleet cluster files: the declared inventory of nodes, GPUs and topology.

A cluster file is TOML with one array of tables, ``[[nodes]]``; each entry is a
node group that declares one or more identical nodes (``names`` is a
Slurm-style hostlist such as ``"dgx-[01-04]"``). The format is documented in
``docs/cluster-file.md``. Every problem raises ``ClusterFileError``, one line
naming the file, the group (1-based, with its ``names``) and the key.

``load_cluster`` reads a file; ``nodes_from_groups`` reads the ``[[nodes]]``
array of a document parsed elsewhere (the controller's configuration file
embeds node groups) and can collect one error per bad group instead of
stopping at the first. A file may also declare node pools, ``[[pools]]``
(``core.pools``): ``load_cluster_file`` returns both, ``pools_from_tables``
reads the array from a parsed document.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, MutableSequence, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.core import mig
from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.model import GPU, MAX_AMOUNT, MAX_GPUS_PER_NODE, InvalidSpec, Node
from gpufleet.core.pools import NodePool

GROUP_KEYS = ("names", "pool", "switch", "cpu_milli", "memory_mib", "labels", "gpus")
POOL_KEYS = ("name", "min_nodes", "max_nodes", "boot_s", "price_gpu_hour", "partitions")
"""A pool's own keys; the node keys of a group but ``names`` and ``pool`` describe its node."""
POOL_NODE_KEYS = ("switch", "cpu_milli", "memory_mib", "labels", "gpus")
GPU_KEYS = ("model", "count", "memory_mib", "nvlink", "numa", "mig")
NVLINK_MODES = ("all", "pairs", "none")
MAX_HOSTS = 100_000
"""Most names one hostlist may expand to: a typo like ``[1-1000000]`` fails fast."""

_RANGE = re.compile(r"\[([^\[\]]*)\]")


class ClusterFileError(ValueError):
    """A cluster file that cannot be loaded, with where and why (one line).

    The parts stay available for callers that name the place their own way:
    ``group`` (``"group 2 (dgx-[01-02])"``), ``index`` (the group's 1-based
    position), ``key`` (``"gpus.count"``) and ``reason``.
    """

    def __init__(
        self,
        path: Path | str,
        group: str | None,
        key: str | None,
        reason: str,
        *,
        index: int | None = None,
    ) -> None:
        where = str(path) + (f", {group}" if group else "")
        what = f"{key}: " if key else ""
        super().__init__(f"{where}: {what}{reason}".replace("\n", " "))
        self.group, self.index, self.key, self.reason = group, index, key, reason


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm-style hostlist, in order: ``"gpu[01-03,7],cpu1"``.

    Commas outside brackets separate expressions; each bracket holds numbers
    and ``lo-hi`` ranges, zero-padded to the width of ``lo`` as written.
    Several brackets in one name expand as a product (``r[1-2]n[1-2]`` is four
    names). Raise ValueError saying what is malformed.
    """
    names: list[str] = []
    for expr in _split_top(text):
        if not expr:
            raise ValueError(f"empty name in {text!r}")
        literals = _RANGE.split(expr)  # literal, range, literal, range, ..., literal
        if any("[" in lit or "]" in lit for lit in literals[::2]):
            raise ValueError(f"unbalanced or nested brackets in {expr!r}")
        choices = [[lit] if k % 2 == 0 else _numbers(lit) for k, lit in enumerate(literals)]
        if len(names) + math.prod(len(c) for c in choices) > MAX_HOSTS:
            raise ValueError(f"expands to more than {MAX_HOSTS:,} names")
        names.extend("".join(parts) for parts in itertools.product(*choices))
    return names


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _numbers(spec: str) -> list[str]:
    out: list[str] = []
    for item in spec.split(","):
        lo, dash, hi = (x.strip() for x in item.partition("-"))
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"[{spec}]: {item.strip()!r} is not a number or lo-hi range")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f"[{spec}]: range {item.strip()!r} runs backwards")
        if last - first >= MAX_HOSTS:
            raise ValueError(f"expands to more than {MAX_HOSTS:,} names")
        out.extend(str(n).zfill(len(lo)) for n in range(first, last + 1))
    return out


class _Group:
    """One ``[[nodes]]`` entry being read; ``fail`` builds an error naming it and a key."""

    def __init__(self, path: Path | str, index: int, table: object) -> None:
        self.path = path
        self.index = index
        self.label = f"group {index}"
        if not isinstance(table, dict):
            raise self.fail(None, "must be a table")
        self.table: Mapping[str, Any] = table
        names = table.get("names")
        label = ",".join(map(str, names)) if isinstance(names, list) else str(names or "")
        self.label += f" ({label})" if label else ""

    def fail(self, key: str | None, reason: str) -> ClusterFileError:
        return ClusterFileError(self.path, self.label, key, reason, index=self.index)

    def check_keys(self, table: Mapping[str, Any], known: Sequence[str], prefix: str) -> None:
        for key in table:
            if key not in known:
                raise self.fail(prefix + key, f"unknown key (known: {', '.join(known)})")

    def integer(self, table: Mapping[str, Any], name: str, default: int | None) -> int:
        """``table[name's last part]`` as an integer; ``name`` is the key to report."""
        value: object = table.get(name.rpartition(".")[2], default)
        if value is None:
            raise self.fail(name, "required")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"must be an integer, got {value!r}")
        if value > MAX_AMOUNT:
            raise self.fail(name, f"must be at most {MAX_AMOUNT}, got {value}")
        return value

    def text(self, key: str, default: str) -> str:
        value = self.table.get(key, default)
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {value!r}")
        return value

    def per_gpu(self, value: Any, count: int, name: str) -> list[int]:
        """An integer for every GPU, or a list of ``count`` integers."""
        values = value if isinstance(value, list) else [value] * count
        if len(values) != count:
            raise self.fail(name, f"lists {len(values)} values for {count} GPUs")
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_AMOUNT:
                raise self.fail(name, f"must hold integers from 0 to {MAX_AMOUNT}, got {v!r}")
        return values


def load_cluster(path: Path | str) -> list[Node]:
    """Read a cluster file and return its nodes, in the order declared (its pools are
    left out: ``load_cluster_file``).

    Node names must be unique across the whole file. GPU memory defaults to the
    catalog's size for the model. Raise ClusterFileError on any problem.
    """
    return load_cluster_file(path)[0]


def load_cluster_file(path: Path | str) -> tuple[list[Node], list[NodePool]]:
    """Read a cluster file: its nodes and its node pools, each in the order declared.

    A file needs at least one node group or one pool; no pool node name may
    be a declared node's. Raise ClusterFileError on any problem.
    """
    path = Path(path)
    try:
        doc = read_toml(path)
    except UnreadableToml as e:
        raise ClusterFileError(path, None, None, str(e)) from None
    for key in doc:
        if key not in ("nodes", "pools"):
            raise ClusterFileError(path, None, key, "unknown key (known: nodes, pools)")
    groups, tables = doc.get("nodes", []), doc.get("pools", [])
    for key, value in (("nodes", groups), ("pools", tables)):
        if not isinstance(value, list):
            raise ClusterFileError(path, None, key, f"must be an array of tables, [[{key}]]")
    if not groups and not tables:
        raise ClusterFileError(path, None, "nodes", "declare at least one [[nodes]] group")
    nodes = nodes_from_groups(groups, path)
    return nodes, pools_from_tables(tables, path, [n.name for n in nodes])


def group_table(node: Node) -> dict[str, Any]:
    """The ``[[nodes]]`` group that declares just ``node`` (what ``_read_group`` reads back
    as an equal node): for an agent's inventory file, or a site's script, to describe it."""
    table: dict[str, Any] = {
        "names": node.name,
        "pool": node.pool,
        "switch": node.switch,
        "cpu_milli": node.cpu_milli,
        "memory_mib": node.memory_mib,
        "labels": dict(node.labels),
    }
    if node.gpus:
        first = node.gpus[0]
        table["gpus"] = {
            "model": first.model,
            "count": len(node.gpus),
            "memory_mib": first.memory_mib,
            "nvlink": [g.nvlink_domain for g in node.gpus],
            "numa": [g.numa for g in node.gpus],
            "mig": {
                str(g.index): ",".join(f"{profile}@{start}" for profile, start in g.mig)
                for g in node.gpus
                if g.mig is not None
            },
        }
    return table


def pools_from_tables(
    tables: Sequence[object], source: Path | str, node_names: Sequence[str] = ()
) -> list[NodePool]:
    """The pools of parsed ``[[pools]]`` tables; ``node_names`` are the declared nodes,
    which no pool node may be named as. Raise ClusterFileError naming the pool and key."""
    pools: list[NodePool] = []
    taken = dict.fromkeys(node_names, "a [[nodes]] group")
    for index, table in enumerate(tables, start=1):
        group = _Group(source, index, table)
        pool = _read_pool(group)
        if any(p.name == pool.name for p in pools):
            raise group.fail("name", f"pool {pool.name!r} is declared twice")
        if pool.max_nodes > MAX_HOSTS:
            raise group.fail("max_nodes", f"must be at most {MAX_HOSTS:,}, got {pool.max_nodes}")
        for name in pool.names():
            if name in taken:
                raise group.fail("name", f"its node {name!r} is also declared in {taken[name]}")
            taken[name] = group.label
        pools.append(pool)
    return pools


def _read_pool(group: _Group) -> NodePool:
    table = group.table
    name = table.get("name")
    group.label = f"pool {group.index}" + (f" ({name})" if isinstance(name, str) else "")
    group.check_keys(table, POOL_KEYS + POOL_NODE_KEYS, "")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}", name):
        raise group.fail("name", f"must be letters, digits, '_', '.' or '-', got {name!r}")
    partitions = table.get("partitions", [])
    if not isinstance(partitions, list) or not all(isinstance(p, str) for p in partitions):
        raise group.fail("partitions", "must be a list of partition names")
    price = table.get("price_gpu_hour", 0.0)
    if isinstance(price, bool) or not isinstance(price, int | float):
        raise group.fail("price_gpu_hour", f"must be a number, got {price!r}")
    node_table = {k: v for k, v in table.items() if k in POOL_NODE_KEYS}
    shape = _Group(group.path, group.index, {"names": f"{name}-0", "pool": name, **node_table})
    shape.label = group.label
    (template,) = _read_group(shape)
    try:
        return NodePool(
            name=name,
            template=template,
            min_nodes=group.integer(table, "min_nodes", 0),
            max_nodes=group.integer(table, "max_nodes", None),
            boot_s=group.integer(table, "boot_s", 0),
            price_gpu_hour=float(price),
            partitions=tuple(partitions),
        )
    except InvalidSpec as e:
        raise group.fail(e.field, e.reason) from None


def nodes_from_groups(
    groups: Sequence[object],
    source: Path | str,
    errors: MutableSequence[ClusterFileError] | None = None,
) -> list[Node]:
    """The nodes of parsed ``[[nodes]]`` groups, in the order declared.

    ``source`` names the document in messages. Node names must be unique
    across all groups. Without ``errors``, the first problem raises
    ClusterFileError; with it, each bad group appends its first problem
    there and contributes no nodes, so every bad group is reported.
    """
    nodes: list[Node] = []
    first_group: dict[str, str] = {}
    for index, table in enumerate(groups, start=1):
        try:
            group = _Group(source, index, table)
            members = _read_group(group)
            for node in members:
                if node.name in first_group:
                    raise group.fail(
                        "names", f"{node.name!r} is also declared in {first_group[node.name]}"
                    )
        except ClusterFileError as e:
            if errors is None:
                raise
            errors.append(e)
            continue
        for node in members:
            first_group[node.name] = group.label
        nodes.extend(members)
    return nodes


def _read_group(group: _Group) -> list[Node]:
    table = group.table
    group.check_keys(table, GROUP_KEYS, "")
    names = _names(group)
    labels = table.get("labels", {})
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise group.fail("labels", 'must be a table of strings, e.g. { rack = "r1" }')
    gpus = _gpus(group)
    pool, switch = group.text("pool", "default"), group.text("switch", "")
    cpu = group.integer(table, "cpu_milli", None)
    memory = group.integer(table, "memory_mib", None)
    frozen = MappingProxyType(dict(labels))
    try:
        return [
            Node(name, cpu, memory, gpus, pool=pool, switch=switch, labels=frozen) for name in names
        ]
    except InvalidSpec as e:
        raise group.fail(e.field.removeprefix("node."), e.reason) from None


def _names(group: _Group) -> list[str]:
    raw = group.table.get("names")
    if raw is None:
        raise group.fail("names", "required")
    exprs = raw if isinstance(raw, list) else [raw]
    names: list[str] = []
    for expr in exprs:
        if not isinstance(expr, str):
            raise group.fail("names", f"must be a hostlist string or a list of them, got {expr!r}")
        try:
            names += expand_hostlist(expr)
        except ValueError as e:
            raise group.fail("names", f"bad hostlist: {e}") from None
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise group.fail("names", f"{name!r} is listed twice")
        seen.add(name)
    return names


def _gpus(group: _Group) -> tuple[GPU, ...]:
    spec = group.table.get("gpus")
    if spec is None:
        return ()
    if not isinstance(spec, dict):
        raise group.fail("gpus", 'must be a table, e.g. { model = "H100-80GB", count = 8 }')
    group.check_keys(spec, GPU_KEYS, "gpus.")
    model = spec.get("model")
    if not isinstance(model, str):
        raise group.fail(
            "gpus.model",
            "required, a GPU model name" if model is None else f"must be a string, got {model!r}",
        )
    try:
        default_memory = gpu_memory_mib(model)
    except InvalidSpec as e:
        raise group.fail("gpus.model", e.reason) from None
    count = group.integer(spec, "gpus.count", None)
    if not 0 < count <= MAX_GPUS_PER_NODE:
        raise group.fail("gpus.count", f"must be 1 to {MAX_GPUS_PER_NODE}, got {count}")
    memory = group.integer(spec, "gpus.memory_mib", default_memory)
    domains = _nvlink(group, spec.get("nvlink", "all"), count)
    numa = group.per_gpu(spec.get("numa", 0), count, "gpus.numa")
    layouts = _mig(group, spec.get("mig", {}), model, count)
    # MIG cuts the model's whole memory; NVML reports a little under the nominal size
    # (an H100 80GB: 81,559 MiB), so only a smaller card is refused.
    if layouts and memory < default_memory * 0.95:
        raise group.fail(
            "gpus.memory_mib",
            f"a MIG layout needs the {model}'s {default_memory} MiB, got {memory}",
        )
    try:
        return tuple(
            GPU(i, model, memory, numa=numa[i], nvlink_domain=domains[i], mig=layouts.get(i))
            for i in range(count)
        )
    except InvalidSpec as e:
        raise group.fail("gpus." + e.field.removeprefix("gpu."), e.reason) from None


def _nvlink(group: _Group, value: Any, count: int) -> list[int]:
    """NVLink domain per GPU: one board, bridged pairs, none, or explicit ids."""
    if value == "all":
        return [0] * count
    if value == "none":
        return list(range(count))
    if value == "pairs":
        if count % 2:
            raise group.fail("gpus.nvlink", f"'pairs' needs an even GPU count, got {count}")
        return [i // 2 for i in range(count)]
    if isinstance(value, str):
        modes = ", ".join(NVLINK_MODES)
        raise group.fail("gpus.nvlink", f"{value!r} is not one of {modes} or a list of ids")
    return group.per_gpu(value, count, "gpus.nvlink")


def _mig(
    group: _Group, value: Any, model: str, count: int
) -> dict[int, tuple[mig.MigInstance, ...]]:
    """MIG layouts keyed by GPU index, an index range ``"lo-hi"``, or ``all``."""
    if not isinstance(value, dict):
        raise group.fail("gpus.mig", 'must be a table of GPU index = "layout"')
    layouts: dict[int, tuple[mig.MigInstance, ...]] = {}
    for key, text in value.items():
        name = f"gpus.mig.{key}"
        lo, dash, hi = key.partition("-")
        if key == "all":
            indices = range(count)
        elif lo.isdigit() and (hi.isdigit() if dash else True):
            indices = range(int(lo), int(hi if dash else lo) + 1)
        else:
            indices = range(0)
        if not indices or indices[-1] >= count:
            raise group.fail(name, f"key must be a GPU index or range in 0..{count - 1}, or 'all'")
        if not isinstance(text, str):
            raise group.fail(name, f"must be a layout string, got {text!r}")
        try:
            layout = mig.parse_layout(model, text)
        except InvalidSpec as e:
            raise group.fail(name, e.reason) from None
        for i in indices:
            if i in layouts:
                raise group.fail(name, f"GPU {i} is given two layouts")
            layouts[i] = layout
    return layouts


def with_mig(group: Mapping[str, Any], node: Node) -> dict[str, Any]:
    """``group`` (one node's group table) with ``gpus.mig`` written anew from ``node``'s
    GPUs: ``"INDEX" = "PROFILE@START,..."`` for each GPU with MIG on, none for the others.
    What a node's declared inventory becomes once its MIG layouts changed."""
    gpus = dict(group.get("gpus") or {})
    layouts = {
        str(g.index): ",".join(f"{p}@{s}" for p, s in g.mig) for g in node.gpus if g.mig is not None
    }
    if layouts:
        gpus["mig"] = layouts
    else:
        gpus.pop("mig", None)
    return {**group, "gpus": gpus}
