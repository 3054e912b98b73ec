"""Policy files for the simulator: a TOML file names the plugins a replay runs with.

Every section is optional; an empty file means FIFO, no backfill, the default
placement, no preemption and the QoS and partition limits::

    [ordering]            # fifo | sjf | las | multifactor; other keys are its arguments
    name = "multifactor"
    weight_fairshare = 10000
    fairshare = { algorithm = "fair_tree", half_life_s = 604800 }

    [backfill]            # none | easy | conservative; other keys: window_s, resolution_s,
    name = "easy"         # max_job_test (Slurm's bf_window, bf_resolution, bf_max_job_test)

    [placement]           # a name from policies.registry
    name = "default"

    [preemption]          # jobs of QoS "preemptible" may be stopped for the others
    enabled = true
    mode = "requeue"      # or "cancel"
    grace_s = 30          # Slurm's GraceTime

    [qos.normal]          # any QoS field, overriding the built-in QoS of that name
    max_gpus_per_user = 64

    [shares]              # fairshare shares (the entitlement) per account; default 1 each
    acct1 = 2

    [sim]                 # the driver's settings: see ``sim.driver.SimConfig``
    interval_s = 60

    [[reservations]]      # advance reservations, as ``core.job.Reservation``
    name = "maint"
    start = 3600
    end = 7200
    gpus = 64
    maintenance = true

Errors are ``ProfileError`` with one line naming the file and the key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.core.cycle import Admission, Ordering, SchedulingProfile
from gpufleet.core.job import QoS, Reservation
from gpufleet.core.model import InvalidSpec, Node, Request
from gpufleet.policies.backfill import Backfill, BackfillArgs
from gpufleet.policies.limits import PartitionLimits, QosLimits
from gpufleet.policies.preemption import CheapestVictims
from gpufleet.policies.priority import (
    LasArgs,
    LeastAttainedService,
    Multifactor,
    MultifactorArgs,
    ShortestJobFirst,
)
from gpufleet.policies.queue import Fifo
from gpufleet.policies.registry import PLACEMENT, UnknownPolicy, placement_profile
from gpufleet.policies.reservations import Reservations
from gpufleet.sim.driver import (
    PREEMPTIBLE_QOS,
    ProgressFn,
    SimConfig,
    SimResult,
    Simulation,
    default_qos,
)
from gpufleet.sim.traces.record import TraceJob


class ProfileError(ValueError):
    """A policy file that cannot be used; the message names the file and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    def extras(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class OrderingSection(_Section):
    name: Literal["fifo", "sjf", "las", "multifactor"] = "fifo"


class BackfillSection(_Section):
    name: Literal["none", "easy", "conservative"] = "none"


class PlacementSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = "default"


class PreemptionSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    enabled: bool = False
    mode: Literal["requeue", "cancel"] = "requeue"
    grace_s: int = Field(0, ge=0)


class ProfileFile(BaseModel):
    """The schema of a policy file (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ordering: OrderingSection = Field(default_factory=OrderingSection)
    backfill: BackfillSection = Field(default_factory=BackfillSection)
    placement: PlacementSection = Field(default_factory=PlacementSection)
    preemption: PreemptionSection = Field(default_factory=PreemptionSection)
    limits: bool = True
    qos: dict[str, dict[str, Any]] = Field(default_factory=dict)
    shares: dict[str, float] = Field(default_factory=dict)
    sim: SimConfig = Field(default_factory=SimConfig)
    reservations: list[dict[str, Any]] = Field(default_factory=list)


@dataclass
class SimProfile:
    """A policy file made ready to run: the plugins and everything the driver needs.

    ``scheduling`` is built per run by ``build`` because placement scorers
    such as FGD learn the workload from the trace's requests.
    """

    name: str
    spec: ProfileFile
    qos: dict[str, QoS]
    reservations: list[Reservation] = field(default_factory=list)

    @property
    def config(self) -> SimConfig:
        return self.spec.sim

    @property
    def shares(self) -> Mapping[str, float]:
        return self.spec.shares

    def build(self, workload: Sequence[Request], seed: int) -> SchedulingProfile:
        """The scheduling plugins, with placement scorers fitted to ``workload``."""
        s = self.spec
        admission: list[Admission] = [QosLimits(), PartitionLimits()] if s.limits else []
        return SchedulingProfile(
            ordering=_ordering(s.ordering),
            placement=placement_profile(s.placement.name, workload=workload, seed=seed),
            admission=admission,
            gate=Reservations() if self.reservations else None,
            backfill=_backfill(s.backfill),
            preemption=CheapestVictims() if s.preemption.enabled else None,
        )


def replay(
    nodes: Sequence[Node],
    jobs: Sequence[TraceJob],
    profile: SimProfile,
    progress: ProgressFn | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``nodes`` under ``profile``; fairshare usage is tracked for
    multifactor ordering."""
    sched = profile.build([t.request for t in jobs], profile.config.seed)
    ordering = sched.ordering
    fairshare = ordering.args.fairshare if isinstance(ordering, Multifactor) else None
    return Simulation(
        nodes,
        jobs,
        sched,
        name=profile.name,
        config=profile.config,
        qos=profile.qos,
        reservations=profile.reservations,
        shares=dict(profile.shares),
        fairshare=fairshare,
        progress=progress,
    ).run()


def _ordering(section: OrderingSection) -> Ordering:
    args = section.extras()
    try:
        match section.name:
            case "multifactor":
                return Multifactor(MultifactorArgs(**args))
            case "las":
                return LeastAttainedService(LasArgs(**args))
            case "sjf":
                return _no_args(ShortestJobFirst(), args)
            case _:
                return _no_args(Fifo(), args)
    except ValidationError as e:
        raise ProfileError("ordering." + _validation_message(e)) from None


def _backfill(section: BackfillSection) -> Backfill | None:
    if section.name == "none":
        return None
    try:
        return Backfill(BackfillArgs(mode=section.name, **section.extras()))
    except ValidationError as e:
        raise ProfileError("backfill." + _validation_message(e)) from None


def _no_args(ordering: Ordering, args: dict[str, Any]) -> Ordering:
    if args:
        raise ProfileError(f"ordering.{next(iter(args))}: {ordering.NAME} takes no arguments")
    return ordering


def default_profile() -> SimProfile:
    """FIFO, no backfill, default placement: what an empty policy file gives."""
    return profile_from_dict({}, "fifo")


def load_profile(path: Path) -> SimProfile:
    """Read and check a policy file; ``ProfileError`` names the file and key on bad input."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"{path}: no such file") from None
    except OSError as e:
        raise ProfileError(f"{path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ProfileError(f"{path}: not valid TOML: {e}") from None
    try:
        return profile_from_dict(data, path.stem)
    except ProfileError as e:
        raise ProfileError(f"{path}: {e}") from None


def profile_from_dict(data: Mapping[str, Any], name: str) -> SimProfile:
    """A profile from a parsed policy file; ``ProfileError`` names the key on bad input."""
    try:
        spec = ProfileFile.model_validate(data)
        profile = SimProfile(
            name=name,
            spec=spec,
            qos=_qos_table(spec),
            reservations=[Reservation(**r) for r in spec.reservations],
        )
    except ValidationError as e:
        raise ProfileError(_validation_message(e)) from None
    except InvalidSpec as e:
        raise ProfileError(str(e)) from None
    except TypeError as e:
        raise ProfileError(f"reservations: {e}") from None
    # Check the plugins' arguments now rather than when a replay starts.
    _ordering(spec.ordering)
    _backfill(spec.backfill)
    if spec.placement.name not in PLACEMENT:
        raise ProfileError(f"placement.name: {UnknownPolicy(spec.placement.name)}")
    return profile


def _qos_table(spec: ProfileFile) -> dict[str, QoS]:
    table = default_qos(preempt=spec.preemption.enabled)
    for name, overrides in spec.qos.items():
        base = table.get(name, QoS(name))
        fields = {k: getattr(base, k) for k in QoS.__dataclass_fields__}
        for key, value in overrides.items():
            if key not in fields or key == "name":
                raise ProfileError(f"qos.{name}.{key}: not a QoS setting")
            fields[key] = tuple(value) if isinstance(value, list) else value
        table[name] = QoS(**fields)
    p = spec.preemption
    victim = table[PREEMPTIBLE_QOS]
    fields = {k: getattr(victim, k) for k in QoS.__dataclass_fields__}
    fields.update(preempt_mode=p.mode, grace_s=p.grace_s)
    table[PREEMPTIBLE_QOS] = QoS(**fields)
    return table


def _validation_message(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "profile"
    return f"{where}: {err['msg']}"
