"""Parameter sweeps: one replay per point of a grid of profile settings.

A sweep spec is a TOML file with an optional base profile and a ``[grid]``
table that maps dotted profile keys to lists of values::

    profile = "policy.toml"        # or a [profile] table, or nothing (defaults)

    [grid]
    "ordering.multifactor.weight_fairshare" = [0, 1000, 10000]
    "backfill.mode" = ["easy", "conservative"]

The runs are the cartesian product of the lists, the first key varying
slowest. Every point is checked with the profile's own validation before any
run starts. Points are independent replays, so they run on worker processes
or as Ray tasks; each worker reads the cluster and the trace itself (a
``Node`` does not pickle, and reading costs little against a replay) and
receives only plain TOML data. Results come back in grid order whatever
order they finished in, and a replay is deterministic, so a sweep's results
do not depend on how many workers ran it (only ``wall_s`` does).
"""

from __future__ import annotations

import copy
import functools
import itertools
import logging
import math
import multiprocessing
import os
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.adapters.tomlfile import UnreadableToml, read_toml
from gpufleet.core.model import InvalidSpec
from gpufleet.sim.cluster import load_inputs
from gpufleet.sim.metrics import summarize
from gpufleet.sim.profile import (
    ProfileError,
    check_nodes,
    check_pools,
    ordering_warning,
    profile_from_dict,
    read_profile,
    replay,
    with_bases,
)
from gpufleet.sim.traces import absolute_spec

RAY_MISSING = "--ray needs the 'ray' extra: pip install 'gpufleet[ray]'"

MAX_POINTS = 10_000
"""The most points one sweep runs: a grid that multiplies out further is refused
before any point is checked, rather than queueing replays for days."""


class GridError(ValueError):
    """A sweep spec or a grid point that cannot run; one line naming the file or key."""


Settings = dict[str, Any]


@dataclass(frozen=True)
class SweepSpec:
    """A base profile (parsed TOML data) and the values each dotted key takes."""

    base: dict[str, Any]
    grid: dict[str, list[Any]]

    def points(self) -> list[Settings]:
        """The grid's settings, one dict per run, the first key varying slowest."""
        keys = list(self.grid)
        return [
            dict(zip(keys, values, strict=True))
            for values in itertools.product(*self.grid.values())
        ]

    def profile_data(self, settings: Settings) -> dict[str, Any]:
        """The base profile with ``settings`` laid over it, as ``profile_from_dict`` takes it."""
        data = copy.deepcopy(self.base)
        for key, value in settings.items():
            *tables, leaf = key.split(".")
            table = data
            for i, part in enumerate(tables):
                table = table.setdefault(part, {})
                if not isinstance(table, dict):
                    where = ".".join(tables[: i + 1])
                    raise GridError(f"grid key {key!r}: {where} is not a table in the profile")
            table[leaf] = value
        return data


@dataclass(frozen=True)
class Run:
    """One grid point's settings and its ``metrics.summarize`` summary."""

    settings: Settings
    summary: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"settings": self.settings, "summary": self.summary}


def point_name(settings: Settings) -> str:
    """A profile name for a point: its settings as ``key=value``, comma-separated."""
    return ",".join(f"{key}={value}" for key, value in settings.items())


def load_spec(path: Path) -> SweepSpec:
    """Read a sweep spec and check every point; ``GridError`` names the file and key."""
    try:
        data = read_toml(path)
    except UnreadableToml as e:
        raise GridError(f"{path}: {e}") from None
    try:
        spec = spec_from_dict(data, path.parent)
    except (GridError, ProfileError) as e:
        raise GridError(f"{path}: {e}") from None
    return spec


def spec_from_dict(data: dict[str, Any], root: Path) -> SweepSpec:
    """A spec from parsed TOML; a ``profile`` path is read relative to ``root``.

    Raises ``GridError`` for a malformed spec, for a grid of more than
    ``MAX_POINTS`` points, and for the first grid point the profile
    validation rejects, naming the point and the key.
    """
    unknown = sorted(set(data) - {"profile", "grid"})
    if unknown:
        raise GridError(f"{unknown[0]}: unknown key (known: profile, grid)")
    base = _base(data.get("profile", {}), root)
    grid = data.get("grid")
    if not isinstance(grid, dict) or not grid:
        raise GridError("grid: must be a table of at least one dotted key = [values]")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise GridError(f"grid.{key}: must be a non-empty list of values")
    # Counted before the lists are searched for repeats, which takes quadratic time.
    points = math.prod(len(values) for values in grid.values())
    if points > MAX_POINTS:
        raise GridError(f"grid: {points} points, more than {MAX_POINTS}; split the sweep")
    for key, values in grid.items():
        for i, value in enumerate(values):
            if value in values[:i]:
                raise GridError(f"grid.{key}: {value!r} is listed twice")
    spec = SweepSpec(base, grid)
    for settings in spec.points():
        try:
            profile_from_dict(spec.profile_data(settings), point_name(settings))
        except ProfileError as e:
            raise GridError(f"grid point {point_name(settings)}: {e}") from None
    return spec


def _base(profile: object, root: Path) -> dict[str, Any]:
    if isinstance(profile, dict):
        return with_bases(profile, root, "profile")
    if not isinstance(profile, str):
        raise GridError("profile: must be a path to a policy file or a [profile] table")
    try:
        return read_profile(root / profile)
    except ProfileError as e:
        raise GridError(f"profile: {e}") from None


# ``sim.cluster.load_inputs`` (nodes, a cluster file's pools, jobs) cached, so a worker
# process reads them once however many points it runs.
_inputs = functools.lru_cache(maxsize=1)(load_inputs)


