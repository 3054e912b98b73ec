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
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.adapters.inventory import expand_hostlist
from gpufleet.adapters.textfile import UnreadableText, read_text
from gpufleet.core.catalog import gpu_memory_mib
from gpufleet.core.model import InvalidSpec
from gpufleet.sim.traces.sacct import slurm_seconds

DAY_S = 86_400
DEFAULT_GPU_MODEL = "H100-80GB"
"""The catalog model of GPUs whose GRES names no type, unless ``--gpu-model gpu=MODEL``."""

# GRES type (lower case, only letters and digits) -> catalog model, first match wins.
_TYPE_MODELS: tuple[tuple[str, str], ...] = (
    ("h200", "H200-141GB"),
    ("h100", "H100-80GB"),
    ("a10040", "A100-40GB"),
    ("a100", "A100-80GB"),
    ("l40s", "L40S"),
    ("l4", "L4"),
    ("a10", "A10"),
    ("t4", "T4"),
    ("v10016", "V100M16"),
    ("v100", "V100M32"),
    ("p100", "P100"),
)

_ENTITIES = ("NodeName", "PartitionName")
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
    number: int
    pairs: list[tuple[str, str]]

    @property
    def head(self) -> str:
        return self.pairs[0][0]


def _lines(path: Path) -> Iterator[_Line]:
    """The ``Key=Value`` pairs of each line of a Slurm configuration file."""
    try:
        text = read_text(path)
    except UnreadableText as e:
        raise SlurmImportError(path, e.line, None, str(e)) from None
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.split("#", 1)[0].strip()
        if not body:
            continue
        try:
            tokens = shlex.split(body)
        except ValueError as e:
            raise SlurmImportError(path, number, None, f"cannot split the line: {e}") from None
        if tokens[0].lower() == "include":
            yield _Line(number, [("Include", " ".join(tokens[1:]))])
            continue
        pairs = []
        for token in tokens:
            key, eq, value = token.partition("=")
            if not eq or not key:
                raise SlurmImportError(path, number, token, "expected Key=Value")
            pairs.append((key, value))
        yield _Line(number, pairs)


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
    """The catalog model of a GRES GPU type: ``models`` first, then known names."""
    if gres_type in models:
        return models[gres_type]
    key = re.sub(r"[^a-z0-9]", "", gres_type.lower())
    return next((model for prefix, model in _TYPE_MODELS if key.startswith(prefix)), None)


@dataclass
class _Gres:
    """One node line's GPUs: count and type ('' when the GRES names none)."""

    count: int = 0
    type: str = ""


