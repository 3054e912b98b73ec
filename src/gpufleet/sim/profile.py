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

A profile may build on others: ``extends = "base.toml"`` (or a list, laid in
order) names files relative to this one, whose data lie under this file's
(``overlay``): tables merge key by key, arrays of named tables (``[[qos]]``,
``[[partitions]]``, ...) merge entry by entry by ``name``, and anything else
in this file replaces the base's value. A cycle of ``extends`` is refused.

A ``[predict]`` table gives the replay a runtime predictor
(``policies.predict``); ``[[windows]]`` switch the policy by the hour
(``policies.windows``), on a clock that ``[sim] time_origin`` anchors.
Each window's policy is checked at load time, laid over the file.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.core.accounts import Account, User
from gpufleet.core.cycle import SchedulingProfile
from gpufleet.core.job import Partition, QoS
from gpufleet.core.model import InvalidSpec, Node, Request
from gpufleet.core.pools import NodePool
from gpufleet.engine.estimates import Estimates
from gpufleet.policies.autoscale import autoscaler
from gpufleet.policies.config import Policy, PolicyConfig, cap_problems, overlay
from gpufleet.policies.predict import QuantilePredictor
from gpufleet.policies.priority import Multifactor
from gpufleet.policies.validation import first_problem
from gpufleet.policies.windows import Windows, WindowSwitch
from gpufleet.sim.autoscale import fleet_for
from gpufleet.sim.driver import (
    ProgressFn,
    Regime,
    SimConfig,
    SimResult,
    Simulation,
    Steer,
    default_qos,
)
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
    data: dict[str, Any] = field(default_factory=dict, repr=False)
    """The file's data, ``[sim]`` and ``[[windows]]`` left out: what windows are laid over."""
    source: str = ""
    """The file it was read from, for errors found later (empty when not from a file)."""

    def qos_table(self) -> dict[str, QoS]:
        return {**default_qos(preempt=self.policy.config.preemption.enabled), **self.qos}

    def shares(self) -> dict[str, float]:
        return {a.name: a.shares for a in self.policy.config.accounts}

    def associations(self) -> tuple[list[Account], list[User]]:
        """The account tree the file defines, as accounts and users."""
        c = self.policy.config
        return [Account(**a.model_dump()) for a in c.accounts], [
            User(**u.model_dump()) for u in c.users
        ]

    def build(self, workload: Sequence[Request], seed: int) -> SchedulingProfile:
        """The scheduling plugins, with placement scorers fitted to ``workload``."""
        return self.policy.profile(workload, seed)

    def windowed(self, names: tuple[str, ...]) -> SimProfile:
        """This profile with the named windows' policies laid over it, in file order."""
        data = self.data
        for w in self.policy.config.windows:
            if w.name in names:
                data = overlay(data, w.policy)
        return profile_from_dict(data, self.name)


def profile_windows(profile: SimProfile, workload: Sequence[Request]) -> WindowSwitch[Regime]:
    """A profile's windows for the driver: each set's scheduling profile, QoS, partitions
    and autoscaler."""
    origin = profile.config.origin()
    assert origin is not None  # profile_from_dict insists on one with windows

    def regime(open_windows: tuple[str, ...]) -> Regime:
        p = profile.windowed(open_windows)
        scheduling = p.build(workload, profile.config.seed)
        scaler = autoscaler(p.policy.config.autoscale)
        return Regime(scheduling, p.qos_table(), p.partitions, scaler)

    return WindowSwitch(Windows(profile.policy.config.windows, origin, ZoneInfo), regime)


def default_profile() -> SimProfile:
    """What an empty policy file gives (``policies.config``'s defaults)."""
    return profile_from_dict({}, "default")


def load_profile(path: Path) -> SimProfile:
    """Read and check a profile; ``ProfileError`` names the file and key on bad input."""
    data = read_profile(path)
    try:
        profile = profile_from_dict(data, path.stem)
    except ProfileError as e:
        raise ProfileError(f"{path}: {e}") from None
    profile.source = str(path)
    return profile


EXTENDS = "extends"


def read_profile(path: Path) -> dict[str, Any]:
    """A profile file's data with the files it ``extends`` laid under it.

    ``ProfileError`` names the file for one that cannot be read, a bad
    ``extends`` and a cycle of them.
    """
    return _read(path, ())


def with_bases(data: dict[str, Any], root: Path, source: str) -> dict[str, Any]:
    """``data`` laid over the files its ``extends`` names, relative to ``root``.

    ``source`` names ``data`` in errors (a sweep spec's inline profile has no file).
    """
    return _with_bases(data, root, source, ())


def _read(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    try:
        data = read_toml(path)
    except UnreadableToml as e:
        raise ProfileError(f"{path}: {e}") from None
    return _with_bases(data, path.parent, str(path), (*chain, path.resolve()))


def _with_bases(
    data: dict[str, Any], root: Path, source: str, chain: tuple[Path, ...]
) -> dict[str, Any]:
    data = dict(data)
    bases = data.pop(EXTENDS, [])
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) and b for b in bases):
        raise ProfileError(f"{source}: {EXTENDS}: must be a file name or a list of them")
    merged: dict[str, Any] = {}
    for base in bases:
        path = root / base
        if path.resolve() in chain:
            cycle = " -> ".join(str(p) for p in (*chain, path.resolve()))
            raise ProfileError(f"{source}: {EXTENDS}: {base} leads back to itself ({cycle})")
        if not path.is_file():
            raise ProfileError(f"{source}: {EXTENDS}: {path}: no such file")
        merged = overlay(merged, _read(path, chain))
    return overlay(merged, data)


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
    rest.pop("windows", None)
    profile = SimProfile(
        name=name,
        policy=policy,
        config=config,
        qos=policy.qos if "qos" in rest else {},
        partitions=policy.partitions if "partitions" in rest else {},
        data=rest,
    )
    _check_windows(profile)
    return profile


