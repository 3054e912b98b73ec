"""From a submission to the controller's job rows: arrays, dependencies, signals, paths.

Everything a user types is checked here, once, and every complaint is an
``Invalid`` naming the body field (``body.array``). The syntax is Slurm's:

* ``array``: ``0-999``, ``1,3,5``, ``0-15:4`` (a step), any of them with
  ``%N`` to run at most N tasks at a time;
* ``dependency``: ``afterok:1:2,afternotok:3,afterany:4_2,singleton``
  (``,`` means all must hold; an array job id stands for all its tasks);
* ``signal``: ``[B:]SIG[@seconds]`` (``USR1@90``);
* output paths: ``%j`` job id, ``%A`` array job id, ``%a`` array index,
  ``%x`` job name, ``%u`` user, ``%%`` a percent sign;
* ``constraint``: node features, ``a100&ib|zone=eu`` (``core.constraints``).

Node names (``nodelist``, ``exclude``) are checked against the nodes the
controller knows when the job is submitted (``check_nodes``).
"""

from __future__ import annotations

import re
import signal as signals
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from gpufleet.api.schemas import MAX_ARRAY_TASKS, JobSubmit
from gpufleet.controller.errors import Invalid
from gpufleet.core.constraints import parse_constraint
from gpufleet.core.job import Partition
from gpufleet.core.model import InvalidSpec, Node, Request
from gpufleet.core.pools import NodePool
from gpufleet.policies.autoscale import serves

DEPENDENCY_KINDS = ("afterok", "afternotok", "afterany")
_JOB_REF = re.compile(r"^[0-9]{1,18}(_[0-9]{1,9})?$")
_RANGE = re.compile(r"^([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?$")
_SIGNAL = re.compile(r"^(B:)?([A-Z0-9]{1,16})(?:@([0-9]{1,6}))?$")
_PATTERN = re.compile(r"%(.)|%$")


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """The task indices of an array job, ascending, and its concurrency limit (None: none)."""

    indices: tuple[int, ...]
    limit: int | None


@dataclass(frozen=True, slots=True)
class Dependency:
    """What must happen before a job may start; every condition must hold."""

    afterok: tuple[str, ...] = ()
    afternotok: tuple[str, ...] = ()
    afterany: tuple[str, ...] = ()
    singleton: bool = False

    @property
    def refs(self) -> tuple[str, ...]:
        """Every job id named."""
        return self.afterok + self.afternotok + self.afterany


def parse_array(text: str) -> ArraySpec:
    """Parse ``0-999%50``-style text. Invalid('body.array') if malformed or too large."""
    field = "body.array"
    body, _, limit_text = text.strip().partition("%")
    limit: int | None = None
    if limit_text:
        if not limit_text.isdigit() or int(limit_text) < 1:
            raise Invalid(field, f"the %N limit must be a positive integer, got {limit_text!r}")
        limit = int(limit_text)
    indices: set[int] = set()
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            raise Invalid(field, f"{part!r} is not N, N-M or N-M:STEP")
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        step = int(m[3]) if m[3] is not None else 1
        if hi < lo or step < 1:
            raise Invalid(field, f"{part!r}: the range must ascend with a positive step")
        if (hi - lo) // step + 1 + len(indices) > MAX_ARRAY_TASKS:
            raise Invalid(field, f"more than {MAX_ARRAY_TASKS} tasks")
        indices.update(range(lo, hi + 1, step))
    return ArraySpec(tuple(sorted(indices)), limit)


def parse_dependency(text: str) -> Dependency:
    """Parse ``afterok:1:2,singleton``-style text. Invalid('body.dependency') if malformed."""
    field = "body.dependency"
    lists: dict[str, list[str]] = {k: [] for k in DEPENDENCY_KINDS}
    singleton = False
    for part in text.strip().split(","):
        part = part.strip()
        if part == "singleton":
            singleton = True
            continue
        kind, _, refs = part.partition(":")
        if kind not in lists:
            raise Invalid(
                field, f"{part!r}: expected {', '.join(DEPENDENCY_KINDS)} or singleton"
            )
        ids = refs.split(":") if refs else []
        if not ids:
            raise Invalid(field, f"{kind} names no job")
        for ref in ids:
            if not _JOB_REF.match(ref):
                raise Invalid(field, f"{ref!r} is not a job id (123 or 123_4)")
        lists[kind].extend(ids)
    return Dependency(
        tuple(lists["afterok"]), tuple(lists["afternotok"]), tuple(lists["afterany"]), singleton
    )


def parse_signal(text: str) -> tuple[str, int]:
    """The signal name (without SIG) and seconds before the limit of ``[B:]SIG[@seconds]``."""
    m = _SIGNAL.match(text.strip().upper())
    name = m[2].removeprefix("SIG") if m else ""
    known = (name.isdigit() and 0 < int(name) < 65) or hasattr(signals, "SIG" + name)
    if m is None or not known:
        raise Invalid("body.signal", f"{text!r} is not [B:]SIG[@seconds] with a known signal")
    return name, int(m[3]) if m[3] else 60


