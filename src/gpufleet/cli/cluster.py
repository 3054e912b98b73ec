"""Cluster commands: ``nodes`` (sinfo -N), ``drain`` and ``resume`` (scontrol update
node), ``partitions`` (sinfo -s), and the policy views ``qos``, ``accounts`` and
``reservations`` (sacctmgr show, scontrol show reservation)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.output import (
    JSON_HELP,
    compress_hostlist,
    connect,
    duration,
    print_json,
    print_table,
    reporting,
    timestamp,
)
from gpufleet.controller.views import GpuOut, NodeOut

Json = Annotated[bool, typer.Option("--json", help=JSON_HELP)]
FULL_MILLI = 1000


def gpu_cell(gpu: GpuOut) -> str:
    """One GPU's allocation: ``-`` free, ``F`` whole, ``.25`` a shared fraction,
    ``M`` MIG instances in use."""
    if gpu.mig and (gpu.jobs or gpu.other_jobs):
        return "M"
    if gpu.used_milli <= 0:
        return "-"
    if gpu.used_milli >= FULL_MILLI:
        return "F"
    return f".{gpu.used_milli:03d}".rstrip("0")


def _models(node: NodeOut) -> str:
    counts: dict[str, int] = {}
    for gpu in node.gpus:
        counts[gpu.model] = counts.get(gpu.model, 0) + 1
    return ",".join(f"{model}x{n}" for model, n in counts.items()) or "-"


def _reason(node: NodeOut) -> str:
    """The node's reason, then each GPU its agent masked and why: the node shows its
    Slurm state (idle, mixed) while a masked GPU takes no job and counts as used."""
    masks = [f"gpu {g.index} masked: {g.masked}" for g in node.gpus if g.masked]
    return "; ".join([node.reason, *masks] if node.reason else masks) or "-"


def _gpus_used(node: NodeOut) -> str:
    used = sum(min(g.used_milli, FULL_MILLI) for g in node.gpus) / FULL_MILLI
    return f"{used:g}/{len(node.gpus)}"


def nodes(json_out: Json = False) -> None:
    """List nodes like sinfo -N: state, CPUs, memory and each GPU's allocation.

    ALLOC has one mark per GPU: - free, F whole, .25 a shared fraction, M MIG.
    """
    with reporting("nodes"), connect() as client:
        found = client.nodes()
    if json_out:
        print_json(found)
        return
    print_table(
        ("NODELIST", "STATE", "CPUS(A/T)", "MEM(A/T)", "GPUS(A/T)", "GRES", "ALLOC", "REASON"),
        (
            (
                n.name,
                n.state,
                f"{n.cpu_milli_used / 1000:g}/{n.cpu_milli / 1000:g}",
                f"{n.memory_mib_used}/{n.memory_mib}",
                _gpus_used(n),
                _models(n),
                "".join(gpu_cell(g) for g in n.gpus) or "-",
                _reason(n),
            )
            for n in found
        ),
    )


def drain(
    node: Annotated[str, typer.Argument(help="The node's name.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (required, as in Slurm).")],
) -> None:
    """Start no more jobs on NODE; running jobs finish (operators)."""
    with reporting("drain"), connect() as client:
        client.node_action(node, "drain", reason)


def resume(
    node: Annotated[str, typer.Argument(help="The node's name.")],
    reason: Annotated[str, typer.Option("--reason", help="Recorded with the change.")] = "",
) -> None:
    """Undo a drain, or bring a down node back once its agent syncs (operators)."""
    with reporting("resume"), connect() as client:
        client.node_action(node, "resume", reason)


def partitions(json_out: Json = False) -> None:
    """List partitions like sinfo -s: nodes, time limits and queue counts."""
    with reporting("partitions"), connect() as client:
        found = client.partitions()
    if json_out:
        print_json(found)
        return
    print_table(
        ("PARTITION", "AVAIL", "DEFAULT", "TIMELIMIT", "PENDING", "RUNNING", "NODES"),
        (
            (
                p.name,
                p.state,
                "yes" if p.is_default else "no",
                duration(p.max_time_s or None),
                p.pending,
                p.running,
                compress_hostlist(p.nodes) or "-",
            )
            for p in found
        ),
    )


def qos(json_out: Json = False) -> None:
    """List the qualities of service like sacctmgr show qos."""
    with reporting("qos"), connect() as client:
        found = client.qos()
    if json_out:
        print_json(found)
        return

    def limit(n: int) -> str:
        return str(n) if n else "-"

    print_table(
        ("NAME", "PRIORITY", "PREEMPT", "MODE", "GRACE", "USAGEFACTOR", "MAXJOBSPU",
         "MAXGPUSPU", "MAXGPUSPA", "GRPGPUS", "MAXWALL"),
        (
            (
                q.name + (" (default)" if q.is_default else ""),
                q.priority,
                ",".join(q.preempt) or "-",
                q.preempt_mode,
                duration(q.grace_s),
                f"{q.usage_factor:g}",
                limit(q.max_jobs_per_user),
                limit(q.max_gpus_per_user),
                limit(q.max_gpus_per_account),
                limit(q.group_gpus),
                duration(q.max_wall_s) if q.max_wall_s else "-",
            )
            for q in found
        ),
    )  # fmt: skip


def accounts(json_out: Json = False) -> None:
    """The account tree like sacctmgr show assoc: accounts and their users, indented."""
    with reporting("accounts"), connect() as client:
        found = client.accounts()
    if json_out:
        print_json(found)
        return
    depth: dict[str, int] = {}
    rows = []
    for a in found:  # parents come before children
        level = depth.get(a.parent, -1) + 1 if a.parent else 0
        if a.kind == "account":
            depth[a.name] = level
        rows.append(
            (" " * level + a.name, a.kind, a.parent or "-", f"{a.shares:g}",
             f"{a.normalized_shares:.4f}")
        )  # fmt: skip
    print_table(("NAME", "KIND", "PARENT", "SHARES", "NORMSHARES"), rows)


def reservations(json_out: Json = False) -> None:
    """List reservations like scontrol show reservation, by start time."""
    with reporting("reservations"), connect() as client:
        found = client.reservations()
    if json_out:
        print_json(found)
        return
    print_table(
        ("NAME", "START", "END", "NODES", "GPUS", "USERS", "ACCOUNTS", "FLAGS"),
        (
            (
                r.name,
                timestamp(r.start),
                timestamp(r.end),
                compress_hostlist(r.nodes) or "-",
                r.gpus or "-",
                ",".join(r.users) or "-",
                ",".join(r.accounts) or "-",
                "MAINT" if r.maintenance else "-",
            )
            for r in found
        ),
    )


def register(app: typer.Typer) -> None:
    """Add the cluster commands to ``app``."""
    for command in (nodes, drain, resume, partitions, qos, accounts, reservations):
        app.command()(command)