def ordering_warnings(cluster: str, trace: str, spec: SweepSpec) -> list[str]:
    """``profile.ordering_warning`` of each grid point that has one, in grid order."""
    _, _, jobs = _inputs(*absolute_paths(cluster, trace))
    warnings = []
    for settings in spec.points():
        profile = profile_from_dict(spec.profile_data(settings), point_name(settings))
        warning = ordering_warning(profile, jobs)
        if warning:
            warnings.append(warning)
    return warnings


def run_point(cluster: str, trace: str, data: dict[str, Any], name: str) -> dict[str, Any]:
    """Replay ``trace`` on ``cluster`` under the profile ``data`` and summarise it.

    Top-level and plain-data in, plain-data out, so it runs in a worker
    process or as a Ray task. Errors come back as ``GridError``, whose
    one-argument constructor survives pickling (``TraceError``'s does not).
    """
    try:
        nodes, pools, jobs = _inputs(cluster, trace)
        profile = profile_from_dict(data, name)
        result = replay(nodes, jobs, profile, pools=pools)
        return summarize(result, profile.config.deadline_factor)
    except (ValueError, InvalidSpec) as e:
        raise GridError(f"{name}: {e}") from None


def absolute_paths(cluster: str, trace: str) -> tuple[str, str]:
    """``cluster`` and ``trace`` with existing file paths made absolute.

    A Ray worker need not share this process's working directory.
    """
    if Path(cluster).exists():
        cluster = str(Path(cluster).resolve())
    return cluster, absolute_spec(trace)


Done = Callable[[int], None]


def run_grid(
    cluster: str,
    trace: str,
    spec: SweepSpec,
    *,
    workers: int = 1,
    ray_address: str | None = None,
    on_done: Done | None = None,
) -> list[Run]:
    """Replay every grid point; the runs come back in grid order.

    Reads the cluster and trace here first, so bad files fail before any
    run, as does a point whose ``[autoscale]`` caps a pool the cluster lacks
    (``profile.check_pools``) or that names a node or pool it lacks
    (``check_nodes``). Workers read the cluster file themselves, its
    ``[[pools]]`` with it. Without ``ray_address`` the points run on up to ``workers``
    processes (in this process when that is one); with it, each point is a
    task on the Ray cluster at that address (``"local"`` starts one here).
    ``on_done`` hears the count of finished points as they finish.
    """
    cluster, trace = absolute_paths(cluster, trace)
    nodes, pools, _ = _inputs(cluster, trace)
    points = spec.points()
    tasks = [(cluster, trace, spec.profile_data(s), point_name(s)) for s in points]
    for _, _, data, name in tasks:
        try:
            profile = profile_from_dict(data, name)
            check_pools(profile, pools)
            check_nodes(profile, nodes, pools)
        except ProfileError as e:
            raise GridError(f"grid point {name}: {e}") from None
    if ray_address is not None:
        summaries = _on_ray(ray_address, tasks, on_done)
    else:
        summaries = _on_processes(workers, tasks, on_done)
    return [Run(s, summary) for s, summary in zip(points, summaries, strict=True)]


Task = tuple[str, str, dict[str, Any], str]


def _on_processes(workers: int, tasks: Sequence[Task], on_done: Done | None) -> list[Any]:
    results: list[Any] = [None] * len(tasks)
    workers = max(1, min(workers, len(tasks)))
    if workers == 1:
        for i, task in enumerate(tasks):
            results[i] = run_point(*task)
            if on_done is not None:
                on_done(i + 1)
        return results
    # spawn, not fork: the caller may run a progress thread, and a forked
    # child of a threaded process can deadlock on a lock it copied.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = {pool.submit(run_point, *task): i for i, task in enumerate(tasks)}
        try:
            for count, future in enumerate(as_completed(futures), start=1):
                results[futures[future]] = future.result()
                if on_done is not None:
                    on_done(count)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return results


RAY_CONNECT_TIMEOUT_S = 3.0


def check_ray_address(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Raise ``GridError`` in one line unless something answers at a ``--ray`` address.

    ``ray.init`` retries an address nobody listens at for minutes while
    printing warnings, so a HOST:PORT (or ray://HOST:PORT) is tried with one
    TCP connect first. 'local' starts a cluster and 'auto' finds one through
    Ray's own files; both are left to Ray, as is 'auto' with RAY_ADDRESS set
    to 'auto' or 'local'.
    """
    target = os.environ.get("RAY_ADDRESS", address) if address == "auto" else address
    if target in ("local", "auto") or not target:
        return
    host, sep, port = target.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # an IPv6 literal: [::1]:6379
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise GridError(f"--ray {address}: expected 'local', 'auto' or HOST:PORT, got {target!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        reason = e.strerror or str(e) or type(e).__name__
        where = f"--ray {address}: no Ray cluster answers at {host}:{port}"
        raise GridError(f"{where} ({reason})") from None


def _on_ray(address: str, tasks: Sequence[Task], on_done: Done | None) -> list[Any]:
    try:
        import ray  # an optional extra: imported only when asked for
    except ImportError:
        raise GridError(RAY_MISSING) from None
    check_ray_address(address)
    try:
        # Ray's INFO lines (where it started, what it found) say nothing a sweep's reader needs.
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise GridError(f"--ray {address}: {e}") from None
    try:
        remote = ray.remote(run_point)
        refs = [remote.remote(*task) for task in tasks]
        pending = list(refs)
        while pending:
            _, pending = ray.wait(pending)
            if on_done is not None:
                on_done(len(refs) - len(pending))
        return list(ray.get(refs))
    except ray.exceptions.RayTaskError as e:
        # The task's own one-line error, not Ray's multi-line traceback.
        raise GridError(str(e.cause)) from None
    finally:
        ray.shutdown()