def expand_path(
    pattern: str,
    *,
    workdir: str,
    job_id: str,
    array_job_id: str,
    task: int | None,
    name: str,
    user: str,
) -> str:
    """Expand Slurm's ``%`` patterns and make the path absolute under ``workdir``."""
    values = {
        "j": job_id,
        "A": array_job_id,
        "a": str(task) if task is not None else "",
        "x": name or "job",
        "u": user,
        "%": "%",
    }

    def one(m: re.Match[str]) -> str:
        return values.get(m[1] or "", m[0])

    return _absolute(_PATTERN.sub(one, pattern) if "%" in pattern else pattern, workdir)


def output_paths(
    spec: Mapping[str, Any],
    *,
    job_id: str,
    array_job_id: str | None,
    task: int | None,
    name: str,
    user: str,
) -> tuple[str, str]:
    """The absolute stdout and stderr paths of a job whose spec is ``spec``.

    As Slurm: with no ``stdout`` pattern, ``slurm-%j.out`` (``slurm-%A_%a.out``
    for an array task, ``array_job_id`` not None); with no ``stderr``, stderr
    goes where stdout goes.
    """
    stdout = spec.get("stdout") or ("slurm-%A_%a.out" if array_job_id else "slurm-%j.out")
    stderr = spec.get("stderr") or stdout

    def expand(pattern: str) -> str:
        return expand_path(
            pattern,
            workdir=spec["workdir"],
            job_id=job_id,
            array_job_id=array_job_id or job_id,
            task=task,
            name=name,
            user=user,
        )

    out = expand(stdout)
    return out, out if stderr == stdout else expand(stderr)


@lru_cache(maxsize=4096)  # listings repeat a few workdirs and file names many times
def _absolute(path: str, workdir: str) -> str:
    pure = PurePosixPath(path)
    return str(pure if pure.is_absolute() else PurePosixPath(workdir) / pure)


def check_spec(spec: JobSubmit) -> tuple[Request, ArraySpec | None, Dependency | None]:
    """The core request of one task, and the parsed array and dependency; Invalid if bad.

    The path names and workdir must be absolute-compatible; a request that
    asks for nothing or mixes GPU shapes is refused with the body field.
    """
    if (spec.command is None) == (spec.script is None):
        raise Invalid("body.command", "give exactly one of command and script")
    if not spec.workdir.startswith("/"):
        raise Invalid("body.workdir", "must be an absolute path")
    if "\x00" in spec.workdir or any("\x00" in a for a in spec.command or ()):
        raise Invalid("body.command", "must not contain NUL characters")
    if spec.signal is not None:
        parse_signal(spec.signal)
    if spec.constraint:
        try:
            parse_constraint(spec.constraint)
        except InvalidSpec as e:
            raise Invalid("body.constraint", e.reason) from None
    try:
        request = Request(
            cpu_milli=spec.cpus_per_task * 1000,
            memory_mib=spec.mem_mib,
            gpus=spec.gpus_per_node,  # with gpu_milli too: refused, not dropped
            gpu_milli=spec.gpu_milli,
            gpu_memory_mib=spec.gpu_memory_mib,
            mig_profile=spec.mig_profile or "",
            mig_count=spec.mig_count,
            gpu_models=frozenset([spec.gpu_type]) if spec.gpu_type else frozenset(),
            nodes=spec.nodes,
        )
    except InvalidSpec as e:
        raise Invalid("body." + e.field.removeprefix("request."), e.reason) from None
    array = parse_array(spec.array) if spec.array is not None else None
    dependency = parse_dependency(spec.dependency) if spec.dependency is not None else None
    return request, array, dependency


def check_nodes(
    spec: JobSubmit, node_named: Callable[[str], Node | None], partition: Partition
) -> None:
    """Refuse a nodelist or exclude list the job could never run with; Invalid names the field.

    ``node_named`` finds a node the controller knows now (declared in its
    configuration or registered by an agent), None for a name it does not.
    As Slurm's "Invalid node name specified", a name it does not know is
    refused, even one whose agent registers later. A nodelist is where the
    job runs, all of it, so it must name nodes of ``partition``, at least
    ``nodes`` of them, and none that ``exclude`` names too.
    """
    listed: dict[str, Node] = {}
    for field, names in (("body.nodelist", spec.nodelist), ("body.exclude", spec.exclude)):
        unknown: set[str] = set()
        for name in names:
            node = node_named(name)
            if node is None:
                unknown.add(name)
            elif field == "body.nodelist":
                listed[name] = node
        if unknown:
            more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            raise Invalid(field, f"no node {min(unknown)!r}{more}")
    if not listed:
        return
    both = sorted(listed.keys() & set(spec.exclude))
    if both:
        raise Invalid("body.exclude", f"{both[0]!r} is also in the nodelist")
    p = partition
    if p.nodes or p.pools:
        outside = sorted(
            n for n, node in listed.items() if n not in p.nodes and node.pool not in p.pools
        )
        if outside:
            raise Invalid("body.nodelist", f"{outside[0]!r} is not in partition {p.name}")
    if len(listed) < spec.nodes:
        raise Invalid(
            "body.nodelist",
            f"names {len(listed)} node(s) but the job asks for {spec.nodes} (nodes)",
        )


