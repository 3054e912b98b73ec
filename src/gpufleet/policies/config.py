"""The policy file: ordering, weights, plugins, QoS, partitions, accounts, reservations.

A policy is a TOML document (the driver reads the file; this module parses
text, so it stays pure)::

    [ordering]
    plugin = "multifactor"            # fifo | multifactor | sjf | las
    queue_depth = 0                   # default_queue_depth: jobs a cycle considers, 0 = all
    [ordering.multifactor]            # PriorityWeight* and friends
    weight_qos = 100000
    weight_fairshare = 10000

    [placement]
    plugin = "best-fit"               # any name in policies.registry.PLACEMENT

    [backfill]                        # omit the table for a strict queue
    mode = "easy"                     # easy | conservative | none
    window_s = 86400                  # bf_window
    resolution_s = 60                 # bf_resolution
    max_job_test = 500                # bf_max_job_test

    [preemption]
    enabled = true
    plugin = "tier"                   # tier (QoS, partition tier) | las (attained service)
    by = ["qos", "partition_tier"]    # tier: what may preempt (preempt/qos: ["qos"])
    quantum_s = 60                    # las: least run before a job may be preempted

    [[qos]]
    name = "high"
    priority = 100
    preempt = ["scavenger"]

    [[partitions]]
    name = "gpu"
    max_time_s = 172800

    [[accounts]]
    name = "vision"
    parent = "root"
    shares = 2

    [[users]]
    name = "alice"
    account = "vision"

    [predict]                         # runtime prediction (policies.predict)
    ordering = true                   # sjf ranks by estimates
    backfill = true                   # backfill plans with estimated ends

    [mig]                             # MIG re-partitioning (policies.migplan)
    repartition = true                # re-cut idle MIG GPUs for what waits
    min_interval_s = 3600             # one GPU's changes at least this far apart
    reconfigure_s = 60                # the simulator's time a change takes

    [autoscale]                       # node pools grow and shrink (policies.autoscale)
    pending_s = 120
    idle_s = 600

    [[windows]]                       # time-of-day overrides (policies.windows)
    name = "night"
    start = "20:00"
    end = "08:00"
    [windows.policy.backfill]
    mode = "conservative"

Every mistake is a ``PolicyError`` whose one-line message names the key, for
example ``policy.toml: qos.high.preempt: a QoS cannot preempt itself`` or
``policy.toml: ordering.multifactor.weight_age: Input should be greater than
or equal to 0``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeGuard

from pydantic import Field, ValidationError, field_validator

from gpufleet.core.accounts import Account, AccountTree, User
from gpufleet.core.cycle import SchedulingProfile
from gpufleet.core.job import Partition, PartitionState, QoS, Reservation
from gpufleet.core.model import InvalidSpec, Request
from gpufleet.core.protocols import Ordering, Preemptor
from gpufleet.policies.autoscale import AutoscaleArgs
from gpufleet.policies.backfill import Backfill, BackfillArgs
from gpufleet.policies.limits import PartitionLimits, QosLimits
from gpufleet.policies.migplan import MigArgs, MigPlanner
from gpufleet.policies.predict import PredictArgs
from gpufleet.policies.preemption import AttainedServiceVictims, CheapestVictims, PreemptBy
from gpufleet.policies.priority import (
    LasArgs,
    LeastAttainedService,
    Multifactor,
    MultifactorArgs,
    ShortestJobFirst,
    SjfArgs,
)
from gpufleet.policies.queue import Fifo
from gpufleet.policies.registry import PLACEMENT, placement_profile
from gpufleet.policies.reservations import Reservations
from gpufleet.policies.tables import StrictTable
from gpufleet.policies.validation import first_problem
from gpufleet.policies.windows import WindowConfig


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and the key."""


class OrderingConfig(StrictTable):
    plugin: Literal["fifo", "multifactor", "sjf", "las"] = "multifactor"
    queue_depth: int = Field(0, ge=0, description="jobs a cycle considers (default_queue_depth)")
    multifactor: MultifactorArgs = Field(default_factory=MultifactorArgs)
    las: LasArgs = Field(default_factory=LasArgs)
    sjf: SjfArgs = Field(default_factory=SjfArgs)


class PlacementConfig(StrictTable):
    plugin: str = "best-fit"

    @field_validator("plugin")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in PLACEMENT:
            raise ValueError(f"unknown placement plugin {value!r} (known: {', '.join(PLACEMENT)})")
        return value