def _check_windows(profile: SimProfile) -> None:
    """Every window has a clock to run on, a known time zone, and a policy that validates."""
    windows = profile.policy.config.windows
    if windows and profile.config.origin() is None:
        raise ProfileError(
            "sim.time_origin: windows need the trace's time origin: 'epoch' (its times "
            "are Unix seconds) or the date and time of its time 0"
        )
    for w in windows:
        try:
            ZoneInfo(w.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ProfileError(f"windows.{w.name}.tz: unknown time zone {w.tz!r}") from None
        try:
            profile.windowed((w.name,))
        except ProfileError as e:
            raise ProfileError(f"windows.{w.name}.policy.{e}") from None


def ordering_warning(profile: SimProfile, jobs: Sequence[TraceJob]) -> str | None:
    """Why the profile's ordering may not order as it seems on ``jobs``; None if it does.

    SJF orders by time limit. A job the trace gives none gets the driver's
    default, its runtime rounded up to ``limit_round_s``, so SJF without
    oracle limits ties every job under that step and runs them in FIFO order.
    """
    config = profile.policy.config
    if config.ordering.plugin != "sjf" or profile.config.oracle_limits:
        return None
    if config.predict is not None and config.predict.ordering:
        return None  # it orders by estimates, not limits
    missing = sum(1 for job in jobs if job.time_limit_s is None)
    if not missing:
        return None
    step = profile.config.limit_round_s
    return (
        f"{profile.name}: sjf orders by time limit and {missing} of {len(jobs)} jobs have none, "
        f"so they are ordered by the default limit, the runtime rounded up to {step} s "
        "(limit_round_s): jobs shorter than that tie and run in FIFO order; "
        "set [sim] oracle_limits = true to order by the real runtime"
    )


def check_pools(profile: SimProfile, pools: Sequence[NodePool]) -> None:
    """``ProfileError`` naming the file and key when a replay with ``pools`` would run a
    profile whose ``[autoscale.max_nodes]`` (its own or a window's) caps another pool,
    as the live configuration check refuses it. Without pools the table is not used."""
    if not pools:
        return
    problems = cap_problems(profile.policy.config, (p.name for p in pools))
    if problems:
        known = ", ".join(p.name for p in pools)
        where = profile.source or profile.name
        raise ProfileError(f"{where}: {problems[0]} (the cluster's pools: {known})")


_SHOWN = 5
"""Known names an unknown one's error lists at most."""


def check_nodes(profile: SimProfile, nodes: Sequence[Node], pools: Sequence[NodePool] = ()) -> None:
    """``ProfileError`` naming the file, key and name when the profile's partitions or
    reservations (its own or a window's) name a node or pool the cluster has not, as the
    live configuration check refuses them: their jobs would never start."""
    known = {"node": [n.name for n in nodes], "pool": [n.pool for n in nodes]}
    known["pool"] += [p.name for p in pools]
    names = {what: set(listed) for what, listed in known.items()}

    def missing(what: str, name: str) -> bool:
        pooled = what == "node" and any(p.owns(name) for p in pools)
        return name not in names[what] and not pooled

    policy = profile.policy
    configs = [("", policy.config)] + [
        (f"windows.{w.name}.policy.", policy.windowed((w.name,)).config)
        for w in policy.config.windows
    ]
    for at, config in configs:
        refs = [(f"partitions.{p.name}.nodes", "node", p.nodes) for p in config.partitions]
        refs += [(f"partitions.{p.name}.pools", "pool", p.pools) for p in config.partitions]
        refs += [(f"reservations.{r.name}.nodes", "node", r.nodes) for r in config.reservations]
        for key, what, listed in refs:
            name = next((n for n in listed if missing(what, n)), None)
            if name is None:
                continue
            shown = list(dict.fromkeys(known[what]))
            cluster = ", ".join(shown[:_SHOWN]) + (", ..." if len(shown) > _SHOWN else "")
            where = profile.source or profile.name
            raise ProfileError(
                f"{where}: {at}{key}: unknown {what} {name!r} (the cluster's {what}s: {cluster})"
            )


def replay(
    nodes: Sequence[Node],
    jobs: Sequence[TraceJob],
    profile: SimProfile,
    progress: ProgressFn | None = None,
    pools: Sequence[NodePool] = (),
    steer: Steer | None = None,
    wake: Collection[int] = (),
) -> SimResult:
    """Replay ``jobs`` on ``nodes`` under ``profile``; fairshare usage is tracked for
    multifactor ordering. ``pools`` grow and shrink under the profile's ``[autoscale]``
    table (its defaults without one). ``steer`` and ``wake``: see ``sim.driver``.

    ``ProfileError`` as ``check_pools`` and ``check_nodes``.
    """
    check_pools(profile, pools)
    check_nodes(profile, nodes, pools)
    workload = [t.request for t in jobs]
    sched = profile.build(workload, profile.config.seed)
    ordering = sched.ordering
    predict = profile.policy.config.predict
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
        associations=profile.associations(),
        fairshare=fairshare,
        progress=progress,
        estimates=Estimates(QuantilePredictor(predict)) if predict is not None else None,
        windows=profile_windows(profile, workload) if profile.policy.config.windows else None,
        fleet=fleet_for(pools, profile.policy.config.autoscale) if pools else None,
        steer=steer,
        wake=wake,
    )
    return sim.run()
