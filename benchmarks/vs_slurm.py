"""How close does a replay of a Slurm cluster's history come to what Slurm did?

A seeded GPU workload (``--jobs`` jobs of 1, 2, 4, 8 or 16 GPUs, 5-90 s of
``sleep``, time limits 1.5-4x the runtime, Poisson arrivals) is submitted in
real time to a real Slurm 22.05 on this machine (``--slurm-tools DIR`` holds
``slurmsim.sh``, which runs Slurm's daemons on one host: 16 nodes x 8 fake
GPUs, slurmdbd, ``sched/backfill`` with ``bf_interval=5`` and the default
``bf_resolution=60``, multifactor priority with age, job size and a GPU TRES
weight). Its
``sacct -P`` export is then replayed by gpufleet under the configuration
``gpufleet import slurm`` makes of the same ``slurm.conf``, ``gres.conf`` and
``sacctmgr`` tables, and each job's start in the replay is compared with its
start in Slurm (both counted from the first submission):

* ``spearman``: rank correlation of the start times;
* ``far_pct``: % of jobs whose starts differ by more than 30 s;
* ``mean_diff_s``: mean of (replay start - Slurm start).

The export is replayed twice: as imported (``imported``: Slurm's structure, a
backfill pass every ``bf_interval`` and its main pass on the events between,
with starts estimated as Slurm's select plugin estimates them, on the
export's clock: times counted from midnight, so holds round as Slurm's do),
and under gpufleet's own cycle (``gpufleet_cycle``: ``backfill.interval_s = 0`` and
``will_run_window_s = 0``, so backfill at every event, with exact estimates).

``decisions`` compares decisions rather than histories: the imported
replay is steered to start every job when and where Slurm did (``sim.driver``
steering), and at each cycle the profile still says what it would start in
that same state. For each of Slurm's starts, the % the profile would first
have made in the same second, 1 s before, 2-5 s before, over 5 s before, or
not before Slurm. A free replay's figures above cascade from any one
different decision; these do not.

``--origin first`` counts the replay's times from the first submission, as
before the replay kept the clock's phase. ``--clock-shift S`` replays the
jobs S seconds later on the clock: Slurm's figures stay, the replay's holds
round elsewhere in the minute. It measures how much a second of phase alone
moves the figures.

``--against FILE`` adds ``slurm_again``: the same figures for another Slurm
run of the same workload (jobs matched by name), against this one: how far
Slurm is from itself.

With ``--export FILE --conf DIR`` no Slurm runs: a saved export and the
folder of its ``slurm.conf``, ``gres.conf`` and ``sacctmgr`` tables are
replayed (``benchmarks/data/vs_slurm/`` holds the runs docs/benchmarks.md
quotes). ``--out DIR`` keeps a run's export and files for that. The daemons
are started and stopped by ``slurmsim.sh`` (by PID file) in a temporary folder.

    python benchmarks/vs_slurm.py --slurm-tools DIR --seed 1 --json

Needs the Slurm packages (``slurmsim.sh install`` with ``ACCT=slurmdbd``); CI never
runs it, but replays a saved export with ``--quick`` (which runs 20 jobs through
Slurm, and replays an export as it is, in seconds). The JSON result is the last
line of stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tomli_w
from scipy.stats import spearmanr

from gpufleet.adapters.inventory import expand_hostlist, load_cluster
from gpufleet.adapters.slurmconf import import_slurm
from gpufleet.core.cycle import NodeMask, Plan, Snapshot
from gpufleet.core.model import Node
from gpufleet.core.placement import PlacementProfile, Placer
from gpufleet.core.state import Assignment
from gpufleet.sim.profile import profile_from_dict, replay
from gpufleet.sim.traces.record import TraceJob
from gpufleet.sim.traces.sacct import SacctOptions, load_sacct

FIELDS = (
    "JobID,JobName,User,Account,Partition,QOS,Submit,Start,End,Elapsed,Timelimit,State,"
    "NNodes,NodeList,ReqTRES,AllocTRES"
)


def workload(n: int, seed: int, mean_gap_s: float) -> list[dict[str, int]]:
    """Jobs as (submit offset, GPUs, runtime, limit in minutes), by submit time."""
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(1 / mean_gap_s)
        gpus = rng.choice([1, 1, 1, 2, 2, 4, 8, 16])
        run = rng.randint(5, 90)
        limit_min = max(1, math.ceil(run * rng.uniform(1.5, 4.0) / 60))
        jobs.append({"submit": round(t), "gpus": gpus, "run": run, "limit_min": limit_min})
    return jobs


def _slurm(tools: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run(["bash", str(tools / "slurmsim.sh"), *args], env=env, check=True)


def run_slurm(tools: Path, jobs: list[dict[str, int]], out: Path) -> Path:
    """Run ``jobs`` through a real Slurm; the export and the Slurm files go to ``out``."""
    root = Path(tempfile.mkdtemp(prefix="slurmsim-"))
    root.chmod(0o755)  # munged runs as munge and must reach its socket folder
    env = {**os.environ, "SIM_ROOT": str(root), "NNODES": "16", "GPUS": "8", "ACCT": "slurmdbd"}
    env["SLURM_CONF"] = str(root / "etc" / "slurm.conf")
    _slurm(tools, env, "start")
    try:
        origin = time.time()
        for k, job in enumerate(jobs):
            time.sleep(max(0.0, origin + job["submit"] - time.time()))
            nodes = 2 if job["gpus"] > 8 else 1
            subprocess.run(
                [
                    "sbatch",
                    "--quiet",
                    f"--job-name=j{k:04d}",
                    "--account=sim_acct",  # slurmsim.sh's account, so fairshare has a tree
                    f"--nodes={nodes}",
                    f"--gres=gpu:{job['gpus'] // nodes}",
                    f"--time={job['limit_min']}",
                    f"--output={root}/jobs/%j.out",
                    f"--wrap=sleep {job['run']}",
                ],
                env=env,
                check=True,
            )
        while subprocess.run(
            ["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip():
            time.sleep(2)
        time.sleep(3)  # let the last records reach slurmdbd
        export = out / "sacct.txt"
        with export.open("w") as f:
            subprocess.run(
                ["sacct", "-a", "-X", "-P", "-S", "now-1days", "-o", FIELDS],
                env=env,
                stdout=f,
                check=True,
            )
        for name, cmd in (("qos.txt", ["show", "qos"]), ("assoc.txt", ["show", "assoc"])):
            with (out / name).open("w") as f:
                fmt = ["format=Cluster,Account,User,Partition,ParentName,Share,Priority"]
                extra = fmt if name == "assoc.txt" else []
                subprocess.run(["sacctmgr", "-P", *cmd, *extra], env=env, stdout=f, check=True)
        for name in ("slurm.conf", "gres.conf"):
            shutil.copy(root / "etc" / name, out / name)
    finally:
        _slurm(tools, env, "stop")
        shutil.rmtree(root, ignore_errors=True)
    return out / "sacct.txt"


def _imported(conf: Path) -> tuple[list[Node], dict[str, Any]]:
    """The nodes and the policy ``gpufleet import slurm`` makes of the files in ``conf``."""
    qos, assoc = conf / "qos.txt", conf / "assoc.txt"
    imported = import_slurm(
        conf / "slurm.conf",
        gres=conf / "gres.conf",
        qos=qos if qos.exists() else None,
        assoc=assoc if assoc.exists() else None,
    )
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Path(tmp) / "cluster.toml"
        cluster.write_text(tomli_w.dumps(imported.cluster))
        return load_cluster(cluster), imported.policy


Origin = Literal["first", "day"]


def _trace(export: Path, shift_s: int, origin: Origin) -> tuple[list[TraceJob], int]:
    """The export's jobs, ``shift_s`` later, and the replay time of its first submission
    (time 0 of Slurm's starts). Times from midnight (``origin="day"``) keep the clock's
    phase, on which Slurm rounds its holds."""
    trace = load_sacct(export, SacctOptions(origin=origin))
    trace = [replace(t, submit_time=t.submit_time + shift_s) for t in trace]
    return trace, min(t.submit_time for t in trace)


def compare(
    export: Path, conf: Path, own_cycle: bool, shift_s: int = 0, origin: Origin = "day"
) -> dict[str, float]:
    """Replay ``export`` under the import of ``conf``; the figures against Slurm's starts."""
    nodes, policy = _imported(conf)
    if own_cycle:
        policy["backfill"].update(interval_s=0, will_run_window_s=0)
    trace, first = _trace(export, shift_s, origin)
    result = replay(nodes, trace, profile_from_dict(policy, "imported"))
    starts = {r.job.id: r.first_start - first for r in result.jobs if r.first_start >= 0}
    return figures(_real_starts(export), starts)


def decisions(
    export: Path, conf: Path, shift_s: int = 0, origin: Origin = "day"
) -> dict[str, float]:
    """The imported replay made to start every job when and where Slurm did (steered):
    at each cycle the profile still decides what it would start in that same state.
    The % of Slurm's starts it would first have made in the same second, 1 s before,
    2-5 s before, over 5 s before, or not before Slurm (later, or never in the same state).

    One decision at a time, without the cascade a different one sets off in a free
    replay: what remains is the profile's rule, and when its passes run.
    """
    nodes, policy = _imported(conf)
    trace, first = _trace(export, shift_s, origin)
    real = {job: first + at for job, at in _real_starts(export).items()}
    hosts = _real_nodes(export)
    due: defaultdict[int, list[str]] = defaultdict(list)
    for job, at in real.items():
        due[at].append(job)
    wanted: dict[str, int] = {}

    def follow_slurm(snapshot: Snapshot, plan: Plan) -> Plan:
        now, state = snapshot.now, snapshot.state
        for job in plan.starts:
            wanted.setdefault(job, now)
        pending = {j.id: j for j in snapshot.pending}
        starts: dict[str, list[Assignment]] = {}
        for job in due.get(now, ()):
            if job not in pending:
                continue
            mask = np.zeros(state.num_nodes, dtype=np.bool_)
            mask[[state.index[h] for h in hosts[job]]] = True
            placed = Placer(PlacementProfile("slurm", (), [NodeMask(mask)])).place(
                state, pending[job].request
            )
            if placed is not None:  # taken from the state until all are placed
                starts[job] = placed
        for placed in starts.values():
            for a in placed:
                state.release(a)
        return Plan(starts=starts, backfilled=plan.backfilled)

    replay(nodes, trace, profile_from_dict(policy, "imported"), steer=follow_slurm, wake=due)
    # How long before Slurm the profile first started each job; -1: not before Slurm.
    early = [at - wanted[j] if wanted.get(j, at + 1) <= at else -1 for j, at in real.items()]

    def pct(low: int, high: int) -> float:
        return round(100 * sum(low <= e <= high for e in early) / len(early), 1)

    return {
        "jobs": len(early),
        "same_second_pct": pct(0, 0),
        "1s_before_pct": pct(1, 1),
        "2_5s_before_pct": pct(2, 5),
        "over_5s_before_pct": pct(6, 10**9),
        "not_before_pct": pct(-1, -1),
    }


def figures(real_start: dict[str, int], other_start: dict[str, int]) -> dict[str, float]:
    """How far ``other_start`` is from ``real_start``, over the jobs both started."""
    ids = [i for i in real_start if other_start.get(i, -1) >= 0]
    real = [real_start[i] for i in ids]
    other = [other_start[i] for i in ids]
    diffs = [o - r for o, r in zip(other, real, strict=True)]
    return {
        "jobs": len(ids),
        "spearman": round(float(spearmanr(real, other).statistic), 4),
        "far_pct": round(100 * sum(abs(d) > 30 for d in diffs) / len(diffs), 1),
        "mean_diff_s": round(sum(diffs) / len(diffs), 1),
    }


def _real_starts(export: Path, key: str = "JobID") -> dict[str, int]:
    """Each job's Slurm start, in seconds after the export's first submission, by
    ``key`` (``JobName`` matches the same workload's jobs across Slurm runs)."""
    rows = [line.split("|") for line in export.read_text().splitlines()]
    head = rows[0]
    col = {name: k for k, name in enumerate(head)}
    submits, starts = [], {}
    for row in rows[1:]:
        if (
            len(row) < len(head)
            or "." in row[col["JobID"]]
            or row[col["Start"]] in ("Unknown", "None")
        ):
            continue
        submits.append(datetime.fromisoformat(row[col["Submit"]]))
        starts[row[col[key]]] = datetime.fromisoformat(row[col["Start"]])
    origin = min(submits)
    return {k: int((v - origin).total_seconds()) for k, v in starts.items()}


def _real_nodes(export: Path) -> dict[str, list[str]]:
    """Each started job's nodes in Slurm (``NodeList`` expanded), by ``JobID``."""
    rows = [line.split("|") for line in export.read_text().splitlines()]
    col = {name: k for k, name in enumerate(rows[0])}
    return {
        row[col["JobID"]]: expand_hostlist(row[col["NodeList"]])
        for row in rows[1:]
        if len(row) == len(rows[0]) and row[col["NodeList"]] not in ("", "None assigned")
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slurm-tools", type=Path, help="the folder of slurmsim.sh")
    ap.add_argument("--jobs", type=int, help="jobs run through Slurm (200; 20 with --quick)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mean-gap", type=float, default=0.6, help="mean seconds between submissions")
    ap.add_argument("--export", type=Path, help="replay this saved sacct export instead")
    ap.add_argument("--conf", type=Path, help="with --export: the folder of its Slurm files")
    ap.add_argument("--out", type=Path, help="keep the export and the Slurm files here")
    ap.add_argument(
        "--against",
        type=Path,
        help="another Slurm run's export of the same workload: Slurm against itself",
    )
    ap.add_argument("--json", action="store_true", help="only the JSON line on stdout")
    ap.add_argument("--quick", action="store_true", help="20 jobs (an export replays as it is)")
    ap.add_argument(
        "--clock-shift",
        type=int,
        default=0,
        help="replay the jobs this many seconds later on the clock (how much the phase "
        "within the minute moves the figures)",
    )
    ap.add_argument(
        "--origin",
        choices=("day", "first"),
        default="day",
        help="the replay's clock: from midnight, as Slurm's (day), or from the first "
        "submission (first: holds rounded off the clock's minutes)",
    )
    args = ap.parse_args(argv)
    jobs = args.jobs or (20 if args.quick else 200)
    if args.export is not None:
        if args.conf is None:
            ap.error("--export needs --conf")
        export, conf = args.export, args.conf
    else:
        if args.slurm_tools is None:
            ap.error("--slurm-tools is needed to run Slurm (or replay a saved --export)")
        conf = args.out or Path(tempfile.mkdtemp(prefix="vs-slurm-"))
        conf.mkdir(parents=True, exist_ok=True)
        export = run_slurm(args.slurm_tools, workload(jobs, args.seed, args.mean_gap), conf)
    result: dict[str, Any] = {
        "seed": args.seed if args.export is None else None,
        "jobs_submitted": jobs if args.export is None else None,
        "imported": compare(export, conf, False, args.clock_shift, args.origin),
        "gpufleet_cycle": compare(export, conf, True, args.clock_shift, args.origin),
        "decisions": decisions(export, conf, args.clock_shift, args.origin),
        "export": str(export),
    }
    if args.against is not None:
        again = _real_starts(args.against, "JobName")
        result["slurm_again"] = figures(_real_starts(export, "JobName"), again)
    if not args.json:
        for name in ("imported", "gpufleet_cycle"):
            print(name, result[name], file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