class PreemptionConfig(StrictTable):
    enabled: bool = False
    plugin: Literal["tier", "las"] = Field(
        "tier", description="tier: by QoS and partition tier; las: by attained service"
    )
    by: tuple[PreemptBy, ...] = Field(
        ("qos", "partition_tier"),
        min_length=1,
        description="tier: what may preempt: QoS preempt lists, partition tiers, or both",
    )
    quantum_s: int = Field(60, gt=0, description="las: a victim's least run before preemption")


class QosConfig(StrictTable):
    name: str
    priority: int = Field(0, ge=0)
    preempt: tuple[str, ...] = ()
    preempt_mode: Literal["requeue", "cancel"] = "requeue"
    grace_s: int = Field(0, ge=0)
    usage_factor: float = Field(1.0, ge=0)
    preempt_exempt_s: int = Field(0, ge=0)
    max_jobs_per_user: int = Field(0, ge=0)
    max_gpus_per_user: int = Field(0, ge=0)
    max_gpus_per_account: int = Field(0, ge=0)
    group_gpus: int = Field(0, ge=0)
    max_wall_s: int = Field(0, ge=0)


class PartitionConfig(StrictTable):
    name: str
    nodes: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    default_time_s: int = Field(3600, ge=0)
    max_time_s: int = Field(0, ge=0)
    priority_tier: int = 0
    priority_job_factor: int = Field(1, ge=0)
    allowed_accounts: tuple[str, ...] = ()
    allowed_qos: tuple[str, ...] = ()
    preemptible: bool = True
    checkpoint_dir: str = ""
    nccl: dict[str, str] = Field(default_factory=dict)
    state: PartitionState = "up"

    @field_validator("nccl")
    @classmethod
    def _nccl_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(r"NCCL_[A-Z0-9_]+", name):
                raise ValueError(f"{name!r} is not an NCCL_* variable name")
        return value


class AccountConfig(StrictTable):
    name: str
    parent: str = "root"
    shares: float = 1.0
    priority: int | None = None


class UserConfig(StrictTable):
    name: str
    account: str
    shares: float | Literal["parent"] = 1.0  # "parent": Slurm's FairShare=parent
    priority: int | None = None


class ReservationConfig(StrictTable):
    name: str
    start: int
    end: int
    nodes: tuple[str, ...] = ()
    gpus: int = Field(0, ge=0)
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    maintenance: bool = False


