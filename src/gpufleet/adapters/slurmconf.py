"""A Slurm site's configuration in gpufleet's terms: what ``gpufleet import slurm`` writes.

``import_slurm`` reads ``slurm.conf`` (and, when given, ``gres.conf`` and the
``-P`` output of ``sacctmgr show qos`` and ``sacctmgr show assoc``) and
returns two TOML documents as dictionaries: a cluster file (``[[nodes]]``,
see ``adapters.inventory``) and a policy file with a ``[sim]`` table (see
``policies.config`` and ``sim.profile``). ``docs/slurm.md`` holds the
mapping, key by key.

Nothing is dropped silently: every setting, node or partition attribute and
sacctmgr column that has no counterpart is named in ``Imported.unmodelled``.
Malformed input raises ``SlurmImportError`` naming the file, the line and the
key.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gpufleet.adapters.inventory import expand_hostlist
from gpufleet.adapters.textfile import UnreadableText, read_text
from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.model import InvalidSpec
from gpufleet.sim.traces.sacct import slurm_seconds

DAY_S = 86_400
DEFAULT_GPU_MODEL = "H100-80GB"
"""The catalog model of GPUs whose GRES names no type, unless ``--gpu-model gpu=MODEL``."""

# GRES type tokens: the model family -> {memory in GB: catalog model}; the first is
# the family's model when the type names no memory.
_FAMILIES: dict[str, dict[int, str]] = {
    "h200": {141: "H200-141GB"},
    "h100": {80: "H100-80GB"},
    "a100": {80: "A100-80GB", 40: "A100-40GB"},
    "l40s": {48: "L40S"},
    "l4": {24: "L4"},
    "a10": {24: "A10"},
    "t4": {16: "T4"},
    "v100": {32: "V100M32", 16: "V100M16"},
    "p100": {16: "P100"},
}
# Tokens that say nothing of the model's compute or memory (vendor, form factor).
_NEUTRAL_TOKENS = frozenset(
    ("nvidia", "tesla", "gpu", "pcie", "sxm", "sxm2", "sxm4", "sxm5", "hbm2", "hbm2e", "hbm3")
)
_MEMORY_TOKEN = re.compile(r"(\d+)(?:g|gb)?")
_MIG_TYPE = re.compile(r"\dg\.\d+gb")

_PRIORITY_WEIGHTS = {
    "priorityweightage": "weight_age",
    "priorityweightfairshare": "weight_fairshare",
    "priorityweightpartition": "weight_partition",
    "priorityweightqos": "weight_qos",
    "priorityweightassoc": "weight_assoc",
}
# SelectTypeParameters that only say which resources are consumable, as gpufleet
# counts them anyway (CPUs, memory).
_CONSUMABLE = frozenset(
    f"CR_{unit}{memory}" for unit in ("CPU", "CORE", "SOCKET") for memory in ("", "_MEMORY")
) | {"CR_MEMORY"}
_CPU_FACTORS = ("Boards", "Sockets", "CoresPerSocket", "ThreadsPerCore")
# PreemptType -> what may preempt (policy.toml's preemption.by).
_PREEMPT_BY = {"preempt/qos": ["qos"], "preempt/partition_prio": ["partition_tier"]}
_SCHEDULER_KEYS = (
    "bf_interval",
    "bf_window",
    "bf_resolution",
    "bf_max_job_test",
    "bf_continue",
    "bf_window_linear",
    "default_queue_depth",
)


class SlurmImportError(ValueError):
    """Input that cannot be translated; the message names the file, line and key."""

    def __init__(self, path: Path, line: int | None, key: str | None, reason: str) -> None:
        where = f"{path}, line {line}" if line else str(path)
        what = f"{key}: " if key else ""
        super().__init__(f"{where}: {what}{reason}".replace("\n", " "))


@dataclass
class Imported:
    """The two documents, and the names of what they could not say."""

    cluster: dict[str, Any]
    policy: dict[str, Any]
    unmodelled: list[str] = field(default_factory=list)


@dataclass
class _Line:
    path: Path
    number: int
    pairs: list[tuple[str, str]]

    @property
    def head(self) -> str:
        return self.pairs[0][0]


# Slurm's parser: a key, '=' with optional spaces around it, a quoted or unquoted value.
_PAIR = re.compile(r'\s*([A-Za-z0-9_.]+)\s*=\s*(?:"([^"]*)"|(\S*))(?=\s|$)')
_INCLUDE = re.compile(r"include\s+(.+)", re.IGNORECASE)


def _read(path: Path) -> str:
    try:
        return read_text(path)
    except UnreadableText as e:
        raise SlurmImportError(path, e.line, None, e.reason) from None


def _physical(raw: str) -> tuple[str, bool]:
    """A line without its comment and with escapes resolved, as Slurm reads it;
    and whether a trailing backslash continues it on the next line."""
    out: list[str] = []
    i = 0
    while i < len(raw) and raw[i] != "#":
        if raw[i] == "\\":
            if not raw[i + 1 :].strip():
                return "".join(out), True
            i += 1  # \# is a '#', \\ a backslash
        out.append(raw[i])
        i += 1
    return "".join(out), False


def _logical(text: str) -> Iterator[tuple[int, str]]:
    """Each line that is not blank, with the number of its first physical line."""
    body, first = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        part, more = _physical(raw)
        first = first or number
        body += part
        if not more:
            if body.strip():
                yield first, body.strip()
            body, first = "", 0
    if body.strip():
        yield first, body.strip()


def _lines(path: Path, top: Path | None = None, chain: tuple[Path, ...] = ()) -> Iterator[_Line]:
    """The ``Key=Value`` pairs of each line of a Slurm configuration file, the
    files it includes read in place (relative names from ``top``'s directory)."""
    chain = (*chain, path.resolve())
    for number, line in _logical(_read(path)):
        include = _INCLUDE.fullmatch(line)
        if include:
            yield from _include(path, number, include[1].strip(), top or path, chain)
        else:
            yield _Line(path, number, _pairs(path, number, line))


def _include(
    path: Path, number: int, name: str, top: Path, chain: tuple[Path, ...]
) -> Iterator[_Line]:
    target = top.parent / name  # an absolute name stays itself
    if target.resolve() in chain:
        loop = " -> ".join(str(p) for p in (*chain, target.resolve()))
        raise SlurmImportError(path, number, "Include", f"includes itself: {loop}")
    if not target.is_file():
        raise SlurmImportError(path, number, "Include", f"{target}: no such file")
    yield from _lines(target, top, chain)


def _pairs(path: Path, number: int, line: str) -> list[tuple[str, str]]:
    pairs, pos = [], 0
    while pos < len(line):
        match = _PAIR.match(line, pos)
        if match is None:
            raise SlurmImportError(path, number, line[pos:].split()[0], "expected Key=Value")
        pairs.append((match[1], match[2] if match[2] is not None else match[3]))
        pos = match.end()
        while pos < len(line) and line[pos].isspace():
            pos += 1
    return pairs


def _minutes(path: Path, line: int | None, key: str, text: str) -> int:
    """Seconds of a Slurm time in minutes or ``[D-]HH:MM:SS``; 0 for UNLIMITED/INFINITE."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return 0
    try:
        return slurm_seconds(text)
    except ValueError:
        raise SlurmImportError(
            path, line, key, f"{text!r} is not a Slurm time (minutes or [D-]HH:MM:SS)"
        ) from None


def _integer(path: Path, line: int | None, key: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SlurmImportError(path, line, key, f"{text!r} is not a whole number") from None
    if value < 0:
        raise SlurmImportError(path, line, key, f"must be 0 or more, got {value}")
    return value


def _number(path: Path, line: int | None, key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SlurmImportError(path, line, key, f"{text!r} is not a number") from None
    if not value >= 0:
        raise SlurmImportError(path, line, key, f"must be 0 or more, got {text}")
    return value


def _hosts(path: Path, line: int, key: str, text: str) -> list[str]:
    try:
        return expand_hostlist(text)
    except ValueError as e:
        raise SlurmImportError(path, line, key, str(e)) from None


def gpu_model(gres_type: str, models: Mapping[str, str]) -> str | None:
    """The catalog model of a GRES GPU type: ``models`` first, then a known family
    (``a100``) of the memory the type names, if it names one (``a100-sxm4-40gb``).

    None when a token is neither a family, a memory size, nor a vendor or form
    factor word: ``h100nvl`` or ``l40`` is another card, not to be guessed.
    """
    if gres_type in models:
        return models[gres_type]
    family, memory = None, None
    for token in re.split(r"[^a-z0-9]+", gres_type.lower()):
        size = _MEMORY_TOKEN.fullmatch(token)
        if token in _FAMILIES and family is None:
            family = token
        elif size and memory is None:
            memory = int(size[1])
        elif token and token not in _NEUTRAL_TOKENS:
            return None
    if family is None:
        return None
    sizes = _FAMILIES[family]
    return next(iter(sizes.values())) if memory is None else sizes.get(memory)


class _Setting(NamedTuple):
    path: Path
    line: int
    key: str
    value: str


@dataclass
class _Entity:
    """A NodeName, NodeSet or PartitionName line, ``DEFAULT`` lines merged in."""

    path: Path
    line: int
    name: str
    attrs: dict[str, tuple[str, str]]  # lower key -> (Key, value)

    def take(self, key: str) -> str | None:
        item = self.attrs.pop(key, None)
        return None if item is None else item[1]

    def fail(self, key: str, reason: str) -> SlurmImportError:
        return SlurmImportError(self.path, self.line, key, reason)


@dataclass
class _Gres:
    """One node line's GPUs: count and types ('' when the GRES names none)."""

    count: int = 0
    types: list[str] = field(default_factory=list)


class _Translator:
    def __init__(self, conf: Path, models: Mapping[str, str]) -> None:
        self.conf = conf
        self.models = dict(models)
        self.unmodelled: set[str] = set()
        self.settings: dict[str, _Setting] = {}  # by lower-case key
        self.entities: dict[str, list[_Entity]] = {
            "nodename": [],
            "nodeset": [],
            "partitionname": [],
        }
        self.gpu_billing: dict[str, float] = {}  # catalog model ("*": any) -> weight
        self.bf_interval = 30  # Slurm's default
        self.queue_depth = 100  # default_queue_depth's default
        self.calc_s: int | None = None
        self.preempt_mode = "requeue"  # the cluster's PreemptMode, for QoS saying "cluster"

    # -- slurm.conf --------------------------------------------------------------
    def read_conf(self) -> None:
        defaults: dict[str, dict[str, tuple[str, str]]] = {k: {} for k in self.entities}
        for line in _lines(self.conf):
            head = line.head.lower()
            if head in defaults:
                name = line.pairs[0][1]
                attrs = {k.lower(): (k, v) for k, v in line.pairs[1:]}
                if name.upper() == "DEFAULT":
                    defaults[head].update(attrs)
                    continue
                if not name or "=" in name:  # "PartitionName= Nodes=x": the name is missing
                    raise SlurmImportError(line.path, line.number, line.head, "needs a name")
                entity = _Entity(line.path, line.number, name, {**defaults[head], **attrs})
                self.entities[head].append(entity)
                continue
            for key, value in line.pairs:
                self.settings[key.lower()] = _Setting(line.path, line.number, key, value)

    def setting(self, key: str) -> _Setting | None:
        return self.settings.pop(key.lower(), None)

    def note(self, name: str) -> None:
        self.unmodelled.add(name)

    # -- nodes -------------------------------------------------------------------
    def nodes(
        self, gres_types: Mapping[str, list[str]]
    ) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
        """The ``[[nodes]]`` groups, and each node's features by name, in order."""
        groups: list[dict[str, Any]] = []
        features: dict[str, list[str]] = {}
        seen: dict[str, int] = {}  # node -> its NodeName line
        for e in self.entities["nodename"]:
            hosts = _hosts(e.path, e.line, "NodeName", e.name)
            for host in hosts:
                if host in seen:
                    raise e.fail("NodeName", f"{host!r} is also defined on line {seen[host]}")
                seen[host] = e.line
            group: dict[str, Any] = {"names": e.name}
            cpus = e.take("cpus") or e.take("procs")
            sizes = {k: e.take(k.lower()) for k in _CPU_FACTORS}
            if cpus is None and any(sizes[k] for k in _CPU_FACTORS[1:]):
                cpus = str(
                    math.prod(_integer(e.path, e.line, k, n or "1") for k, n in sizes.items())
                )
            group["cpu_milli"] = _integer(e.path, e.line, "CPUs", cpus or "1") * 1000
            group["memory_mib"] = max(
                1, _integer(e.path, e.line, "RealMemory", e.take("realmemory") or "1")
            )
            labels = [f for f in (e.take("feature") or e.take("features") or "").split(",") if f]
            features.update(dict.fromkeys(hosts, labels))
            if labels:
                group["labels"] = dict.fromkeys(labels, "")
            gres = self._gres(e, e.take("gres") or "")
            for key, _ in e.attrs.values():
                self.note(f"NodeName.{key}")
            if not gres.count:
                groups.append(group)
                continue
            # gres.conf may type each host differently: one group per GPU type.
            by_type: dict[str, list[str]] = {}
            mixed: dict[tuple[str, ...], list[str]] = {}
            for host in hosts:
                types = gres.types or gres_types.get(host) or [""]
                if len(types) > 1:
                    mixed.setdefault(tuple(types), []).append(host)
                by_type.setdefault(types[0], []).append(host)
            for several, members in mixed.items():
                self.note(
                    f"{','.join(members)}: GPU types {' and '.join(several)} "
                    f"(one model per node: all {gres.count} GPUs taken as {several[0]})"
                )
            for gres_type, members in by_type.items():
                names = e.name if len(by_type) == 1 else ",".join(members)
                gpus = {"model": self._model(e, gres_type), "count": gres.count}
                groups.append({**group, "names": names, "gpus": gpus})
        return groups, features

    def _gres(self, e: _Entity, text: str) -> _Gres:
        out = _Gres()
        for entry in (x for x in text.split(",") if x):
            parts = entry.split("(", 1)[0].split(":")
            if parts[0] != "gpu":
                self.note(f"NodeName.Gres={parts[0]}")
                continue
            count = parts[-1] if len(parts) > 1 else "1"
            gres_type = parts[1] if len(parts) == 3 else ""
            if len(parts) > 3 or (len(parts) == 2 and not count.isdigit()):
                raise e.fail("Gres", f"{entry!r} is not gpu[:TYPE]:COUNT")
            out.count += _integer(e.path, e.line, "Gres", count)
            if gres_type and gres_type not in out.types:
                out.types.append(gres_type)
        return out

    def _model(self, e: _Entity, gres_type: str) -> str:
        if _MIG_TYPE.search(gres_type.lower()):
            raise e.fail(
                "Gres",
                f"GPU type {gres_type!r} is a MIG slice, and gpufleet imports whole GPUs: "
                "give the node's GPUs whole (gpu:TYPE:N) and their MIG layout in "
                "cluster.toml's gpus.mig (see docs/cluster-file.md)",
            )
        model = gpu_model(gres_type or "gpu", self.models)
        if model is None and not gres_type:
            model = DEFAULT_GPU_MODEL
            self.note(f"GPU model of untyped gres gpu (taken as {DEFAULT_GPU_MODEL})")
        if model is None:
            raise e.fail(
                "Gres",
                f"GPU type {gres_type!r} names no known model: map it with "
                f"--gpu-model {gres_type}=MODEL",
            )
        try:
            gpu_memory_mib(model, "--gpu-model")
        except InvalidSpec as err:
            raise e.fail("Gres", str(err)) from None
        return model

    # -- partitions ----------------------------------------------------------------
    def nodesets(self, features: Mapping[str, list[str]]) -> dict[str, list[str]]:
        """Each NodeSet's nodes: those of its ``Feature=``, or its ``Nodes=``."""
        out: dict[str, list[str]] = {}
        for e in self.entities["nodeset"]:
            feature, nodes = e.take("feature"), e.take("nodes")
            if (feature is None) == (nodes is None):
                raise e.fail("NodeSet", "give one of Feature= or Nodes=")
            if feature is not None:
                out[e.name] = [n for n, labels in features.items() if feature in labels]
            else:
                out[e.name] = self._node_list(e, "Nodes", nodes or "", features, {})
            for key, _ in e.attrs.values():
                self.note(f"NodeSet.{key}")
        return out

    @staticmethod
    def _node_list(
        e: _Entity,
        key: str,
        text: str,
        known: Mapping[str, object],
        nodesets: Mapping[str, list[str]],
    ) -> list[str]:
        """The nodes a ``Nodes=`` names: hostlists, NodeSet names or ``ALL``."""
        out: dict[str, None] = {}
        for name in _hosts(e.path, e.line, key, text):
            if name.upper() == "ALL":
                out.update(dict.fromkeys(known))
            elif name in nodesets:
                out.update(dict.fromkeys(nodesets[name]))
            elif name in known:
                out[name] = None
            else:
                raise e.fail(key, f"unknown node {name!r} (on no NodeName line, and no NodeSet)")
        return list(out)

    def partitions(self, features: Mapping[str, list[str]]) -> list[dict[str, Any]]:
        nodesets = self.nodesets(features)
        out: list[dict[str, Any]] = []
        lines: dict[str, int] = {}
        for e in self.entities["partitionname"]:
            if e.name in lines:
                raise e.fail("PartitionName", f"{e.name!r} is also defined on line {lines[e.name]}")
            lines[e.name] = e.line
            p: dict[str, Any] = {"name": e.name}
            nodes = e.take("nodes")
            if nodes:
                p["nodes"] = self._node_list(e, "Nodes", nodes, features, nodesets)
            for key, field_ in (("MaxTime", "max_time_s"), ("DefaultTime", "default_time_s")):
                value = e.take(key.lower())
                if value is not None:
                    p[field_] = _minutes(e.path, e.line, key, value)
            if "max_time_s" in p:  # Slurm's default time is the partition's MaxTime
                p.setdefault("default_time_s", p["max_time_s"])
            for key, field_ in (
                ("PriorityTier", "priority_tier"),
                ("PriorityJobFactor", "priority_job_factor"),
            ):
                value = e.take(key.lower())
                if value is not None:
                    p[field_] = _integer(e.path, e.line, key, value)
            mode = e.take("preemptmode")
            if mode is not None:
                p["preemptible"] = mode.upper() != "OFF"
                if mode.upper() not in ("OFF", "REQUEUE", "CANCEL"):
                    self.note(f"PartitionName.PreemptMode={mode}")
            for key, field_ in (("allowaccounts", "allowed_accounts"), ("allowqos", "allowed_qos")):
                value = e.take(key)
                if value and value.upper() != "ALL":
                    p[field_] = value.split(",")
            default = (e.take("default") or "NO").upper() == "YES"
            billing = e.take("tresbillingweights")
            if billing:
                self.billing(e, billing)
            for key, _ in e.attrs.values():
                self.note(f"PartitionName.{key}")
            out.insert(0 if default else len(out), p)  # the first is the default
        return out

    def billing(self, e: _Entity, text: str) -> None:
        """TRESBillingWeights' GPU entries as per-model billing weights."""
        weights = self.gpu_billing
        for entry in text.split(","):
            key, _, value = entry.partition("=")
            lowered = key.lower()
            if lowered.startswith("gres/gpu:"):
                model = gpu_model(key.split(":", 1)[1], self.models)
                if model is not None:
                    weights[model] = _number(e.path, e.line, "TRESBillingWeights", value)
                    continue
            elif lowered == "gres/gpu":
                weights["*"] = _number(e.path, e.line, "TRESBillingWeights", value)
                continue
            self.note(f"TRESBillingWeights={key}")

    # -- priority, scheduling, preemption -------------------------------------------
    def ordering(self) -> dict[str, Any]:
        kind = self.setting("PriorityType")
        if kind is None or kind.value != "priority/multifactor":
            return {"plugin": "fifo"}
        weights: dict[str, Any] = dict.fromkeys(_PRIORITY_WEIGHTS.values(), 0)
        weights["weight_job_size"] = 0
        for key, name in _PRIORITY_WEIGHTS.items():
            item = self.setting(key)
            if item is not None:
                weights[name] = _integer(*item)
        job_size = self.setting("PriorityWeightJobSize")
        tres = self.setting("PriorityWeightTRES")
        gpu_weight = 0
        if tres is not None:
            for entry in tres.value.split(","):
                key, _, value = entry.partition("=")
                if key.lower() == "gres/gpu":
                    gpu_weight = _integer(tres.path, tres.line, tres.key, value)
                else:
                    self.note(f"PriorityWeightTRES={key}")
        favor = self.setting("PriorityFavorSmall")
        favor_small = favor is not None and favor.value.upper() == "YES"
        if gpu_weight:
            # gpufleet's job size factor counts GPUs: the GPU TRES weight is that factor.
            weights["weight_job_size"] = gpu_weight
            if job_size is not None and job_size.value != "0":
                self.note("PriorityWeightJobSize (with PriorityWeightTRES=GRES/gpu)")
            if favor_small:
                self.note("PriorityFavorSmall (with PriorityWeightTRES=GRES/gpu)")
        else:
            if job_size is not None:
                weights["weight_job_size"] = _integer(*job_size)
            weights["favor_small"] = favor_small
        age = self.setting("PriorityMaxAge")
        weights["max_age_s"] = 7 * DAY_S
        if age is not None:
            weights["max_age_s"] = _minutes(*age)
            if not weights["max_age_s"]:
                raise SlurmImportError(age.path, age.line, age.key, "must be more than 0")
        weights["calc_period_s"] = self.calc_period()
        weights["fairshare"] = self.fairshare()
        return {"plugin": "multifactor", "multifactor": weights}

    def fairshare(self) -> dict[str, Any]:
        fs: dict[str, Any] = {"tied_accounts": "in_turn"}  # what Slurm's code does
        half = self.setting("PriorityDecayHalfLife")
        fs["half_life_s"] = 7 * DAY_S if half is None else _minutes(*half)
        damp = self.setting("FairShareDampeningFactor")
        if damp is not None:
            fs["dampening_factor"] = max(1.0, _number(*damp))
        flags = self.setting("PriorityFlags")
        for flag in flags.value.split(",") if flags else []:
            if flag.upper() == "NO_FAIR_TREE":
                fs["algorithm"] = "classic"
            elif flag.upper() != "FAIR_TREE":
                self.note(f"PriorityFlags={flag}")
        return fs

    def node_choice(self) -> str:
        """How Slurm picks a job's nodes: ``"consecutive"`` (cons_tres and cons_res
        without a topology plugin or least-loaded nodes: ``core.consecutive``), else
        ``"best-fit"`` with the setting named as not modelled."""
        kind = self.setting("SelectType")
        params = self.setting("SelectTypeParameters")
        topology = self.setting("TopologyPlugin")
        choice = "consecutive"
        if kind is not None and kind.value not in ("select/cons_tres", "select/cons_res"):
            self.note(f"SelectType={kind.value}")
            choice = "best-fit"
        for flag in params.value.split(",") if params is not None else ():
            if flag.upper() not in _CONSUMABLE:
                self.note(f"SelectTypeParameters={flag}")
                choice = "best-fit" if flag.upper() == "CR_LLN" else choice
        if topology is not None and topology.value not in ("topology/none", "topology/default"):
            self.note(f"TopologyPlugin={topology.value}")
            choice = "best-fit"
        return choice

    def backfill(self, will_run_nodes: str) -> dict[str, Any] | None:
        """The ``[backfill]`` table; ``will_run_nodes``: ``node_choice``'s answer."""
        kind = self.setting("SchedulerType")
        params = self.setting("SchedulerParameters")
        values: dict[str, str] = {}
        for entry in params.value.split(",") if params else []:
            key, _, value = entry.partition("=")
            if key.lower() in _SCHEDULER_KEYS:  # Slurm matches them in any case
                values[key.lower()] = value
            elif key:
                self.note(f"SchedulerParameters={key}")

        def number(key: str, default: str, least: int = 0) -> int:
            where: tuple[Path, int | None] = (
                (params.path, params.line) if params else (self.conf, None)
            )
            value = _integer(*where, key, values.get(key, default))
            if value < least:
                raise SlurmImportError(*where, key, f"must be {least} or more, got {value}")
            return value

        # The main scheduler's depth, Slurm's default 100 included: it bounds every
        # main pass, with or without backfill.
        self.queue_depth = number("default_queue_depth", "100", 1)
        if kind is not None and kind.value != "sched/backfill":
            self.note(f"SchedulerType={kind.value} (no backfill)")
            return None

        # Slurm's backfill reserves every job it tests: conservative backfill.
        bf: dict[str, Any] = {"mode": "conservative"}
        if "bf_window" in values:
            bf["window_s"] = 60 * number("bf_window", "", 1)
        bf["resolution_s"] = number("bf_resolution", "60") or 1
        if "bf_max_job_test" in values:
            bf["max_job_test"] = number("bf_max_job_test", "", 1)
        self.bf_interval = number("bf_interval", "30")
        # Slurm's structure: a backfill pass every bf_interval (its backfill thread),
        # the main scheduler's passes on events between them.
        bf["interval_s"] = self.bf_interval
        # Starts estimated as cons_tres's will-run test does: running jobs' ends in
        # batches 30 s wide, then doubling, or growing by bf_window_linear.
        bf["will_run_window_s"] = 30
        bf["will_run_nodes"] = will_run_nodes
        if "bf_window_linear" in values:
            bf["will_run_linear_s"] = number("bf_window_linear", "")
        return bf

    def preemption(self) -> dict[str, Any]:
        """The ``[preemption]`` table: what may preempt, as PreemptType says. A
        ``PreemptMode=CANCEL`` is kept for the QoS that follow the cluster's mode."""
        kind = self.setting("PreemptType")
        mode = self.setting("PreemptMode")
        by = _PREEMPT_BY.get(kind.value) if kind else None
        if kind is not None and by is None and kind.value != "preempt/none":
            self.note(f"PreemptType={kind.value}")
        modes = {m.upper() for m in mode.value.split(",")} if mode else set()
        for m in modes - {"OFF", "REQUEUE", "CANCEL"}:
            self.note(f"PreemptMode={m}")
        if "CANCEL" in modes:
            self.preempt_mode = "cancel"
        if by is None or "OFF" in modes:
            return {"enabled": False}
        return {"enabled": True, "by": by}

    def calc_period(self) -> int:
        """PriorityCalcPeriod in seconds (read once: age and fairshare both follow it)."""
        if self.calc_s is None:
            calc = self.setting("PriorityCalcPeriod")
            self.calc_s = 300 if calc is None else _minutes(*calc)
        return self.calc_s

    def sim(self) -> dict[str, Any]:
        return {"interval_s": self.bf_interval, "priority_calc_s": self.calc_period()}


# -- gres.conf -------------------------------------------------------------------


def read_gres(path: Path, nodes: Sequence[str]) -> tuple[dict[str, list[str]], set[str]]:
    """Per node, the GPU types gres.conf gives it, in order; and the keys not modelled."""
    types: dict[str, list[str]] = {}
    unmodelled: set[str] = set()
    for line in _lines(path):
        attrs = {k.lower(): (k, v) for k, v in line.pairs}
        if "name" not in attrs:
            unmodelled.update(f"gres.conf {k}" for k, _ in attrs.values())
            continue
        if attrs["name"][1] != "gpu":
            unmodelled.add(f"gres.conf Name={attrs['name'][1]}")
            continue
        hosts = (
            _hosts(path, line.number, "NodeName", attrs["nodename"][1])
            if "nodename" in attrs
            else list(nodes)
        )
        if "type" in attrs:
            for host in hosts:
                known = types.setdefault(host, [])
                if attrs["type"][1] not in known:
                    known.append(attrs["type"][1])
        unmodelled.update(
            f"gres.conf {k}"
            for key, (k, _) in attrs.items()
            if key not in ("nodename", "name", "type", "file", "count")
        )
    return types, unmodelled


# -- sacctmgr -P -------------------------------------------------------------------


def _table(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and the (line, row) pairs of sacctmgr's ``-P`` (or ``-p``) output."""
    reader = csv.reader(io.StringIO(_read(path)), delimiter="|", quoting=csv.QUOTE_NONE)
    header = next(reader, None)
    if not header:
        raise SlurmImportError(path, 1, None, "empty: expected sacctmgr -P output with a header")
    if header[-1] == "":  # -p's trailing separator
        header = header[:-1]
    rows = []
    for number, row in enumerate(reader, 2):
        if not row:
            continue
        if row[-1] == "" and len(row) == len(header) + 1:
            row = row[:-1]
        if len(row) != len(header):
            raise SlurmImportError(
                path, number, None, f"expected {len(header)} fields, got {len(row)}"
            )
        rows.append((number, dict(zip(header, row, strict=True))))
    return header, rows


def _gpus_of(path: Path, line: int, key: str, text: str) -> int | None:
    """The GPU count in a TRES list (``gres/gpu=8``), None if it has none."""
    for entry in text.split(","):
        name, _, value = entry.partition("=")
        if name.lower() == "gres/gpu":
            return _integer(path, line, key, value)
    return None


_QOS_TIMES = {
    "GraceTime": "grace_s",
    "PreemptExemptTime": "preempt_exempt_s",
    "MaxWall": "max_wall_s",
}
_QOS_GPUS = {
    "GrpTRES": "group_gpus",
    "MaxTRESPU": "max_gpus_per_user",
    "MaxTRESPA": "max_gpus_per_account",
}


def read_qos(path: Path, cluster_mode: str) -> tuple[list[dict[str, Any]], set[str]]:
    """``sacctmgr show qos -P``: one ``[[qos]]`` each; and the columns not modelled.

    A QoS whose PreemptMode is ``cluster`` (or empty) takes ``cluster_mode``.
    """
    out: list[dict[str, Any]] = []
    unmodelled: set[str] = set()
    rows: dict[str, int] = {}  # name -> line
    preempts: list[tuple[int, str, str]] = []  # (line, QoS, the QoS it preempts)
    for number, row in _table(path)[1]:
        name = row.get("Name", "")
        if not name:
            raise SlurmImportError(path, number, "Name", "a QoS needs a name")
        if name in rows:
            raise SlurmImportError(path, number, "Name", f"{name!r} is also on line {rows[name]}")
        rows[name] = number
        q: dict[str, Any] = {"name": name}
        if cluster_mode != "requeue" and row.get("PreemptMode", "cluster") in ("", "cluster"):
            q["preempt_mode"] = cluster_mode
        for column, value in row.items():
            if not value or column == "Name":
                continue
            if column == "Priority":
                q["priority"] = _integer(path, number, column, value)
            elif column == "Preempt":
                q["preempt"] = [v for v in value.split(",") if v]
                preempts.extend((number, name, v) for v in q["preempt"])
            elif column == "PreemptMode":
                if value.lower() in ("requeue", "cancel"):
                    q["preempt_mode"] = value.lower()
                elif value.lower() != "cluster":
                    unmodelled.add(f"qos PreemptMode={value}")
            elif column == "UsageFactor":
                q["usage_factor"] = _number(path, number, column, value)
            elif column == "MaxJobsPU":
                q["max_jobs_per_user"] = _integer(path, number, column, value)
            elif column in _QOS_TIMES:
                q[_QOS_TIMES[column]] = _minutes(path, number, column, value)
            elif column in _QOS_GPUS:
                gpus = _gpus_of(path, number, column, value)
                if gpus is not None:
                    q[_QOS_GPUS[column]] = gpus
                if any(not e.lower().startswith("gres/gpu=") for e in value.split(",")):
                    unmodelled.add(f"qos {column} (other than gres/gpu)")
            elif column not in ("Id", "Description"):
                unmodelled.add(f"qos {column}")
        out.append(q)
    for number, name, other in preempts:
        if other == name:
            raise SlurmImportError(path, number, "Preempt", f"QoS {name!r} cannot preempt itself")
        if other not in rows:
            raise SlurmImportError(path, number, "Preempt", f"unknown QoS {other!r}")
    return out, unmodelled


def read_assoc(
    path: Path, cluster: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], set[str]]:
    """``sacctmgr show assoc -P``: ``[[accounts]]`` and ``[[users]]``; and what is left out.

    Accounts need the ``ParentName`` column (sacctmgr heads it ``Par Name``);
    without it every account hangs off the root. Rows of several clusters
    need ``cluster``, the one to read.
    """
    accounts: dict[str, dict[str, Any]] = {}
    users: dict[tuple[str, str], dict[str, Any]] = {}
    lines: dict[str, int] = {}  # account or user row -> its line
    unmodelled: set[str] = set()
    kept = {
        "Cluster",
        "Account",
        "User",
        "Partition",
        "Par Name",
        "ParentName",
        "Share",
        "Fairshare",
        "Priority",
    }
    header, rows = _table(path)
    clusters = sorted({row.get("Cluster", "") for _, row in rows} - {""})
    if cluster is not None and cluster not in clusters:
        known = ", ".join(clusters) or "none"
        raise SlurmImportError(path, None, "Cluster", f"no rows of {cluster!r} (clusters: {known})")
    if cluster is None and len(clusters) > 1:
        raise SlurmImportError(
            path,
            None,
            "Cluster",
            f"rows of several clusters ({', '.join(clusters)}): choose one with --cluster NAME",
        )
    for number, row in rows:
        if cluster is not None and row.get("Cluster") != cluster:
            continue
        account, user = row.get("Account", ""), row.get("User", "")
        if not account:
            raise SlurmImportError(path, number, "Account", "an association needs an account")
        if row.get("Partition"):
            unmodelled.add("assoc Partition (per-partition associations merged)")
        share_text = row.get("Share", row.get("Fairshare", "1")) or "1"
        shares: float | str = (
            "parent"
            if share_text.lower() == "parent"
            else _number(path, number, "Share", share_text)
        )
        if shares == 0:
            raise SlurmImportError(path, number, "Share", "must be more than 0 (or parent)")
        entry: dict[str, Any] = {"shares": shares}
        if row.get("Priority"):
            entry["priority"] = _integer(path, number, "Priority", row["Priority"])
        unmodelled.update(f"assoc {c}" for c, v in row.items() if v and c not in kept)
        if account == "root" and user in ("", "root"):
            continue  # the implicit top, and root's own user
        if user:
            users.setdefault((account, user), {"name": user, "account": account, **entry})
            lines.setdefault(f"{account}/{user}", number)
        else:
            if shares == "parent":
                raise SlurmImportError(
                    path,
                    number,
                    "Share",
                    "an account taking its parent's fairshare is not modelled",
                )
            parent = row.get("Par Name", row.get("ParentName", "root")) or "root"
            accounts.setdefault(account, {"name": account, "parent": parent, **entry})
            lines.setdefault(account, number)
    _check_tree(path, accounts, users, lines)
    if "Par Name" not in header and "ParentName" not in header and accounts:
        unmodelled.add("account parents (no Par Name column: every account under root)")
    return list(accounts.values()), list(users.values()), unmodelled


def _check_tree(
    path: Path,
    accounts: Mapping[str, dict[str, Any]],
    users: Mapping[tuple[str, str], dict[str, Any]],
    lines: Mapping[str, int],
) -> None:
    """Every parent and every user's account is an account row, and no parent loops."""
    for (account, user), _ in users.items():
        if account != "root" and account not in accounts:
            raise SlurmImportError(
                path, lines[f"{account}/{user}"], "Account", f"no row defines account {account!r}"
            )
    for name in accounts:
        chain = [name]
        while (parent := accounts[chain[-1]]["parent"]) != "root":
            if parent not in accounts:
                raise SlurmImportError(
                    path, lines[chain[-1]], "Par Name", f"unknown account {parent!r}"
                )
            if parent in chain:
                loop = " -> ".join([*chain[chain.index(parent) :], parent])
                raise SlurmImportError(path, lines[chain[-1]], "Par Name", f"cycle {loop}")
            chain.append(parent)


# -- the whole import -------------------------------------------------------------------


def import_slurm(
    conf: Path,
    *,
    gres: Path | None = None,
    qos: Path | None = None,
    assoc: Path | None = None,
    gpu_models: Mapping[str, str] | None = None,
    cluster: str | None = None,
) -> Imported:
    """Translate a site's files; see the module docstring. ``cluster``: the
    sacctmgr cluster to read, when ``assoc`` holds several."""
    t = _Translator(conf, gpu_models or {})
    t.read_conf()
    unmodelled: set[str] = set()
    gres_types: dict[str, list[str]] = {}
    if gres is not None:
        hosts = [
            h for e in t.entities["nodename"] for h in _hosts(e.path, e.line, "NodeName", e.name)
        ]
        gres_types, more = read_gres(gres, hosts)
        unmodelled |= more
    groups, features = t.nodes(gres_types)
    if not groups:
        raise SlurmImportError(conf, None, "NodeName", "no node is defined")
    nodes_rule = t.node_choice()
    placement = "cons-tres" if nodes_rule == "consecutive" else "best-fit"
    policy: dict[str, Any] = {"ordering": t.ordering(), "placement": {"plugin": placement}}
    backfill = t.backfill(nodes_rule)
    if backfill is not None:
        policy["backfill"] = backfill
    policy["ordering"]["queue_depth"] = t.queue_depth
    policy["preemption"] = t.preemption()
    partitions = t.partitions(features)
    if partitions:
        policy["partitions"] = partitions
    if qos is not None:
        table, more = read_qos(qos, t.preempt_mode)
        unmodelled |= more
        if table:
            policy["qos"] = table
    elif t.preempt_mode != "requeue":
        unmodelled.add(f"PreemptMode={t.preempt_mode.upper()} (no --qos: the built-in QoS requeue)")
    if assoc is not None:
        accounts, users, more = read_assoc(assoc, cluster)
        unmodelled |= more
        if accounts:
            policy["accounts"] = accounts
        if users:
            policy["users"] = users
    if t.gpu_billing:
        weights = dict(t.gpu_billing)
        every = weights.pop("*", None)
        if every is not None:
            for group in groups:
                if "gpus" in group:
                    weights.setdefault(group["gpus"]["model"], every)
        fs = policy["ordering"].get("multifactor", {}).get("fairshare")
        if fs is not None:
            fs["gpu_billing_weights"] = weights
    policy["sim"] = t.sim()
    unmodelled |= t.unmodelled
    unmodelled.update(s.key for s in t.settings.values())
    return Imported({"nodes": groups}, policy, sorted(unmodelled, key=str.lower))