class _Translator:
    def __init__(self, conf: Path, models: Mapping[str, str]) -> None:
        self.conf = conf
        self.models = dict(models)
        self.unmodelled: set[str] = set()
        self.settings: dict[str, tuple[int, str, str]] = {}  # lower key -> (line, Key, value)
        self.node_lines: list[tuple[int, dict[str, str]]] = []
        self.partition_lines: list[tuple[int, dict[str, str]]] = []
        self.gpu_billing: dict[str, float] = {}  # catalog model ("*": any) -> weight
        self.bf_interval = 30  # Slurm's default
        self.calc_s: int | None = None

    # -- slurm.conf --------------------------------------------------------------
    def read_conf(self) -> None:
        defaults: dict[str, dict[str, str]] = {"nodename": {}, "partitionname": {}}
        for line in _lines(self.conf):
            head = line.head.lower()
            if head in defaults:
                name = line.pairs[0][1]
                attrs = {k: v for k, v in line.pairs[1:]}
                if name.upper() == "DEFAULT":
                    defaults[head].update(attrs)
                    continue
                merged = {**defaults[head], **attrs, line.pairs[0][0]: name}
                target = self.node_lines if head == "nodename" else self.partition_lines
                target.append((line.number, merged))
                continue
            for key, value in line.pairs:
                self.settings[key.lower()] = (line.number, key, value)

    def setting(self, key: str) -> tuple[int, str, str] | None:
        return self.settings.pop(key.lower(), None)

    def note(self, name: str) -> None:
        self.unmodelled.add(name)

    # -- nodes -------------------------------------------------------------------
    def nodes(self, gres_types: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[str]]:
        groups: list[dict[str, Any]] = []
        names: list[str] = []
        for number, attrs in self.node_lines:
            attrs = dict(attrs)
            hostlist = attrs.pop(next(k for k in attrs if k.lower() == "nodename"))
            hosts = _hosts(self.conf, number, "NodeName", hostlist)
            names.extend(hosts)
            group: dict[str, Any] = {"names": hostlist}
            lower = {k.lower(): (k, v) for k, v in attrs.items()}

            def take(key: str, lower: dict[str, tuple[str, str]] = lower) -> str | None:
                item = lower.pop(key, None)
                return None if item is None else item[1]

            cpus = take("cpus") or take("procs")
            sockets, cores, threads = (
                take("sockets"),
                take("corespersocket"),
                take("threadspercore"),
            )
            boards = take("boards")
            if cpus is None and (sockets or cores or threads):
                cpus = str(
                    _integer(self.conf, number, "Sockets", sockets or "1")
                    * _integer(self.conf, number, "CoresPerSocket", cores or "1")
                    * _integer(self.conf, number, "ThreadsPerCore", threads or "1")
                    * _integer(self.conf, number, "Boards", boards or "1")
                )
            group["cpu_milli"] = _integer(self.conf, number, "CPUs", cpus or "1") * 1000
            group["memory_mib"] = max(
                1, _integer(self.conf, number, "RealMemory", take("realmemory") or "1")
            )
            features = take("feature") or take("features")
            if features:
                group["labels"] = {f: "" for f in features.split(",") if f}
            gres = self._gres(number, take("gres") or "")
            if gres.count:
                gres_type = gres.type or gres_types.get(hosts[0], "")
                group["gpus"] = {"model": self._model(number, gres_type), "count": gres.count}
            for key, _ in lower.values():
                self.note(f"NodeName.{key}")
            groups.append(group)
        return groups, names

    def _gres(self, number: int, text: str) -> _Gres:
        out = _Gres()
        for entry in (e for e in text.split(",") if e):
            parts = entry.split("(", 1)[0].split(":")
            if parts[0] != "gpu":
                self.note(f"NodeName.Gres={parts[0]}")
                continue
            count = parts[-1] if len(parts) > 1 else "1"
            gres_type = parts[1] if len(parts) == 3 else ""
            if len(parts) > 3 or (len(parts) == 2 and not count.isdigit()):
                raise SlurmImportError(
                    self.conf, number, "Gres", f"{entry!r} is not gpu[:TYPE]:COUNT"
                )
            if out.count and gres_type != out.type:
                self.note("NodeName.Gres (a second GPU type on one node)")
                continue
            out.count += _integer(self.conf, number, "Gres", count)
            out.type = gres_type
        return out

    def _model(self, number: int, gres_type: str) -> str:
        model = gpu_model(gres_type or "gpu", self.models)
        if model is None and not gres_type:
            model = DEFAULT_GPU_MODEL
            self.note(f"GPU model of untyped gres gpu (taken as {DEFAULT_GPU_MODEL})")
        if model is None:
            raise SlurmImportError(
                self.conf,
                number,
                "Gres",
                f"GPU type {gres_type!r} names no known model: map it with "
                f"--gpu-model {gres_type}=MODEL",
            )
        try:
            gpu_memory_mib(model, "--gpu-model")
        except InvalidSpec as e:
            raise SlurmImportError(self.conf, number, "Gres", str(e)) from None
        return model

    # -- partitions ----------------------------------------------------------------
    def partitions(self, all_nodes: Sequence[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for number, attrs in self.partition_lines:
            lower = {k.lower(): (k, v) for k, v in attrs.items()}
            name = lower.pop("partitionname")[1]
            p: dict[str, Any] = {"name": name}

            def take(key: str, lower: dict[str, tuple[str, str]] = lower) -> str | None:
                item = lower.pop(key, None)
                return None if item is None else item[1]

            nodes = take("nodes")
            if nodes and nodes.upper() != "ALL":
                p["nodes"] = _hosts(self.conf, number, "Nodes", nodes)
            elif nodes:
                p["nodes"] = list(all_nodes)
            for key, field_ in (("MaxTime", "max_time_s"), ("DefaultTime", "default_time_s")):
                value = take(key.lower())
                if value is not None:
                    p[field_] = _minutes(self.conf, number, key, value)
            for key, field_ in (
                ("PriorityTier", "priority_tier"),
                ("PriorityJobFactor", "priority_job_factor"),
            ):
                value = take(key.lower())
                if value is not None:
                    p[field_] = _integer(self.conf, number, key, value)
            mode = take("preemptmode")
            if mode is not None:
                p["preemptible"] = mode.upper() != "OFF"
                if mode.upper() not in ("OFF", "REQUEUE", "CANCEL"):
                    self.note(f"PartitionName.PreemptMode={mode}")
            for key, field_ in (("allowaccounts", "allowed_accounts"), ("allowqos", "allowed_qos")):
                value = take(key)
                if value and value.upper() != "ALL":
                    p[field_] = value.split(",")
            default = (take("default") or "NO").upper() == "YES"
            billing = take("tresbillingweights")
            if billing:
                self.billing(number, billing)
            for key, _ in lower.values():
                self.note(f"PartitionName.{key}")
            out.insert(0 if default else len(out), p)  # the first is the default
        return out

    def billing(self, number: int, text: str) -> None:
        """TRESBillingWeights' GPU entries as per-model billing weights."""
        weights = self.gpu_billing
        for entry in text.split(","):
            key, _, value = entry.partition("=")
            lowered = key.lower()
            if lowered.startswith("gres/gpu:"):
                model = gpu_model(key.split(":", 1)[1], self.models)
                if model is not None:
                    weights[model] = _number(self.conf, number, "TRESBillingWeights", value)
                    continue
            elif lowered == "gres/gpu":
                weights["*"] = _number(self.conf, number, "TRESBillingWeights", value)
                continue
            self.note(f"TRESBillingWeights={key}")

    # -- priority, scheduling, preemption -------------------------------------------
    def ordering(self) -> dict[str, Any]:
        kind = self.setting("PriorityType")
        if kind is None or kind[2] != "priority/multifactor":
            return {"plugin": "fifo"}
        weights: dict[str, Any] = dict.fromkeys(_PRIORITY_WEIGHTS.values(), 0)
        weights["weight_job_size"] = 0
        for key, name in _PRIORITY_WEIGHTS.items():
            item = self.setting(key)
            if item is not None:
                weights[name] = _integer(self.conf, item[0], item[1], item[2])
        job_size = self.setting("PriorityWeightJobSize")
        tres = self.setting("PriorityWeightTRES")
        gpu_weight = 0
        if tres is not None:
            for entry in tres[2].split(","):
                key, _, value = entry.partition("=")
                if key.lower() == "gres/gpu":
                    gpu_weight = _integer(self.conf, tres[0], "PriorityWeightTRES", value)
                else:
                    self.note(f"PriorityWeightTRES={key}")
        favor = self.setting("PriorityFavorSmall")
        favor_small = favor is not None and favor[2].upper() == "YES"
        if gpu_weight:
            # gpufleet's job size factor counts GPUs: the GPU TRES weight is that factor.
            weights["weight_job_size"] = gpu_weight
            if job_size is not None and job_size[2] != "0":
                self.note("PriorityWeightJobSize (with PriorityWeightTRES=GRES/gpu)")
            if favor_small:
                self.note("PriorityFavorSmall (with PriorityWeightTRES=GRES/gpu)")
        else:
            if job_size is not None:
                weights["weight_job_size"] = _integer(
                    self.conf, job_size[0], job_size[1], job_size[2]
                )
            weights["favor_small"] = favor_small
        age = self.setting("PriorityMaxAge")
        weights["max_age_s"] = 7 * DAY_S if age is None else _minutes(self.conf, *age)
        if weights["max_age_s"] == 0:
            raise SlurmImportError(
                self.conf, age and age[0], "PriorityMaxAge", "must be more than 0"
            )
        weights["calc_period_s"] = self.calc_period()
        weights["fairshare"] = self.fairshare()
        return {"plugin": "multifactor", "multifactor": weights}

    def fairshare(self) -> dict[str, Any]:
        fs: dict[str, Any] = {"tied_accounts": "in_turn"}  # what Slurm's code does
        half = self.setting("PriorityDecayHalfLife")
        fs["half_life_s"] = 7 * DAY_S if half is None else _minutes(self.conf, *half)
        damp = self.setting("FairShareDampeningFactor")
        if damp is not None:
            fs["dampening_factor"] = max(1.0, _number(self.conf, *damp))
        flags = self.setting("PriorityFlags")
        for flag in flags[2].split(",") if flags else []:
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
        if kind is not None and kind[2] not in ("select/cons_tres", "select/cons_res"):
            self.note(f"SelectType={kind[2]}")
            choice = "best-fit"
        for flag in params[2].split(",") if params is not None else ():
            if flag.upper() not in _CONSUMABLE:
                self.note(f"SelectTypeParameters={flag}")
                choice = "best-fit" if flag.upper() == "CR_LLN" else choice
        if topology is not None and topology[2] not in ("topology/none", "topology/default"):
            self.note(f"TopologyPlugin={topology[2]}")
            choice = "best-fit"
        return choice

    def backfill(self, will_run_nodes: str) -> dict[str, Any] | None:
        """The ``[backfill]`` table; ``will_run_nodes``: ``node_choice``'s answer."""
        kind = self.setting("SchedulerType")
        params = self.setting("SchedulerParameters")
        values: dict[str, str] = {}
        for entry in params[2].split(",") if params else []:
            key, _, value = entry.partition("=")
            if key in _SCHEDULER_KEYS:
                values[key] = value
            elif key:
                self.note(f"SchedulerParameters={key}")
        if kind is not None and kind[2] != "sched/backfill":
            self.note(f"SchedulerType={kind[2]} (no backfill)")
            return None
        line = params[0] if params else 0
        # Slurm's backfill reserves every job it tests: conservative backfill.
        bf: dict[str, Any] = {"mode": "conservative"}
        if "bf_window" in values:
            bf["window_s"] = 60 * _integer(self.conf, line, "bf_window", values["bf_window"])
        bf["resolution_s"] = (
            _integer(self.conf, line, "bf_resolution", values.get("bf_resolution", "60")) or 1
        )
        if "bf_max_job_test" in values:
            bf["max_job_test"] = _integer(
                self.conf, line, "bf_max_job_test", values["bf_max_job_test"]
            )
        self.bf_interval = _integer(self.conf, line, "bf_interval", values.get("bf_interval", "30"))
        # Slurm's structure: a backfill pass every bf_interval (its backfill thread),
        # the main scheduler's passes on events between them.
        bf["interval_s"] = self.bf_interval
        # Starts estimated as cons_tres's will-run test does: running jobs' ends in
        # batches 30 s wide, then doubling, or growing by bf_window_linear.
        bf["will_run_window_s"] = 30
        bf["will_run_nodes"] = will_run_nodes
        if "bf_window_linear" in values:
            bf["will_run_linear_s"] = _integer(
                self.conf, line, "bf_window_linear", values["bf_window_linear"]
            )
        if "default_queue_depth" in values:
            self.note("SchedulerParameters=default_queue_depth")
        return bf

    def preemption(self) -> bool:
        kind = self.setting("PreemptType")
        mode = self.setting("PreemptMode")
        enabled = kind is not None and kind[2] in ("preempt/qos", "preempt/partition_prio")
        if mode is not None:
            modes = {m.upper() for m in mode[2].split(",")}
            if "OFF" in modes:
                enabled = False
            for m in modes - {"OFF", "REQUEUE", "CANCEL"}:
                self.note(f"PreemptMode={m}")
        return enabled

    def calc_period(self) -> int:
        """PriorityCalcPeriod in seconds (read once: age and fairshare both follow it)."""
        if self.calc_s is None:
            calc = self.setting("PriorityCalcPeriod")
            self.calc_s = 300 if calc is None else _minutes(self.conf, *calc)
        return self.calc_s

    def sim(self) -> dict[str, Any]:
        return {"interval_s": self.bf_interval, "priority_calc_s": self.calc_period()}


# -- gres.conf -------------------------------------------------------------------


def read_gres(path: Path, nodes: Sequence[str]) -> tuple[dict[str, str], set[str]]:
    """Per node, the GPU type gres.conf gives it; and the keys not modelled."""
    types: dict[str, str] = {}
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
                types.setdefault(host, attrs["type"][1])
        unmodelled.update(
            f"gres.conf {k}"
            for key, (k, _) in attrs.items()
            if key not in ("nodename", "name", "type", "file", "count")
        )
    return types, unmodelled


# -- sacctmgr -P -------------------------------------------------------------------


def _table(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The header and the (line, row) pairs of sacctmgr's ``-P`` (or ``-p``) output."""
    try:
        text = read_text(path)
    except UnreadableText as e:
        raise SlurmImportError(path, e.line, None, str(e)) from None
    reader = csv.reader(io.StringIO(text), delimiter="|", quoting=csv.QUOTE_NONE)
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


def read_qos(path: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """``sacctmgr show qos -P``: one ``[[qos]]`` each; and the columns not modelled."""
    out: list[dict[str, Any]] = []
    unmodelled: set[str] = set()
    for number, row in _table(path)[1]:
        name = row.get("Name", "")
        if not name:
            raise SlurmImportError(path, number, "Name", "a QoS needs a name")
        q: dict[str, Any] = {"name": name}
        for column, value in row.items():
            if not value or column == "Name":
                continue
            if column == "Priority":
                q["priority"] = _integer(path, number, column, value)
            elif column == "Preempt":
                q["preempt"] = [v for v in value.split(",") if v]
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
    return out, unmodelled


def read_assoc(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], set[str]]:
    """``sacctmgr show assoc -P``: ``[[accounts]]`` and ``[[users]]``; and what is left out.

    Accounts need the ``ParentName`` column (sacctmgr heads it ``Par Name``);
    without it every account hangs off the root.
    """
    accounts: dict[str, dict[str, Any]] = {}
    users: dict[tuple[str, str], dict[str, Any]] = {}
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
    for number, row in rows:
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
        if account == "root":
            continue  # the implicit top, and root's own user
        if user:
            users.setdefault((account, user), {"name": user, "account": account, **entry})
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
    if "Par Name" not in header and "ParentName" not in header and accounts:
        unmodelled.add("account parents (no Par Name column: every account under root)")
    return list(accounts.values()), list(users.values()), unmodelled


# -- the whole import -------------------------------------------------------------------


def import_slurm(
    conf: Path,
    *,
    gres: Path | None = None,
    qos: Path | None = None,
    assoc: Path | None = None,
    gpu_models: Mapping[str, str] | None = None,
) -> Imported:
    """Translate a site's files; see the module docstring."""
    t = _Translator(conf, gpu_models or {})
    t.read_conf()
    unmodelled: set[str] = set()
    gres_types: dict[str, str] = {}
    if gres is not None:
        hosts = [h for n, a in t.node_lines for h in _hosts(conf, n, "NodeName", _node_name(a))]
        gres_types, more = read_gres(gres, hosts)
        unmodelled |= more
    groups, names = t.nodes(gres_types)
    if not groups:
        raise SlurmImportError(conf, None, "NodeName", "no node is defined")
    nodes_rule = t.node_choice()
    placement = "cons-tres" if nodes_rule == "consecutive" else "best-fit"
    policy: dict[str, Any] = {"ordering": t.ordering(), "placement": {"plugin": placement}}
    backfill = t.backfill(nodes_rule)
    if backfill is not None:
        policy["backfill"] = backfill
    policy["preemption"] = {"enabled": t.preemption()}
    partitions = t.partitions(names)
    if partitions:
        policy["partitions"] = partitions
    if qos is not None:
        table, more = read_qos(qos)
        unmodelled |= more
        if table:
            policy["qos"] = table
    if assoc is not None:
        accounts, users, more = read_assoc(assoc)
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
    unmodelled.update(key for _, key, _ in t.settings.values())
    return Imported({"nodes": groups}, policy, sorted(unmodelled, key=str.lower))


def _node_name(attrs: Mapping[str, str]) -> str:
    return next(v for k, v in attrs.items() if k.lower() == "nodename")