class PolicyConfig(StrictTable):
    ordering: OrderingConfig = Field(default_factory=OrderingConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    backfill: BackfillArgs | None = None
    preemption: PreemptionConfig = Field(default_factory=PreemptionConfig)
    qos: tuple[QosConfig, ...] = (QosConfig(name="normal"),)
    partitions: tuple[PartitionConfig, ...] = (PartitionConfig(name="default"),)
    accounts: tuple[AccountConfig, ...] = ()
    users: tuple[UserConfig, ...] = ()
    reservations: tuple[ReservationConfig, ...] = ()
    predict: PredictArgs | None = None
    mig: MigArgs = Field(default_factory=MigArgs)
    windows: tuple[WindowConfig, ...] = ()
    autoscale: AutoscaleArgs | None = None


class Policy:
    """A validated policy, turned into the core's values and a scheduling profile."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        _unique((q.name for q in config.qos), "qos")
        _unique((p.name for p in config.partitions), "partitions")
        _unique((r.name for r in config.reservations), "reservations")
        _unique((w.name for w in config.windows), "windows")
        self.qos = {q.name: QoS(**q.model_dump()) for q in config.qos}
        self.partitions = {p.name: Partition(**p.model_dump()) for p in config.partitions}
        self.reservations = tuple(Reservation(**r.model_dump()) for r in config.reservations)
        self.accounts = AccountTree(
            [Account(**a.model_dump()) for a in config.accounts],
            [User(**u.model_dump()) for u in config.users],
        )
        if config.preemption.plugin == "las" and config.ordering.plugin != "las":
            raise InvalidSpec("preemption.plugin", "'las' needs ordering.plugin = 'las'")
        for q in config.qos:
            for other in q.preempt:
                if other not in self.qos:
                    raise InvalidSpec(f"qos.{q.name}.preempt", f"unknown QoS {other!r}")
        for p in config.partitions:
            for name in p.allowed_qos:
                if name not in self.qos:
                    raise InvalidSpec(f"partitions.{p.name}.allowed_qos", f"unknown QoS {name!r}")
        # Without accounts, jobs charge whatever account they name (a trace's, in a replay).
        accounts = {a.name for a in config.accounts}
        refs = [
            (f"partitions.{p.name}.allowed_accounts", p.allowed_accounts) for p in config.partitions
        ]
        refs += [(f"reservations.{r.name}.accounts", r.accounts) for r in config.reservations]
        for key, names in refs if accounts else ():
            for name in names:
                if name not in accounts:
                    raise InvalidSpec(key, f"unknown account {name!r}")

    def profile(self, workload: Sequence[Request] = (), seed: int = 0) -> SchedulingProfile:
        """The scheduling profile the policy describes (fresh plugin instances).

        ``workload`` (typical requests) and ``seed`` reach the placement
        profile: fragmentation-aware placement measures against the workload.
        """
        c = self.config
        ordering: Ordering
        match c.ordering.plugin:
            case "fifo":
                ordering = Fifo()
            case "multifactor":
                ordering = Multifactor(c.ordering.multifactor)
            case "sjf":
                by_estimate = c.predict is not None and c.predict.ordering
                ordering = ShortestJobFirst(c.ordering.sjf, estimates=by_estimate)
            case "las":
                ordering = LeastAttainedService(c.ordering.las)
        return SchedulingProfile(
            ordering=ordering,
            placement=placement_profile(c.placement.plugin, workload=workload, seed=seed),
            admission=[PartitionLimits(), QosLimits()],
            gate=Reservations(),
            backfill=Backfill(c.backfill) if c.backfill and c.backfill.mode != "none" else None,
            preemption=self._preemptor(),
            repartition=MigPlanner(c.mig) if c.mig.repartition else None,
            estimates=c.predict is not None and c.predict.backfill,
            queue_depth=c.ordering.queue_depth,
        )

    def windowed(self, names: tuple[str, ...]) -> Policy:
        """This policy with the named windows' policies laid over it, in file order
        (``policies.windows``); the result has no windows of its own."""
        data = self.config.model_dump(exclude={"windows"})
        for w in self.config.windows:
            if w.name in names:
                data = overlay(data, w.policy)
        return Policy(PolicyConfig.model_validate(data))

    def _preemptor(self) -> Preemptor | None:
        c = self.config
        if not c.preemption.enabled:
            return None
        if c.preemption.plugin == "las":
            return AttainedServiceVictims(c.ordering.las, c.preemption.quantum_s)
        return CheapestVictims(frozenset(c.preemption.by))


def cap_problems(policy: PolicyConfig, pools: Iterable[str], at: str = "") -> list[str]:
    """A ``key: message`` line for each pool ``[autoscale.max_nodes]`` caps, in the file
    or in a window's policy, that is not one of ``pools`` (the pool names). ``at`` is the
    key the policy sits under (``policy`` in a controller configuration)."""
    prefix = f"{at}." if at else ""
    caps: list[tuple[str, object]] = []
    if policy.autoscale is not None:
        caps.append((f"{prefix}autoscale", policy.autoscale.max_nodes))
    for w in policy.windows:
        table = w.policy.get("autoscale")
        if isinstance(table, dict):
            caps.append((f"{prefix}windows.{w.name}.policy.autoscale", table.get("max_nodes")))
    names = set(pools)
    return [
        f"{key}.max_nodes.{name}: unknown pool {name!r}"
        for key, capped in caps
        if isinstance(capped, dict)
        for name in capped
        if name not in names
    ]


def overlay(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``: tables merge, arrays of named tables merge by name."""
    result = dict(base)
    for key, value in over.items():
        under = result.get(key)
        if isinstance(under, dict) and isinstance(value, dict):
            result[key] = overlay(under, value)
        elif _named(under) and _named(value):
            entries = {entry["name"]: entry for entry in under}
            for entry in value:
                entries[entry["name"]] = overlay(entries.get(entry["name"], {}), entry)
            result[key] = list(entries.values())
        else:
            result[key] = value
    return result


def _named(value: object) -> TypeGuard[list[dict[str, Any]]]:
    """An array of tables that each have a name (a QoS, a partition, an account...)."""
    return isinstance(value, (list, tuple)) and all(
        isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in value
    )


def _unique(names: Iterable[str], key: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidSpec(f"{key}.{name}", "defined twice")
        seen.add(name)


def parse_policy(text: str, source: str = "policy") -> Policy:
    """Parse and validate a policy document; raise PolicyError naming the key."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{source}: not valid TOML: {e}") from None
    try:
        return Policy(PolicyConfig.model_validate(data))
    except ValidationError as e:
        raise PolicyError(f"{source}: {first_problem(PolicyConfig, data, e)}") from None
    except InvalidSpec as e:
        raise PolicyError(f"{source}: {e}") from None
