"""The controller's configuration: one TOML file, checked as a whole.

The file has four parts, and two more for autoscaling (``docs/configuration.md``
lists every key)::

    [server]          # the controller's own settings; every key has a default
    interval_s = 30
    [policy]          # the policy file's tables (policies.config.PolicyConfig):
    [[policy.qos]]    # ordering, placement, backfill, preemption, qos,
    name = "normal"   # partitions, accounts, users, reservations
    [[nodes]]         # cluster-file node groups (adapters.inventory); optional,
    names = "n1"      # since agents may register their nodes instead
    cpu_milli = 8000
    memory_mib = 65536
    [[principals]]    # who may use the cluster, in which role, charging which accounts
    name = "alice"
    role = "user"
    accounts = ["vision"]
    [[pools]]         # node pools the autoscaler grows and shrinks (cluster-file format)
    name = "burst"    # with [policy.autoscale] and the [provider] that makes their nodes
    max_nodes = 4
    [provider]
    kind = "command"

``load_config(path)`` reads and checks a file, ``config_from_dict(data,
source)`` checks a document parsed elsewhere (the effective configuration the
controller stored); both return a ``ControllerConfig``, and its ``build()``
turns it into the core values the controller runs with (``Built``).
``ControllerConfig.to_dict()`` is the JSON-ready form that validates back to
an equal configuration.

A configuration that cannot be used raises ``ConfigError`` listing every
problem found, each one line ``key.path: message``. Array entries are named
by their ``name`` (a node group by its ``names``), else by their 1-based
position: ``policy.qos.high.preempt``, ``nodes.dgx-[01-02].gpus.count``,
``principals.2.role``. Shapes and types are checked first; the checks across
tables (a principal's account exists, a partition's nodes are declared, ...)
run once every table has the right shape. The account tree's structural
checks (cycles, shares) are the policy's own and report the first problem.

A principal's accounts must exist in ``[[policy.accounts]]``; each
(principal, account) pair that ``[[policy.users]]`` does not list becomes a
user association with 1 share, so ``[[policy.users]]`` is needed only for
other shares or a priority. Accounts are never created implicitly: a typo in
an account name would otherwise silently take a share of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field, ValidationError, field_validator

from gpufleet.adapters.inventory import ClusterFileError, nodes_from_groups, pools_from_tables
from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.api.schemas import (
    MAX_ARRAY_TASKS,
    USER_NAME_RULE,
    is_user_name,
    unknown_output_pattern,
)
from gpufleet.controller.alerts import AlertsConfig
from gpufleet.controller.alerts import problems as alert_problems
from gpufleet.controller.scaling import ProviderConfig
from gpufleet.controller.setup import WindowPolicy
from gpufleet.core.accounts import ROOT, AccountTree
from gpufleet.core.cycle import SchedulingProfile
from gpufleet.core.job import Partition, QoS, Reservation
from gpufleet.core.model import InvalidSpec, Node, Request
from gpufleet.core.pools import NodePool
from gpufleet.policies.autoscale import autoscaler
from gpufleet.policies.config import Policy, PolicyConfig, UserConfig, cap_problems
from gpufleet.policies.tables import StrictTable
from gpufleet.policies.validation import entry_label
from gpufleet.policies.validation import problems as describe

PrincipalRole = Literal["admin", "operator", "user"]

_KNOWN_SHOWN = 12
"""Most known names an "unknown ..." message lists (a site may have thousands of nodes)."""


class ConfigError(ValueError):
    """A configuration that cannot be used.

    ``problems`` holds every problem found, each one line ``key.path:
    message`` (or only a message for the file as a whole, e.g. ``no such
    file``); ``source`` names the file. ``str()`` joins them on one line.
    """

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems: tuple[str, ...] = tuple(p.replace("\n", " ") for p in problems)
        super().__init__("; ".join(f"{source}: {p}" for p in self.problems))


class ServerConfig(StrictTable):
    """The ``[server]`` table: how the controller runs (Slurm's name in brackets)."""

    interval_s: int = Field(
        30, ge=1, le=3600, description="a scheduling cycle at least this often (sched_interval)"
    )
    sched_min_interval_s: float = Field(
        0.2,
        ge=0,
        le=60,
        description="an event's cycle waits this long after the last one (sched_min_interval)",
    )
    heartbeat_interval_s: int = Field(
        30, ge=1, le=3600, description="agents sync at least this often"
    )
    missed_heartbeats: int = Field(
        3, ge=1, le=1000, description="a node silent for this many intervals is DOWN"
    )
    default_partition: str | None = Field(
        None, description="for jobs that name none; None: the first partition"
    )
    default_qos: str | None = Field(
        None, description="for jobs that name none; None: 'normal' if defined, else the first"
    )
    kill_grace_s: int = Field(
        30, ge=0, le=3600, description="SIGTERM to SIGKILL at the time limit (KillWait)"
    )
    priority_calc_s: int = Field(
        300,
        ge=0,
        le=86400,
        description="fairshare usage is charged at each multiple of this many seconds, and "
        "orderings see it as of the last one (PriorityCalcPeriod)",
    )
    max_payload_bytes: int = Field(
        2 * 1024 * 1024, ge=4096, le=1 << 30, description="larger request bodies get 413"
    )
    max_array_size: int = Field(
        1001,
        ge=1,
        le=MAX_ARRAY_TASKS,
        description="array task indices stay below this (MaxArraySize)",
    )
    default_stdout: str = Field(
        "slurm-%j.out", description="output path of a job that names none, from its workdir"
    )
    default_array_stdout: str = Field("slurm-%A_%a.out", description="the same for an array task")

    @field_validator("default_stdout", "default_array_stdout")
    @classmethod
    def _output_pattern(cls, value: str) -> str:
        if not value or "\0" in value:
            raise ValueError("must be a non-empty path without NUL")
        bad = unknown_output_pattern(value)
        if bad is not None:
            raise ValueError(f"unknown pattern {bad!r} (known: %j %A %a %x %u %%)")
        return value

    @property
    def heartbeat_timeout_s(self) -> int:
        """Silence after which a node is marked DOWN (Slurm's SlurmdTimeout)."""
        return self.heartbeat_interval_s * self.missed_heartbeats


class PrincipalConfig(StrictTable):
    """One ``[[principals]]`` entry: a user name, its role, the accounts it may charge.

    The first account is the default for jobs that name none.
    """

    name: str
    role: PrincipalRole = "user"
    accounts: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _user_name(cls, value: str) -> str:
        if not is_user_name(value):
            raise ValueError(USER_NAME_RULE)
        return value

    @property
    def default_account(self) -> str | None:
        return self.accounts[0] if self.accounts else None


class ControllerConfig(StrictTable):
    """The whole file. ``nodes`` holds the node groups as written; ``build()`` reads them."""

    server: ServerConfig = Field(default_factory=ServerConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    nodes: tuple[dict[str, Any], ...] = ()
    principals: tuple[PrincipalConfig, ...] = ()
    alerts: AlertsConfig | None = None
    pools: tuple[dict[str, Any], ...] = ()
    provider: ProviderConfig | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready and TOML-shaped (no nulls); ``config_from_dict`` gives back an equal one."""
        return self.model_dump(mode="json", exclude_none=True)

    def build(self, source: str = "config") -> Built:
        """The core values this configuration describes; ConfigError with every problem."""
        problems: list[str] = []
        node_errors: list[ClusterFileError] = []
        nodes = nodes_from_groups(self.nodes, source, node_errors)
        problems += _node_problems(self.nodes, node_errors)
        pools: list[NodePool] = []
        try:
            pools = pools_from_tables(self.pools, source, [n.name for n in nodes])
        except ClusterFileError as e:
            label = f"pools.{e.index}" if e.index else "pools"
            problems.append(f"{label}.{e.key}: {e.reason}" if e.key else f"{label}: {e.reason}")
        if pools and self.provider is None:
            problems.append("provider: [[pools]] need a [provider] to create their nodes")
        problems += _policy_problems(self.policy)
        if self.nodes and not node_errors:
            problems += _node_references(self.policy, nodes, pools)
        problems += _server_problems(self.server, self.policy)
        problems += _principal_problems(self.principals, self.policy)
        if self.alerts is not None:
            problems += alert_problems(self.alerts, {p.name for p in self.policy.partitions})
        policy = None
        try:
            policy = Policy(_with_principals(self.policy, self.principals))
        except InvalidSpec as e:
            # The policy stops at its first problem; skip it when a check above said the same.
            key = _policy_key(e.field)
            if not any(p.startswith(f"{key}: ") for p in problems):
                problems.append(f"{key}: {e.reason}")
        if policy is not None:
            problems += _window_problems(policy)
            problems += cap_problems(policy.config, (p.name for p in pools), at="policy")
        if problems or policy is None:
            raise ConfigError(source, problems)
        partitions = [p.name for p in self.policy.partitions]
        qos = [q.name for q in self.policy.qos]
        return Built(
            server=self.server,
            nodes=tuple(nodes),
            pools=tuple(pools),
            provider=self.provider,
            policy=policy,
            principals={p.name: p for p in self.principals},
            default_partition=self.server.default_partition or partitions[0],
            default_qos=self.server.default_qos or ("normal" if "normal" in qos else qos[0]),
        )


@dataclass(frozen=True)
class Built:
    """A checked configuration as the controller uses it.

    ``policy`` includes the user associations added for principals; the
    scheduling profile comes fresh from ``profile()`` (plugins keep state).
    """

    server: ServerConfig
    nodes: tuple[Node, ...]
    policy: Policy
    principals: Mapping[str, PrincipalConfig]
    default_partition: str
    default_qos: str
    pools: tuple[NodePool, ...] = ()
    provider: ProviderConfig | None = None

    @property
    def qos(self) -> Mapping[str, QoS]:
        return self.policy.qos

    @property
    def partitions(self) -> Mapping[str, Partition]:
        return self.policy.partitions

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        return self.policy.reservations

    @property
    def accounts(self) -> AccountTree:
        return self.policy.accounts

    def profile(self, workload: Sequence[Request] = (), seed: int = 0) -> SchedulingProfile:
        """A new scheduling profile; ``workload`` tunes fragmentation-aware placement."""
        return self.policy.profile(workload, seed)

    def windowed(self, names: tuple[str, ...]) -> WindowPolicy:
        """What the controller schedules with while the named windows are open."""
        policy = self.policy.windowed(names)
        scaler = autoscaler(policy.config.autoscale)
        return WindowPolicy(policy.profile, policy.qos, policy.partitions, scaler)

    def summary(self) -> str:
        """``7 nodes, 40 GPUs, 3 partitions, 3 QoS, 4 accounts, 5 principals``."""
        counts = [
            (len(self.nodes), "node"),
            (sum(len(n.gpus) for n in self.nodes), "GPU"),
            (len(self.partitions), "partition"),
            (len(self.qos), "QoS"),
            (len(self.policy.config.accounts), "account"),
            (len(self.principals), "principal"),
        ]
        return ", ".join(
            f"{n} {noun}" + ("s" if n != 1 and noun != "QoS" else "") for n, noun in counts
        )


def load_config(path: Path | str) -> ControllerConfig:
    """Read and check a configuration file; ConfigError naming every problem."""
    try:
        data = read_toml(Path(path))
    except UnreadableToml as e:
        raise ConfigError(str(path), [str(e)]) from None
    return config_from_dict(data, str(path))


def config_from_dict(data: Mapping[str, Any], source: str = "config") -> ControllerConfig:
    """Check a parsed document (a whole ``build()``); ConfigError naming every problem."""
    try:
        config = ControllerConfig.model_validate(data)
    except ValidationError as e:
        problems = describe(ControllerConfig, data, e)
        groups = data.get("nodes")
        if isinstance(groups, list):
            # Node groups are plain tables to pydantic; read them too, so their problems
            # come with the others. Entries that are not tables were reported above.
            errors: list[ClusterFileError] = []
            nodes_from_groups(groups, source, errors)
            tables = [e for e in errors if isinstance(groups[(e.index or 1) - 1], dict)]
            problems += _node_problems(groups, tables)
        raise ConfigError(source, problems) from None
    config.build(source)
    return config


def document_path(document: object, key: str) -> str:
    """A problem's key (entries named by their label, as ``check`` prints it) as a path in
    the JSON ``document``, entries by their 0-based position: ``principals[2].name``.

    A label may hold dots (a principal named ``../x``): at each array the longest label
    the rest of the key starts with wins, the last such entry for a duplicate; the key
    past where the document ends stays as it is.
    """
    path, node, rest = "", document, key
    while rest:
        steps: list[tuple[str, str, object]]  # (label in the key, in the path, the value)
        if isinstance(node, list):
            steps = [(entry_label(e, i), f"[{i}]", e) for i, e in enumerate(node)][::-1]
        elif isinstance(node, Mapping):
            steps = [(k, f".{k}" if path else k, v) for k, v in node.items() if isinstance(k, str)]
        else:
            break
        fits = [s for s in steps if rest == s[0] or rest.startswith(s[0] + ".")]
        if not fits:
            break
        label, step, node = max(fits, key=lambda fit: len(fit[0]))
        path += step
        rest = rest[len(label) + 1 :]
    return path + ("." if path and rest else "") + rest


def _node_problems(groups: Sequence[object], errors: Iterable[ClusterFileError]) -> list[str]:
    problems = []
    for e in errors:
        index = (e.index or 1) - 1
        key = "nodes." + entry_label(groups[index], index) + (f".{e.key}" if e.key else "")
        problems.append(f"{key}: {e.reason}")
    return problems


def _window_problems(policy: Policy) -> list[str]:
    """Each window's time zone is known and its policy, laid over the file's, is valid."""
    problems = []
    for w in policy.config.windows:
        key = f"policy.windows.{w.name}"
        try:
            ZoneInfo(w.tz)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(f"{key}.tz: unknown time zone {w.tz!r}")
        try:
            policy.windowed((w.name,))
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            problems.append(f"{key}.policy.{where}: {first['msg']}")
        except InvalidSpec as e:
            problems.append(f"{key}.policy.{e.field}: {e.reason}")
    return problems


def _policy_problems(policy: PolicyConfig) -> list[str]:
    """Duplicates, each entry's own rules, and names that refer to nothing."""
    problems: list[str] = []
    for table in ("qos", "partitions", "reservations", "accounts"):
        names = (entry.name for entry in getattr(policy, table))
        problems += _duplicates(f"policy.{table}", names)
    problems += _core_problems(policy.qos, QoS)
    problems += _core_problems(policy.partitions, Partition)
    problems += _core_problems(policy.reservations, Reservation)
    qos = [q.name for q in policy.qos]
    accounts = [a.name for a in policy.accounts]
    for q in policy.qos:
        problems += _unknown(f"policy.qos.{q.name}.preempt", q.preempt, qos, "QoS")
    for p in policy.partitions:
        key = f"policy.partitions.{p.name}"
        problems += _unknown(f"{key}.allowed_qos", p.allowed_qos, qos, "QoS")
        problems += _unknown(f"{key}.allowed_accounts", p.allowed_accounts, accounts, "account")
        if p.max_time_s and p.default_time_s > p.max_time_s:
            # Every job taking the default would be refused at submission.
            problems.append(
                f"{key}.default_time_s: {p.default_time_s} s is over max_time_s ({p.max_time_s} s)"
            )
    for a in policy.accounts:
        parent = [a.parent] if a.parent != ROOT else []
        problems += _unknown(f"policy.accounts.{a.name}.parent", parent, accounts, "account")
    for u in policy.users:
        problems += _unknown(f"policy.users.{u.name}.account", [u.account], accounts, "account")
    for r in policy.reservations:
        key = f"policy.reservations.{r.name}.accounts"
        problems += _unknown(key, r.accounts, accounts, "account")
    return problems


def _core_problems(entries: Iterable[BaseModel], value: Callable[..., object]) -> list[str]:
    """Each entry's own rules, as the core value it becomes checks them."""
    problems = []
    for entry in entries:
        try:
            value(**entry.model_dump())
        except InvalidSpec as e:
            problems.append(f"{_policy_key(e.field)}: {e.reason}")
    return problems


def _node_references(
    policy: PolicyConfig, nodes: Sequence[Node], node_pools: Sequence[NodePool] = ()
) -> list[str]:
    """Partitions and reservations name nodes and pools that are declared."""
    names = [n.name for n in nodes] + [name for p in node_pools for name in p.names()]
    pools = sorted({n.pool for n in nodes} | {p.name for p in node_pools})
    problems = []
    for p in policy.partitions:
        problems += _unknown(f"policy.partitions.{p.name}.nodes", p.nodes, names, "node")
        problems += _unknown(f"policy.partitions.{p.name}.pools", p.pools, pools, "pool")
    for r in policy.reservations:
        problems += _unknown(f"policy.reservations.{r.name}.nodes", r.nodes, names, "node")
    return problems


def _server_problems(server: ServerConfig, policy: PolicyConfig) -> list[str]:
    """Jobs that name no partition or QoS have one to go to."""
    problems = []
    for table, what, default, names in (
        ("partitions", "partition", server.default_partition, [p.name for p in policy.partitions]),
        ("qos", "QoS", server.default_qos, [q.name for q in policy.qos]),
    ):
        if not names:
            problems.append(f"policy.{table}: define at least one {what}")
        elif default is not None:
            problems += _unknown(f"server.default_{what.lower()}", [default], names, what)
    return problems


def _principal_problems(principals: Sequence[PrincipalConfig], policy: PolicyConfig) -> list[str]:
    accounts = [a.name for a in policy.accounts]
    problems = _duplicates("principals", (p.name for p in principals))
    for p in principals:
        key = f"principals.{p.name}.accounts"
        problems += _duplicates(key, p.accounts, "listed twice")
        problems += _unknown(key, p.accounts, accounts, "account")
    return problems


def _with_principals(policy: PolicyConfig, principals: Sequence[PrincipalConfig]) -> PolicyConfig:
    """The policy plus a 1-share association for each principal's unlisted, known account."""
    accounts = {a.name for a in policy.accounts}
    listed = {(u.name, u.account) for u in policy.users}
    added = [
        UserConfig(name=p.name, account=account)
        for p in principals
        for account in dict.fromkeys(p.accounts)
        if account in accounts and (p.name, account) not in listed
    ]
    return policy.model_copy(update={"users": (*policy.users, *added)}) if added else policy


def _duplicates(key: str, names: Iterable[str], message: str = "defined twice") -> list[str]:
    seen: set[str] = set()
    problems = []
    for name in names:
        if name in seen:
            problems.append(f"{key}.{name}: {message}")
        seen.add(name)
    return problems


def _unknown(key: str, names: Iterable[str], known: Sequence[str], what: str) -> list[str]:
    """One problem per name not in ``known``, listing (some of) the known ones."""
    known = list(dict.fromkeys(known))
    known_set = set(known)
    shown = ", ".join(known[:_KNOWN_SHOWN]) + (", ..." if len(known) > _KNOWN_SHOWN else "")
    hint = f" (known: {shown})" if known else f" (no {what} is defined)"
    return [f"{key}: unknown {what} {name!r}{hint}" for name in names if name not in known_set]


def _policy_key(field: str) -> str:
    """A key the policy or a core value names, as a key of this file."""
    head, dot, rest = field.partition(".")
    tables = {"partition": "partitions", "reservation": "reservations"}
    return "policy." + tables.get(head, head) + dot + rest
