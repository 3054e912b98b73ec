"""The already-built values a controller runs with, whatever file they came from.

``setup_from_config`` turns a checked configuration file (``controller.config``)
into a ``ControllerSetup``; tests build one directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufleet.api.schemas import Role
from gpufleet.core.accounts import AccountTree
from gpufleet.core.cycle import SchedulingProfile
from gpufleet.core.job import Partition, QoS, Reservation
from gpufleet.core.model import Node, Request
from gpufleet.core.pools import NodePool
from gpufleet.policies.autoscale import AutoscaleArgs, Autoscaler
from gpufleet.policies.fairshare import FairshareArgs
from gpufleet.policies.predict import PredictArgs
from gpufleet.policies.windows import WindowConfig

if TYPE_CHECKING:
    from gpufleet.controller.config import Built
    from gpufleet.controller.scaling import ProviderConfig

ProfileFactory = Callable[[Sequence[Request]], SchedulingProfile]
"""Builds a fresh scheduling profile for a workload (recent requests, for fgd/default)."""


@dataclass(frozen=True)
class WindowPolicy:
    """What the controller schedules with while a set of policy windows is open."""

    profile_factory: ProfileFactory
    qos: Mapping[str, QoS]
    partitions: Mapping[str, Partition]
    autoscaler: Autoscaler


@dataclass(frozen=True, slots=True)
class PrincipalSpec:
    """A configured user: its role, the account it charges by default, and the others it may.

    ``account`` is the default for submissions naming none; ``accounts``
    lists every account the user may charge (the default among them). With
    no accounts at all the user may charge any account that exists.
    """

    name: str
    role: Role = "user"
    account: str = ""
    accounts: tuple[str, ...] = ()

    @property
    def allowed(self) -> tuple[str, ...]:
        """Every account this user may charge, the default first; () for any."""
        return tuple(dict.fromkeys(a for a in (self.account, *self.accounts) if a))


@dataclass(frozen=True)
class ControllerSetup:
    """Cluster, policy and server settings.

    ``nodes`` are the declared nodes (agents may register more). With no
    ``default_partition``/``default_qos`` the first of each is the default.
    ``interval_s`` is the scheduling period between event-driven cycles, and
    ``sched_min_interval_s`` the least time between two (``loop.SchedulerLoop``);
    ``heartbeat_timeout_s`` after an agent's last sync its node is down and
    its runs NODE_FAIL. ``workload_window`` is how many recent submissions
    make the placement workload. ``fairshare`` (None: the defaults) says how
    usage is billed and decays and which algorithm the fairshare view uses;
    ``priority_calc_s`` is how often orderings see new usage.
    ``backstop_s`` is how long past a kill's deadline (or a run's time limit
    plus ``kill_grace_s``) the controller waits for its agent to report
    before it ends the job itself (the run's resources stay held until the
    agent confirms the run is gone or its node is down).
    ``default_stdout`` is the output pattern of a job that names none, and
    of an array task. ``max_array_size`` bounds array task indices (Slurm's
    ``MaxArraySize``: 0 to one less). With ``predict`` the controller trains a runtime
    predictor from the store and stamps pending jobs with its estimates
    (``engine.estimates``); with ``windows`` it switches to
    ``window_policy(open windows)`` at each window boundary.
    """

    profile_factory: ProfileFactory
    nodes: Sequence[Node] = ()
    qos: Mapping[str, QoS] = field(default_factory=lambda: {"normal": QoS("normal")})
    partitions: Mapping[str, Partition] = field(
        default_factory=lambda: {"default": Partition("default")}
    )
    accounts: AccountTree | None = None
    reservations: Sequence[Reservation] = ()
    principals: Sequence[PrincipalSpec] = ()
    default_partition: str | None = None
    default_qos: str | None = None
    default_account: str = "default"
    interval_s: float = 10.0
    sched_min_interval_s: float = 0.0
    heartbeat_interval_s: float = 15.0
    heartbeat_timeout_s: float = 120.0
    kill_grace_s: int = 30
    max_array_size: int = 1001
    default_stdout: tuple[str, str] = ("slurm-%j.out", "slurm-%A_%a.out")
    backstop_s: float = 60.0
    workload_window: int = 1000
    output_read_limit: int = 1 << 20
    fairshare: FairshareArgs | None = None
    priority_calc_s: int = 300
    predict: PredictArgs | None = None
    windows: Sequence[WindowConfig] = ()
    window_policy: Callable[[tuple[str, ...]], WindowPolicy] | None = None
    document: Mapping[str, Any] | None = None
    """The configuration document this setup was built from (the effective config at start)."""
    validate_config: Callable[[dict[str, Any]], None] | None = None
    """Checks a whole configuration document before a patch is stored (raises Invalid)."""
    pools: Sequence[NodePool] = ()
    """Node pools the autoscaler (``autoscale``; its defaults when None) grows and shrinks
    through ``provider`` (``controller.scaling``)."""
    autoscale: AutoscaleArgs | None = None
    provider: ProviderConfig | None = None
    reconfigure: Callable[[Mapping[str, Any]], ControllerSetup] | None = None
    """The setup a patched configuration document describes (raises Invalid naming the key).

    When set, a patch takes effect at the next cycle: new QoS, partitions,
    accounts, reservations, principals and scheduling profile. Nodes, the
    store and the server's timings stay as they are until a restart.
    """


def setup_from_config(built: Built, document: Mapping[str, Any] | None = None) -> ControllerSetup:
    """The controller's settings from a checked configuration (``ControllerConfig.build()``).

    ``document`` is the configuration as JSON (``ControllerConfig.to_dict()``);
    with it, a configuration patch rebuilds the setup the same way.
    """
    server = built.server
    ordering = built.policy.config.ordering
    return ControllerSetup(
        profile_factory=built.profile,
        nodes=built.nodes,
        qos=built.qos,
        partitions=built.partitions,
        accounts=built.accounts,
        reservations=built.reservations,
        principals=[
            PrincipalSpec(
                name=p.name, role=p.role, account=p.default_account or "", accounts=p.accounts
            )
            for p in built.principals.values()
        ],
        default_partition=built.default_partition,
        default_qos=built.default_qos,
        interval_s=server.interval_s,
        sched_min_interval_s=server.sched_min_interval_s,
        heartbeat_interval_s=server.heartbeat_interval_s,
        heartbeat_timeout_s=server.heartbeat_timeout_s,
        kill_grace_s=server.kill_grace_s,
        max_array_size=server.max_array_size,
        default_stdout=(server.default_stdout, server.default_array_stdout),
        fairshare=ordering.multifactor.fairshare,
        priority_calc_s=server.priority_calc_s,
        predict=built.policy.config.predict,
        windows=built.policy.config.windows,
        window_policy=built.windowed,
        document=document,
        pools=built.pools,
        autoscale=built.policy.config.autoscale,
        provider=built.provider,
        reconfigure=rebuild_setup if document is not None else None,
    )


def rebuild_setup(document: Mapping[str, Any]) -> ControllerSetup:
    """The setup a whole configuration document describes; Invalid names every bad key
    where it is in the document (``body.patch.principals[2].name``)."""
    from gpufleet.controller.config import ConfigError, config_from_dict, document_path
    from gpufleet.controller.errors import Invalid

    try:
        config = config_from_dict(document, "config")
        built = config.build("config")
    except ConfigError as e:
        found = []
        for problem in e.problems:
            key, _, message = problem.partition(": ")
            where = document_path(document, key) if message else ""
            found.append(("body.patch" + (f".{where}" if where else ""), message or key))
        raise Invalid(*found[0], more=found[1:]) from None
    return setup_from_config(built, config.to_dict())
