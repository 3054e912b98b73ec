"""Run the fill experiment over a grid of policies and seeds.

Every (policy, seed) run is independent and CPU-bound, so runs go to worker
processes. Workers read the trace files themselves rather than receiving the
parsed nodes: a ``Node`` holds a read-only mapping that does not pickle, and
reading the files again costs a fraction of a second against seconds per run.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from gpufleet.core.job import gpu_milli_equivalent
from gpufleet.core.model import InvalidSpec, Node
from gpufleet.core.state import ClusterState
from gpufleet.policies.registry import PLACEMENT, UnknownPolicy
from gpufleet.sim.cluster import load_cluster_arg
from gpufleet.sim.fill import FillRun, run_fill
from gpufleet.sim.openb import TracePod, load_pods


class SweepError(ValueError):
    """Input that lets no run start or finish; the message is one line naming the file."""


@dataclass(frozen=True)
class Trace:
    """The node list and pod list that every run of a sweep reads."""

    nodes: Path
    pods: Path

    def load(self) -> tuple[list[Node], list[TracePod]]:
        """Read and check both files. Raises ``TraceError`` or ``SweepError``."""
        nodes = load_cluster_arg(str(self.nodes))
        pods = load_pods(self.pods)
        try:
            capacity = ClusterState(nodes).gpu_milli_capacity
        except InvalidSpec as e:
            raise SweepError(f"{self.nodes}: {e}") from None
        if capacity == 0:
            raise SweepError(f"{self.nodes}: holds no GPUs, so there is nothing to fill")
        if not any(gpu_milli_equivalent(p.request) for p in pods):
            raise SweepError(f"{self.pods}: requests no GPUs, so it can never fill the cluster")
        return nodes, pods


def _run(
    nodes: Sequence[Node],
    pods: Sequence[TracePod],
    policy: str,
    seed: int,
    tune: float,
    record: bool,
) -> FillRun:
    try:
        return run_fill(nodes, pods, policy, seed, tune=tune, record=record)
    except ValueError as e:
        # Re-raised as a one-argument error, which survives the trip back
        # from a worker process (TraceError's constructor does not).
        raise SweepError(f"{policy}, seed {seed}: {e}") from None


_loaded: tuple[list[Node], list[TracePod]] | None = None


def _init_worker(trace: Trace) -> None:
    global _loaded
    _loaded = trace.load()


def _run_in_worker(policy: str, seed: int, tune: float, record: bool) -> FillRun:
    if _loaded is None:
        raise RuntimeError("worker started without _init_worker")
    return _run(*_loaded, policy, seed, tune, record)


def run_sweep(
    trace: Trace,
    policies: Sequence[str],
    seeds: Sequence[int],
    *,
    tune: float = 1.3,
    record: bool = False,
    workers: int = 1,
    on_done: Callable[[FillRun], None] | None = None,
) -> list[FillRun]:
    """Fill the cluster once per (policy, seed), on up to ``workers`` processes.

    Returns the runs policy by policy, seeds in the order given, whatever
    order they finished in; ``on_done`` hears of each run as it finishes.
    With one worker (or one run) everything runs in this process. Bad input
    raises ``UnknownPolicy``, ``TraceError`` or ``SweepError`` before any run
    starts.
    """
    for policy in policies:
        if policy not in PLACEMENT:
            raise UnknownPolicy(policy)
    nodes, pods = trace.load()
    grid = [(policy, seed) for policy in policies for seed in seeds]
    done: dict[tuple[str, int], FillRun] = {}

    def finish(run: FillRun) -> None:
        done[run.policy, run.seed] = run
        if on_done is not None:
            on_done(run)

    workers = max(1, min(workers, len(grid)))
    if workers == 1:
        for policy, seed in grid:
            finish(_run(nodes, pods, policy, seed, tune, record))
        return [done[key] for key in grid]

    # spawn, not fork: the caller may be running a progress thread, and a
    # forked child of a threaded process can deadlock on a lock it copied.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_worker, initargs=(trace,)
    ) as pool:
        futures = [pool.submit(_run_in_worker, p, s, tune, record) for p, s in grid]
        try:
            for future in as_completed(futures):
                finish(future.result())
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return [done[key] for key in grid]
