"""The already-built values a controller runs with, whatever file they came from.

``controller.config`` turns the configuration file into a ``ControllerSetup``;
tests build one directly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.api.schemas import Role
from gpufleet.core.accounts import AccountTree
from gpufleet.core.cycle import SchedulingProfile
from gpufleet.core.job import Partition, QoS, Reservation
from gpufleet.core.model import Node, Request

ProfileFactory = Callable[[Sequence[Request]], SchedulingProfile]
"""Builds a fresh scheduling profile for a workload (recent requests, for fgd/default)."""


@dataclass(frozen=True, slots=True)
class PrincipalSpec:
    """A configured user: its role and the account it charges by default."""

    name: str
    role: Role = "user"
    account: str = ""


@dataclass(frozen=True)
class ControllerSetup:
    """Cluster, policy and server settings.

    ``nodes`` are the declared nodes (agents may register more). With no
    ``default_partition``/``default_qos`` the first of each is the default.
    ``interval_s`` is the scheduling period between event-driven cycles;
    ``heartbeat_timeout_s`` after an agent's last sync its node is down and
    its runs NODE_FAIL. ``workload_window`` is how many recent submissions
    make the placement workload.
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
    heartbeat_interval_s: float = 15.0
    heartbeat_timeout_s: float = 120.0
    kill_grace_s: int = 30
    workload_window: int = 1000
    output_read_limit: int = 1 << 20
    validate_config: Callable[[dict[str, Any]], None] | None = None
    """Checks a whole configuration document before a patch is stored (raises Invalid)."""
