"""Policy files for the simulator: the scheduler's policy file plus a ``[sim]`` table.

A profile is a policy file as ``policies.config`` reads it (ordering,
placement, backfill, preemption, QoS, partitions, accounts, reservations;
see docs/scheduling.md), with one more optional table for the driver's own
settings (``sim.driver.SimConfig``)::

    [ordering]
    plugin = "multifactor"
    [placement]
    plugin = "default"
    [backfill]
    mode = "easy"
    [sim]
    interval_s = 60
    mtbf_s = 2592000

The file's QoS and partitions are laid over the driver's built-in ones (the
QoS per priority class and ``preemptible``; a partition per name in the
trace), so a file need only name what it changes. Account shares in
``[[accounts]]`` are the fairshare entitlements. Errors are ``ProfileError``
with one line naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.core.cycle import SchedulingProfile
from gpufleet.core.job import Partition, QoS
from gpufleet.core.model import InvalidSpec, Node, Request
from gpufleet.policies.config import Policy, PolicyConfig
from gpufleet.policies.priority import Multifactor
from gpufleet.policies.validation import first_problem
from gpufleet.sim.driver import ProgressFn, SimConfig, SimResult, Simulation, default_qos
from gpufleet.sim.traces.record import TraceJob


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the file and the key."""


@dataclass
class SimProfile:
    """A validated profile: the scheduler's policy, what it overrides, and the driver settings.

    ``qos`` and ``partitions`` hold only what the file defines; the driver's
    built-ins fill in the rest.
    """

    name: str
    policy: Policy
    config: SimConfig
    qos: dict[str, QoS]
    partitions: dict[str, Partition]

    def qos_table(self) -> dict[str, QoS]:
        return {**default_qos(preempt=self.policy.config.preemption.enabled), **self.qos}

    def shares(self) -> dict[str, float]:
        return {a.name: a.shares for a in self.policy.config.accounts}

    def build(self, workload: Sequence[Request], seed: int) -> SchedulingProfile:
        """The scheduling plugins, with placement scorers fitted to ``workload``."""
        return self.policy.profile(workload, seed)


def default_profile() -> SimProfile:
    """What an empty policy file gives (``policies.config``'s defaults)."""
    return profile_from_dict({}, "default")


def load_profile(path: Path) -> SimProfile:
    """Read and check a profile; ``ProfileError`` names the file and key on bad input."""
    try:
        data = read_toml(path)
    except UnreadableToml as e:
        raise ProfileError(f"{path}: {e}") from None
    try:
        return profile_from_dict(data, path.stem)
    except ProfileError as e:
        raise ProfileError(f"{path}: {e}") from None


def profile_from_dict(data: dict[str, Any], name: str) -> SimProfile:
    """A profile from a parsed file; ``ProfileError`` names the key on bad input."""
    rest = dict(data)
    sim = rest.pop("sim", {})
    try:
        config = SimConfig.model_validate(sim)
    except ValidationError as e:
        raise ProfileError(first_problem(SimConfig, sim, e, at="sim")) from None
    try:
        policy = Policy(PolicyConfig.model_validate(rest))
    except ValidationError as e:
        raise ProfileError(first_problem(PolicyConfig, rest, e)) from None
    except InvalidSpec as e:
        raise ProfileError(str(e)) from None
    return SimProfile(
        name=name,
        policy=policy,
        config=config,
        qos=policy.qos if "qos" in rest else {},
        partitions=policy.partitions if "partitions" in rest else {},
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
    sim = Simulation(
        nodes,
        jobs,
        sched,
        name=profile.name,
        config=profile.config,
        qos=profile.qos_table(),
        partitions=profile.partitions,
        reservations=profile.policy.reservations,
        shares=profile.shares(),
        fairshare=fairshare,
        progress=progress,
    )
    return sim.run()