def request_to_json(r: Request) -> dict[str, object]:
    """A request as the store keeps it (``gpu_models`` a sorted list)."""
    return {
        "cpu_milli": r.cpu_milli,
        "memory_mib": r.memory_mib,
        "gpus": r.gpus,
        "gpu_milli": r.gpu_milli,
        "gpu_memory_mib": r.gpu_memory_mib,
        "mig_profile": r.mig_profile,
        "mig_count": r.mig_count,
        "gpu_models": sorted(r.gpu_models),
        "min_gpu_memory_mib": r.min_gpu_memory_mib,
        "nodes": r.nodes,
    }


def request_from_json(data: dict[str, object]) -> Request:
    """The inverse of ``request_to_json``."""
    models = data.get("gpu_models") or []
    assert isinstance(models, list)
    values = {k: v for k, v in data.items() if k != "gpu_models"}
    return Request(gpu_models=frozenset(str(m) for m in models), **values)  # type: ignore[arg-type]


def _could_hold(node: Node, r: Request) -> bool:
    """Whether an empty, healthy ``node`` could hold one task of ``r`` (its labels aside:
    a constraint no node meets waits with ReqNodeNotAvail, as documented)."""
    if node.cpu_milli < r.cpu_milli or node.memory_mib < r.memory_mib:
        return False
    gpus = [g for g in node.gpus if not r.gpu_models or g.model in r.gpu_models]
    if r.gpu_milli:
        return any(g.memory_mib >= r.gpu_memory_mib for g in gpus)
    if r.mig_profile:
        return bool(gpus)  # whether a layout can cut the slices is the cycle's to say
    return len(gpus) >= r.gpus


def check_capacity(
    r: Request, partition: Partition, nodes: Sequence[Node], pools: Sequence[NodePool]
) -> None:
    """Refuse a request the partition could never hold, as sbatch's "Node count
    specification invalid" and "Requested node configuration is not available"; Invalid
    names the field.

    ``nodes`` are the nodes the controller knows now (declared or registered) and
    ``pools`` the node pools: a pool that serves the partition may still add nodes
    of its template up to its ``max_nodes``, so a request one of them could hold is
    accepted and waits for them. A partition with no known node and no pool is not
    judged: its agents may not have registered yet.
    """
    p = partition
    members = [
        n for n in nodes if (not p.nodes and not p.pools) or n.name in p.nodes or n.pool in p.pools
    ]
    growing = [pool for pool in pools if serves(pool, p)]
    if not members and not growing:
        return
    counts = {pool.name: 0 for pool in growing}
    for n in nodes:
        if n.pool in counts:
            counts[n.pool] += 1
    shapes = [(n, 1) for n in members] + [
        (pool.template, max(0, pool.max_nodes - counts[pool.name])) for pool in growing
    ]
    total = sum(k for _, k in shapes)
    grow = " (its pools' room to grow included)" if growing else ""
    if total < r.nodes:
        raise Invalid("body.nodes", f"{r.nodes} nodes, but partition {p.name} has {total}{grow}")
    capable = sum(k for n, k in shapes if _could_hold(n, r))
    if capable >= r.nodes:
        return
    fits = [n for n, k in shapes if k]
    models = sorted({g.model for n in fits for g in n.gpus})
    gpu_task = r.gpus or r.gpu_milli or r.mig_profile
    if gpu_task and r.gpu_models and not r.gpu_models & set(models):
        raise Invalid(
            "body.gpu_type",
            f"no node of partition {p.name} has GPU model {min(r.gpu_models)!r}"
            f" (its models: {', '.join(models) or 'none'})",
        )
    of = f" {min(r.gpu_models)}" if r.gpu_models else ""
    if r.cpu_milli and not any(n.cpu_milli >= r.cpu_milli for n in fits):
        field, what = "body.cpus_per_task", f"{r.cpu_milli // 1000} CPUs"
    elif r.memory_mib and not any(n.memory_mib >= r.memory_mib for n in fits):
        field, what = "body.mem_mib", f"{r.memory_mib} MiB of memory"
    elif r.gpus:
        field, what = "body.gpus_per_node", f"{r.gpus}{of} GPUs"
    elif r.gpu_milli and r.gpu_memory_mib:
        field, what = "body.gpu_memory_mib", f"{r.gpu_memory_mib} MiB of one{of} GPU's memory"
    elif r.gpu_milli:
        field, what = "body.gpu_milli", f"a share of one{of} GPU"
    elif r.mig_profile:
        field, what = "body.mig_profile", f"{r.mig_profile} slices of a{of} GPU"
    else:
        field, what = "body.nodes", "one task"
    if capable:
        raise Invalid(
            "body.nodes",
            f"{r.nodes} nodes, but only {capable} of partition {p.name} could hold {what}{grow}",
        )
    raise Invalid(field, f"no node of partition {p.name} could hold {what}{grow}")
