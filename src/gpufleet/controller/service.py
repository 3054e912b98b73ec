"""The controller's service: every operation the HTTP API (and the CLI's direct
store commands) performs, with its permission checks, in one class.

Routers stay thin: they authenticate with ``authenticate``, call one method
with keyword arguments and serialise the result. Methods raise only the
``controller.errors`` types for anything a caller did wrong (``NotFound``,
``Forbidden``, ``Invalid`` naming the field, ``Conflict``); anything else is
a bug.

Roles: ``admin`` may do everything; ``operator`` sees every job and node and
may cancel, hold, release or requeue anyone's job and drain or resume nodes
(its holds are admin holds, which a ``user`` cannot release);
``user`` submits and acts on its own jobs only (another user's job is
``NotFound`` to it, so job ids leak nothing); ``node`` may only register and
sync as its own node.

Durability: a method returns only after what it changed is committed, so an
acknowledged submission survives a crash of the controller. Scheduling
decisions are persisted before any agent can see them.

Threading: every method is safe to call from many threads at once. All
methods are blocking except ``wait_for_agent_work`` (a coroutine); an async
server runs the blocking ones in its thread pool.

Placement workload: fragmentation-aware placement (``fgd``, the ``default``
profile) measures each option against the requests the cluster expects.
Each submission's request (one per array job, not per task) enters a
``core.workload.WorkloadWindow`` of the last ``workload_window``
submissions, refilled from the store on start. A cycle rebuilds the
scheduling profile from the window when the mix has drifted by
``PROFILE_DRIFT`` or more (total variation distance) since the last build,
at most once every ``PROFILE_MIN_S`` seconds, so a steady mix never costs a
rebuild and a sudden change is followed within a minute. With no
submission yet, ``core.workload.TYPICAL`` stands in.

Runtime prediction and policy windows run through the same pure code as in
the simulator. With ``[policy.predict]`` an ``engine.Estimates`` is trained
on start from the store's finished jobs in the order they ended, learns
from each job that ends by itself (the length of the run that ended it),
stamps each job it queues and re-estimates the queue before a cycle after
new finishes. With ``[[policy.windows]]`` a ``WindowSwitch`` on Unix time
gives the policy in force; the loop runs a cycle at each boundary, and a
switch is logged, audited (``policy.window``) and shown by
``gpufleet_policy_window_open``.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import logging
import math
import os
import pwd
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import numpy as np
import sqlalchemy as sa

from gpufleet.adapters.inventory import ClusterFileError, nodes_from_groups, with_mig
from gpufleet.adapters.store import GroupWriter, Store
from gpufleet.adapters.store import tables as t
from gpufleet.api.agent_schemas import (
    KILL_RESEND_S,
    MAX_RETRY_S,
    AgentRegister,
    AgentSync,
    Checkpointed,
    JobKill,
    JobLaunch,
    MigDone,
    NodeHealth,
    RegisterReply,
    RunRef,
    RunReport,
    SyncReply,
)
from gpufleet.api.schemas import (
    MAX_TIME_S,
    TERMINAL_STATES,
    HoldKind,
    JobEvent,
    JobOut,
    JobPage,
    JobStateName,
    JobSubmit,
    Role,
    Submitted,
)
from gpufleet.controller import accounting, dashboard, fairshare, persist, relayout
from gpufleet.controller.clock import Clock, WallClock
from gpufleet.controller.dashboard import ClusterMap, NodePage
from gpufleet.controller.drift import drift
from gpufleet.controller.errors import Conflict, Forbidden, Invalid, NotFound
from gpufleet.controller.jobspec import (
    check_capacity,
    check_nodes,
    check_spec,
    output_paths,
    request_from_json,
    request_to_json,
)
from gpufleet.controller.live import (
    ACTIVE_STATES,
    HOLD_REASONS,
    LiveJob,
    NodeInfo,
    RowTexts,
    hold_kind,
    start_row,
)
from gpufleet.controller.loop import SchedulerLoop
from gpufleet.controller.metrics import Observation, PoolView, SchedulerMetrics, observe
from gpufleet.controller.output import Unreadable, read_slice
from gpufleet.controller.readings import NodeReadings, ReadingsBoard
from gpufleet.controller.relayout import MigOrders
from gpufleet.controller.scaling import LiveProvider, provider
from gpufleet.controller.setup import ControllerSetup, ProfileFactory, WindowPolicy
from gpufleet.controller.tokens import TokenCache, issue_token, list_tokens, revoke_token
from gpufleet.controller.views import (
    AccountOut,
    AuditEntry,
    AuditPage,
    ConfigOut,
    FairshareRow,
    GpuOut,
    NodeOut,
    OutputChunk,
    PartitionOut,
    PredictionReport,
    QosOut,
    ReservationOut,
    TokenCreated,
    TokenOut,
    UsageKey,
    UsageRow,
)
from gpufleet.core.accounts import AccountTree
from gpufleet.core.cycle import Plan, SchedulingProfile, run_cycle
from gpufleet.core.job import Job, JobState, PreemptMode, RunningJob, gpu_milli_equivalent
from gpufleet.core.model import Node, Request
from gpufleet.core.plan import Ranked
from gpufleet.core.state import Assignment, ClusterState
from gpufleet.core.workload import WorkloadWindow, or_typical
from gpufleet.engine.book import JobBook, Signalled
from gpufleet.engine.estimates import Estimates
from gpufleet.engine.fleet import Fleet
from gpufleet.policies import prediction_error
from gpufleet.policies.autoscale import Autoscaler, autoscaler
from gpufleet.policies.fairshare import FairshareArgs
from gpufleet.policies.predict import Features, QuantilePredictor
from gpufleet.policies.windows import Windows, WindowSwitch

DEFAULT_PAGE = 100
MAX_PAGE = 1000
DEFAULT_TIME_S = 3600
PROFILE_DRIFT = 0.1
"""How far the submissions' mix must move before the placement profile is rebuilt."""
PROFILE_MIN_S = 30.0
"""The least time between two rebuilds of the placement profile."""
MAX_BUCKETS = 1000
"""The most slices a prediction report splits the jobs into."""
USAGE_KEYS = ("user", "account", "partition", "qos")
BULK_TASKS = 1000
"""An array of this many tasks or more is built and committed with the collector paused."""
MAX_SHAPES = 10_000
"""Distinct requests remembered (for sharing, and as holdable); past this the memory
starts again."""
CONFIG_DIGEST = "config.file_digest"
"""store_meta key: the SHA-256 of the configuration file's document last stored."""
LEARNT_STATES = ("COMPLETED", "FAILED", "TIMEOUT")
"""How a job ends by itself: the runtime predictor learns from these, not from cancels."""
HEARTBEAT_LOST = "heartbeat lost"
"""The reason of a node marked down by silence; its agent's next registration or sync clears it."""
HEALTH_DRAIN = "health: "
"""How a drain by the node's own health checks begins its reason (they may lift it)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's user and role; ``node`` only for a node token.

    ``account`` is charged by the user's submissions that name none;
    ``accounts`` are all the accounts it may name (() with an ``account``:
    only that one; () without: any). ``configured`` is False for a token
    whose user has no ``[[principals]]`` entry (no account association).
    """

    user: str
    role: Role
    token_id: str = ""
    node: str | None = None
    account: str = ""
    accounts: tuple[str, ...] = ()
    configured: bool = True

    @property
    def allowed_accounts(self) -> tuple[str, ...]:
        """Every account the user may charge, the default first; () for any."""
        return tuple(dict.fromkeys(a for a in (self.account, *self.accounts) if a))

    @property
    def is_operator(self) -> bool:
        """Operators and admins act on anyone's jobs and on nodes."""
        return self.role in ("admin", "operator")


class Controller:
    """The live controller: store, in-memory job book and scheduling loop.

    ``db_url`` is a SQLAlchemy URL (``sqlite:///DIR/gpufleet.db`` or
    ``postgresql+psycopg://...``). Construction opens nothing; ``start``
    applies migrations, rebuilds the job book from the store and starts the
    scheduling loop, ``stop`` stops it. A controller that was never started
    refuses every call with ``Conflict``.
    """

    def __init__(
        self,
        *,
        setup: ControllerSetup,
        db_url: str,
        clock: Clock | None = None,
        schema: str | None = None,
    ) -> None:
        self.setup = setup
        self.clock: Clock = clock or WallClock()
        self.store = Store(db_url, schema=schema)
        # Never served as a job's output: the store's directory (its database, tokens).
        database = self.store.url.database or ""
        self._private_dirs: tuple[Path, ...] = (
            (Path(database).resolve().parent,)
            if self.store.is_sqlite and database and database != ":memory:"
            else ()
        )
        self.writer: GroupWriter | None = None
        # Submissions hand their committed jobs over through ``_intake``; whoever
        # takes ``_lock`` next adds them first, so submit never waits for a cycle.
        self._intake: list[tuple[list[LiveJob], Request, int]] = []
        self._intake_lock = threading.Lock()
        self._requests: dict[Request, Request] = {}  # see _interned
        self._lock = _StateLock(self._take_intake)
        self._ids = threading.Lock()
        self._next_num = 1
        self._next_pk = 1
        self._jobs: dict[str, LiveJob] = {}
        self._by_num: dict[int, set[str]] = defaultdict(set)
        self._nodes: dict[str, NodeInfo] = {}
        # (request, partition) pairs some nodes could hold (check_capacity): each
        # submission of a shape seen before skips the walk over every node; cleared
        # when the nodes change.
        self._holdable: set[tuple[Request, str]] = set()
        self._on_node: dict[str, set[str]] = defaultdict(set)
        self._final: dict[str, tuple[str, int | None]] = {}
        self._cleanup: dict[str, LiveJob] = {}
        self._tokens = TokenCache(self.store)
        self._gen: dict[str, int] = defaultdict(int)
        self._answered: dict[str, int] = {}
        # Per node, the kills last sent for each (job_id, run) and when: each is sent once.
        self._kills_sent: dict[str, dict[tuple[str, int], tuple[JobKill, float]]] = {}
        self._readings = ReadingsBoard()
        self._heartbeats: dict[str, float] = {}  # node -> a sync time not yet stored
        # Node -> the heartbeat this controller's start gave it, while it has not synced since.
        self._unheard: dict[str, float] = {}
        self._health: dict[str, NodeHealth] = {}  # each node's last health verdict
        # Per node, the work counter and held runs of its last empty answer (_quiet_sync).
        self._quiet: dict[str, tuple[int | None, frozenset[tuple[str, int]]]] = {}
        self._facts: dict[str, dict[str, Any]] = {}  # what each node's NVML reported
        self._mig = MigOrders()
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = (
            defaultdict(list)
        )
        self._window = WorkloadWindow(size=max(1, setup.workload_window))
        self._profile: SchedulingProfile | None = None
        self._profile_at = -math.inf
        self._estimated: set[str] = set()  # jobs the last plan gave an expected start
        self._ranked: Ranked | None = None  # the last plan's priorities, shown by _job_out
        self._estimates: Estimates | None = None
        self._windows: WindowSwitch[WindowPolicy] | None = None
        self._factory: ProfileFactory = setup.profile_factory
        self._next_switch: float | None = None  # the next window boundary
        self._loop: SchedulerLoop | None = None
        self._started = False
        # Node pools (setup.pools): the fleet decides after each cycle, the provider acts;
        # its autoscaler is the setup's, or the open policy windows'.
        self.fleet: Fleet | None = None
        self._scaler: Autoscaler = autoscaler(setup.autoscale)
        self.provider: LiveProvider | None = None
        self._derive()
        self.book = JobBook((), setup.qos, setup.partitions, reservations=setup.reservations)
        self.cycles = 0
        self.metrics = SchedulerMetrics()

    # -- lifecycle ---------------------------------------------------------------

    def start(self, *, loop: bool = True) -> None:
        """Migrate the store to head, rebuild state from it, start the loop.

        With ``loop=False`` no thread starts: the caller drives scheduling by
        ``run_cycle_now`` (tests with a manual clock). Running jobs are left
        running: their agents re-report them. Idempotent.
        """
        with self._lock:
            if self._started:
                return
            self.store.migrate()
            self.writer = GroupWriter(self.store)
            self._adopt_config()
            self._load()
            # Agents back off (up to MAX_RETRY_S) while the controller is away: a node
            # not heard from since this start gets that long on top of the timeout.
            self._unheard = {
                name: info.last_heartbeat
                for name, info in self._nodes.items()
                if info.last_heartbeat is not None
            }
            if self.setup.pools and self.setup.provider is not None:
                self._start_fleet()
            # What the store rebuilt lives as long as the service: the collector need not
            # walk it at every full collection, which a large cycle's allocations set off
            # several times (the first cycle after a restart: 3.7 s -> 0.9 s).
            gc.freeze()
            self._started = True
            if loop:
                self._loop = SchedulerLoop(
                    self._cycle_safely,
                    self.clock,
                    self.setup.interval_s,
                    min_interval_s=self.setup.sched_min_interval_s,
                    due=self._next_due,
                )
                self._loop.start()

    def _next_due(self) -> float | None:
        """When the loop must run a cycle before its timer: the next policy window's
        boundary, or the earliest heartbeat deadline, when a node still up goes DOWN
        (``_expire_nodes``) ``heartbeat_timeout_s`` after its last sync, not at the
        timer's next cycle. Read without the lock: a sync moving a deadline meanwhile
        only makes the loop look again."""
        timeout = self.setup.heartbeat_timeout_s
        due = self._next_switch
        for name, info in list(self._nodes.items()):
            last = info.last_heartbeat
            if info.state == "up" and last is not None:
                lost = last + self._restart_grace(name, last) + timeout
                if due is None or lost < due:
                    due = lost
        return due

    def _restart_grace(self, node: str, last: float) -> float:
        """MAX_RETRY_S for a node not heard from since this controller started (its agent
        may be backing off, as while the controller was away), else 0."""
        return MAX_RETRY_S if self._unheard.get(node) == last else 0.0

    def stop(self) -> None:
        """Stop the loop and the writer after in-flight commits; idempotent. Kills no job."""
        if self._loop is not None:
            self._loop.stop()
            self._loop = None
        if self.provider is not None:
            self.provider.close()
            self.provider = None
        with self._lock:
            if self.writer is not None:
                self.writer.stop()
                self.writer = None
            self._started = False
        self.store.close()
        gc.unfreeze()  # what this service leaves behind may be collected again

    def run_cycle_now(self) -> None:
        """Run one scheduling cycle synchronously and persist its effects (tests, admin)."""
        self._cycle_safely()

    # -- auth --------------------------------------------------------------------

    def authenticate(self, *, token: str) -> Principal | None:
        """The principal a bearer token stands for, or None if unknown or revoked.

        Compares SHA-256 digests, so the secret is never stored. A token revoked
        by another process stops working within ``tokens.CACHE_TTL_S`` seconds.
        """
        row = self._tokens.find(token)
        return None if row is None else self._principal(row)

    def authenticate_cached(self, *, token: str) -> Principal | None:
        """``authenticate`` from memory only: None when the token is not remembered
        (then ask ``authenticate``, which may read the store). Never blocks on I/O."""
        row = self._tokens.cached(token)
        return None if row is None else self._principal(row)

    def _principal(self, row: TokenOut) -> Principal:
        spec = self._principals.get(row.user)
        return Principal(
            user=row.user,
            role=row.role,
            token_id=row.id,
            node=row.node,
            account=spec.allowed[0] if spec and spec.allowed else "",
            accounts=spec.allowed if spec else (),
            configured=spec is not None,
        )

    def create_token(
        self,
        *,
        principal: Principal,
        name: str,
        user: str,
        role: Role,
        node: str | None = None,
    ) -> TokenCreated:
        """A new token (admin only). ``node`` is required for, and only for, role ``node``.

        Invalid on a bad role/node combination; the secret is returned once. Audited.
        """
        _require(principal, "admin")
        created = issue_token(
            self._writer(),
            name=name,
            user=user,
            role=role,
            node=node,
            now=self.clock.now(),
            who=principal.user,
        )
        return created

    def revoke_token(self, *, principal: Principal, token_id: str) -> None:
        """Revoke a token (admin only); NotFound if no such id. Idempotent. Audited."""
        _require(principal, "admin")
        revoke_token(self._writer(), token_id=token_id, now=self.clock.now(), who=principal.user)
        # A revoked token must stop working at once, so forget every cached answer.
        self._tokens.clear()

    def list_tokens(self, *, principal: Principal) -> list[TokenOut]:
        """Every token, revoked ones included (admin only), oldest first."""
        _require(principal, "admin")
        return list_tokens(self.store)

    # -- jobs --------------------------------------------------------------------

    def submit(self, *, principal: Principal, spec: JobSubmit) -> Submitted:
        """Queue a job (or an array job) for ``principal`` (user role or above).

        Fills defaults (partition, QoS, account, time limit), validates names
        and the array/dependency/signal syntax (``Invalid`` with ``body.X``),
        and returns after the job is committed. A ``request_id`` seen before
        for this user returns the first job with ``duplicate=True`` and
        creates nothing. The scheduler takes the job at its next cycle.
        """
        return self._submission(principal, spec).result()

    async def submit_async(self, *, principal: Principal, spec: JobSubmit) -> Submitted:
        """``submit`` for an event loop: checks in the caller's thread (no I/O), then
        awaits the commit without holding a thread. A caller cancelled meanwhile
        changes nothing: the job is committed and scheduled all the same."""
        return await asyncio.wrap_future(self._submission(principal, spec))

    def _job_account(self, principal: Principal, named: str | None) -> str:
        """The account a submission charges; Forbidden or Invalid naming ``body.account``.

        Without accounts configured every job charges the default account (or
        its principal's) and naming another is Invalid. With them, the account must exist, and a
        user may charge only its principal's accounts (any, for a principal
        listing none). A user with no principal entry has no association and
        may not submit at all, as Slurm's ``AccountingStorageEnforce=associations``;
        operators and admins may charge any account.
        """
        default = self.setup.default_account
        account = named or principal.account or default
        tree = self.setup.accounts
        if tree is None or len(tree) <= 1:
            if account != default and account not in principal.allowed_accounts:
                raise Invalid(
                    "body.account",
                    f"no account {account!r} (no accounts are configured; jobs charge {default!r})",
                )
            return account
        if not principal.is_operator and not principal.configured:
            raise Forbidden(
                f"body.account: {principal.user} has no account to charge"
                " (not a configured principal; ask an admin)"
            )
        # A missing account is the same mistake for anyone (422); 403 is for another's.
        if not _has_account(tree, account):
            if named is None and not principal.account:
                # As Slurm: the default account comes from an association, and one with
                # none (an admin's, say) must name the account.
                names = [
                    n for n, user in zip(tree.names[1:], tree.is_user[1:], strict=True) if not user
                ]
                raise Invalid(
                    "body.account",
                    f"{principal.user} has no default account; name one with --account"
                    f" (accounts: {', '.join(names)})",
                )
            raise Invalid("body.account", f"no account {account!r}")
        if not principal.is_operator:
            allowed = principal.allowed_accounts
            if allowed and account not in allowed:
                raise Forbidden(
                    f"body.account: {principal.user} may not charge account {account!r}"
                    f" (its accounts: {', '.join(allowed)})"
                )
        return account

    def _submission(self, principal: Principal, spec: JobSubmit) -> Future[Submitted]:
        """Check and build a submission and queue its commit (see ``submit``).

        The future resolves once the job is committed and handed to the scheduler
        (in the writer's thread, whether anyone still waits or not); it cannot
        be cancelled.
        """
        if principal.role == "node":
            raise Forbidden("a node token cannot submit jobs")
        self._running_check()
        request, array, dependency = check_spec(spec)
        max_array = self.setup.max_array_size
        if array is not None and array.indices[-1] >= max_array:
            # As Slurm's MaxArraySize: a huge array would stall every cycle for everyone.
            raise Invalid(
                "body.array",
                f"index {array.indices[-1]} is over the site's maximum of {max_array - 1}"
                f" (max_array_size = {max_array})",
            )
        partition = spec.partition or self._default_partition
        if partition not in self.setup.partitions:
            raise Invalid("body.partition", f"no partition {partition!r}")
        # The state in force, which a time-of-day window may have changed.
        state = self.book.partitions.get(partition, self.setup.partitions[partition]).state
        if state in ("drain", "inactive"):
            # As Slurm: such a partition takes no new job; its queued ones stay (drain: they
            # still start, inactive: they wait with PartitionInactive).
            raise Invalid(
                "body.partition", f"partition {partition} is {state} and takes no new jobs"
            )
        qos = spec.qos or self._default_qos
        if qos not in self.setup.qos:
            raise Invalid("body.qos", f"no QoS {qos!r}")
        account = self._job_account(principal, spec.account)
        if spec.nice < 0 and not principal.is_operator:
            # As Slurm: only a privileged user may raise a job's priority above its peers'.
            raise Forbidden("body.nice: only an operator or admin may set a negative nice")
        part = self.setup.partitions[partition]
        if spec.nodelist or spec.exclude:
            check_nodes(spec, self._node_named, part)
        if (request, partition) not in self._holdable:
            nodes = [info.node for info in list(self._nodes.values())]
            check_capacity(request, part, nodes, self.setup.pools)
            if len(self._holdable) >= MAX_SHAPES:
                self._holdable.clear()  # many one-off shapes: walk the nodes again
            self._holdable.add((request, partition))
        # 0 asks for no limit (Slurm's UNLIMITED); none named takes the partition's
        # default, and as in Slurm a partition without one gives its maximum.
        time_limit = spec.time_limit_s
        if time_limit is None:
            time_limit = part.default_time_s or part.max_time_s or DEFAULT_TIME_S
        if part.max_time_s and (time_limit == 0 or time_limit > part.max_time_s):
            # Refused now, as Slurm's EnforcePartLimits=ALL does, rather than queued to
            # wait with PartitionTimeLimit until someone notices it never can start.
            asked = f"{time_limit} s" if time_limit else "no limit (UNLIMITED)"
            raise Invalid(
                "body.time_limit_s",
                f"{asked} is over partition {partition}'s limit of {part.max_time_s} s"
                + ("" if spec.time_limit_s is not None else " (it is the partition's default)"),
            )
        tasks: list[int | None] = list(array.indices) if array else [None]
        now = self.clock.now()
        spec_json = spec.model_dump(mode="json", exclude={"request_id"})
        if spec.stdout is None:
            # Fixed at submission, so a later change of the site's default moves no one's output.
            spec_json["stdout"] = self.setup.default_stdout[array is not None]
        request_json = request_to_json(request)
        common = {
            "array_limit": array.limit if array else None,
            "name": spec.name,
            "user": principal.user,
            "account": account,
            "partition": partition,
            "qos": qos,
            "state": "PENDING",
            # Known now, as Slurm says at submission; the cycle decides when it may start.
            "reason": "JobHeldUser"
            if spec.hold
            else "BeginTime"
            if spec.begin is not None and spec.begin > now
            else "",
            "held": spec.hold,
            "nice": spec.nice,
            "submit_time": now,
            "begin_time": float(spec.begin) if spec.begin is not None else None,
            "time_limit_s": time_limit,
            "request": request_json,
            "spec": spec_json,
            "dependency": spec.dependency,
            "requeue": spec.requeue,
        }
        # Tens of thousands of rows and jobs would set off full collections of the
        # whole heap again and again: the collector waits until they are in memory.
        bulk = len(tasks) >= BULK_TASKS
        if bulk:
            _GC_PAUSE.hold()
        rows: list[dict[str, Any]] = []
        num = 0

        def take_ids() -> None:
            """Give the job its id and build its rows: only once nothing can refuse it
            but the store, so that a refused submission uses up no job id."""
            nonlocal num
            if rows:
                return
            with self._ids:
                num, first_pk = self._next_num, self._next_pk
                self._next_num += 1
                self._next_pk += len(tasks)
            rows.extend(
                {
                    **common,
                    "job_num": num,
                    "id": first_pk + i,
                    "job_id": str(num) if task is None else f"{num}_{task}",
                    "array_task_id": task,
                    "request_id": spec.request_id if i == 0 else None,
                }
                for i, task in enumerate(tasks)
            )

        refs = dependency.refs if dependency else ()
        if not refs:
            take_ids()
        # No history row for the submission: ``get_job`` shows it from submit_time.

        def unit(conn: sa.Connection) -> Submitted | None:
            if spec.request_id is not None:
                dup = conn.execute(
                    sa.select(t.jobs.c.job_num, t.jobs.c.array_task_id).where(
                        t.jobs.c.user == principal.user, t.jobs.c.request_id == spec.request_id
                    )
                ).first()
                if dup is not None:
                    count = 0
                    if dup.array_task_id is not None:
                        count = conn.execute(
                            sa.select(sa.func.count()).where(t.jobs.c.job_num == dup.job_num)
                        ).scalar_one()
                    return Submitted(
                        job_id=str(dup.job_num), array_task_count=count, duplicate=True
                    )
            _check_refs(conn, refs)
            take_ids()  # the dependency's jobs exist: the job gets its id
            self.store.insert(conn, t.jobs, rows)
            return None

        answer: Future[Submitted] = Future()
        answer.set_running_or_notify_cancel()  # so that no waiter can cancel it

        def committed(future: Future[Any]) -> None:
            try:
                settle(future)
            finally:
                if bulk:
                    _GC_PAUSE.release()

        def settle(future: Future[Any]) -> None:
            error = future.exception()
            if error is not None:
                answer.set_exception(error)
                return
            duplicate = future.result()
            if isinstance(duplicate, Submitted):
                answer.set_result(duplicate)
                return
            if duplicate is not None:
                if duplicate["array_task_id"] is None:
                    job_id = str(duplicate["job_num"])
                    answer.set_result(Submitted(job_id=job_id, array_task_count=0, duplicate=True))
                else:  # an array's task count is the store's to tell
                    self._writer().submit(unit).add_done_callback(settle)
                return
            try:
                shared = self._requests.setdefault(request, request)  # see _interned
                live = [LiveJob.from_values(r, shared, dependency) for r in rows]
                with self._intake_lock:
                    self._intake.append((live, request, int(now)))
                self.metrics.submitted.labels(partition).inc(len(live))
                self._wake()
            except BaseException as e:  # a bug: the caller must hear of it, not hang
                answer.set_exception(e)
                return
            answer.set_result(
                Submitted(job_id=str(num), array_task_count=len(rows) if array else 0)
            )

        try:
            # Merged with concurrent submissions into one insert, unless there are
            # dependencies to check first; a request_id is looked up with the batch's.
            future: Future[Any]  # Submitted (unit), a duplicate's row, or None
            if refs:
                future = self._writer().submit(unit)
            elif spec.request_id is None:
                future = self._writer().insert_future([(t.jobs, rows)])
            else:
                key = (("user", principal.user), ("request_id", spec.request_id))
                future = self._writer().insert_new_future([(t.jobs, rows)], (t.jobs, key))
        except BaseException:
            if bulk:
                _GC_PAUSE.release()
            raise
        future.add_done_callback(committed)
        return answer

    def list_jobs(
        self,
        *,
        principal: Principal,
        user: str | None = None,
        states: Sequence[JobStateName] = (),
        partition: str | None = None,
        account: str | None = None,
        limit: int = DEFAULT_PAGE,
        cursor: str | None = None,
    ) -> JobPage:
        """Jobs matching every filter given, newest submission first.

        A ``user`` principal sees its own jobs only (asking for another user
        is Forbidden). ``limit`` is 1..MAX_PAGE; ``cursor`` is an opaque
        ``next_cursor`` from an earlier page (Invalid if malformed). History
        is omitted from listed jobs; ``get_job`` includes it.
        """
        if not 1 <= limit <= MAX_PAGE:
            raise Invalid("query.limit", f"must be 1..{MAX_PAGE}, got {limit}")
        if not principal.is_operator:
            if user is not None and user != principal.user:
                raise Forbidden("a user lists only its own jobs")
            user = principal.user
        page = sa.select(t.jobs.c.id).order_by(t.jobs.c.id.desc()).limit(limit + 1)
        if cursor is not None:
            page = page.where(t.jobs.c.id < _cursor(cursor))
        for column, value in (("user", user), ("partition", partition), ("account", account)):
            if value is not None:
                page = page.where(t.jobs.c[column] == value)
        if states:
            page = page.where(t.jobs.c.state.in_(list(states)))
        # The page's ids first, from an index, then their rows: a planner that
        # fetches every match before sorting (PostgreSQL before its statistics
        # exist) must not extract JSON from all of them.
        ids = page.subquery()
        stmt = (
            sa.select(*_LISTED)
            .join_from(t.jobs, ids, t.jobs.c.id == ids.c.id)
            .order_by(t.jobs.c.id.desc())
        )
        with self.store.read() as conn:
            rows = conn.execute(stmt).all()
        more = len(rows) > limit
        rows = rows[:limit]
        jobs = [self._job_out(r, ()) for r in rows]
        return JobPage(jobs=jobs, next_cursor=str(rows[-1].id) if more else None)

    def get_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """One job with its full history; NotFound if absent or not the caller's."""
        with self.store.read() as conn:
            row = self._visible_row(conn, principal, job_id)
            history: Sequence[Any] = conn.execute(
                sa.select(t.job_history.c.time, t.job_history.c.state, t.job_history.c.reason)
                .where(t.job_history.c.job == row.id)
                .order_by(t.job_history.c.id)
            ).all()
        if not history or history[0].state != "PENDING":
            # The submission is the first event and has no row (stores older than
            # that have one, so it is not shown twice).
            history = [_Event(row.submit_time, "PENDING", ""), *history]
        return self._job_out(row, history)

    def read_output(
        self,
        *,
        principal: Principal,
        job_id: str,
        stream: Literal["stdout", "stderr"] = "stdout",
        offset: int = 0,
        limit: int | None = None,
    ) -> OutputChunk:
        """Read a slice of the job's output file as the controller sees it (shared filesystem).

        Only what the job's run wrote is served (``controller.output``): NotFound
        for an unknown job, a job not started, or a file not (yet) there or not
        the run's (not a regular file, another owner, older than the run, in
        the controller's data directory). At most ``limit`` bytes (default the
        setup's ``output_read_limit``), decoded as UTF-8 with replacement.
        """
        if offset < 0:
            raise Invalid("query.offset", "must be zero or more")
        job = self.get_job(principal=principal, job_id=job_id)
        path = job.stdout_path if stream == "stdout" else job.stderr_path
        size = limit if limit is not None else self.setup.output_read_limit
        if job.start_time is None:
            raise NotFound(f"job {job_id}: {stream}: the job has not started")
        try:
            data, at_end = read_slice(
                path,
                offset,
                size,
                owner=self._run_uid(job),
                started=job.start_time,
                private=self._private_dirs,
            )
        except Unreadable as e:
            raise NotFound(f"job {job_id}: {stream} is not readable here: {e}") from None
        ended = job.state in TERMINAL_STATES
        return OutputChunk(
            job_id=job.job_id,
            stream=stream,
            path=path,
            offset=offset,
            next_offset=offset + len(data),
            data=data.decode("utf-8", errors="replace"),
            eof=ended and at_end,
        )

    def _run_uid(self, job: JobOut) -> int | None:
        """The uid the job's run ran as: its node agent's own when that agent runs jobs
        as itself (``job_uid`` in its facts), else the job's user on this host; None
        when neither is known."""
        facts = self._facts.get(job.node_list[0]) if job.node_list else None
        uid = facts.get("job_uid") if facts else None
        if isinstance(uid, int) and not isinstance(uid, bool):
            return uid
        try:
            return pwd.getpwnam(job.user).pw_uid
        except (KeyError, UnicodeEncodeError):
            return None

    def cancel_job(self, *, principal: Principal, job_id: str, reason: str = "") -> JobOut:
        """Cancel a pending job at once, or ask the agents to kill a running one.

        An array job id cancels every task not yet finished. Conflict if the
        job has already ended. Own job or operator.
        """
        return self._act(principal, job_id, "cancel", reason or "cancelled by " + principal.user)

    def hold_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """Hold a pending job (or every pending task of an array), as Slurm's ``scontrol hold``.

        The owner's hold is a user hold (``JobHeldUser``); an operator's or
        admin's, on any job, an admin hold (``JobHeldAdmin``), which turns a
        user hold into an admin hold. Conflict if not pending; a job held already stays
        as it is, quietly, as Slurm's.
        """
        return self._act(principal, job_id, "hold", "held by " + principal.user)

    def release_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """Release a held job (or array); Conflict if it is not held.

        Forbidden, naming the job, when a user releases an admin hold: only an
        operator or admin may; nothing of an array is released then.
        """
        return self._act(principal, job_id, "release", "released by " + principal.user)

    def requeue_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """Stop a running job and put it back in the queue (its run number grows).

        A finished job (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL,
        PREEMPTED) is queued again too, as Slurm's ``scontrol requeue`` does.
        Conflict for a pending job.
        """
        return self._act(principal, job_id, "requeue", "requeued by " + principal.user)

    # -- nodes -------------------------------------------------------------------

    def list_nodes(self, *, principal: Principal) -> list[NodeOut]:
        """Every node with its per-GPU allocation, by name. A user sees the ids of
        its own jobs only; the others are counted (``other_jobs``)."""
        viewer = None if principal.is_operator else principal.user
        with self._lock:
            return [self._node_out(n, viewer) for n in sorted(self._nodes)]

    def get_node(self, *, principal: Principal, name: str) -> NodeOut:
        """One node; NotFound if unknown."""
        with self._lock:
            if name not in self._nodes:
                raise NotFound(f"node {name}: no such node")
            return self._node_out(name, None if principal.is_operator else principal.user)

    def drain_node(self, *, principal: Principal, name: str, reason: str) -> NodeOut:
        """Start no more jobs on the node; running ones finish (operator). Audited."""
        return self._set_drain(principal, name, drain=True, reason=reason)

    def resume_node(self, *, principal: Principal, name: str, reason: str = "") -> NodeOut:
        """Undo a drain, or bring a down node back if its agent syncs (operator). Audited."""
        return self._set_drain(principal, name, drain=False, reason=reason)

    # -- dashboard ---------------------------------------------------------------

    def cluster_map(self, *, principal: Principal) -> ClusterMap:
        """Every node and GPU with its state and holders (``dashboard.cluster_map``);
        a user sees the owners of its own jobs only."""
        readings = self.gpu_readings()
        viewer = None if principal.is_operator else principal.user
        # Its short-lived lists would otherwise set off full collections of the
        # controller's heap, several times what building the map costs.
        _GC_PAUSE.hold()
        try:
            with self._lock:
                nodes = [(self._nodes[n], self._node_state(n)) for n in sorted(self._nodes)]
                return dashboard.cluster_map(
                    nodes,
                    self.book.state,
                    self._jobs.values(),
                    readings,
                    viewer=viewer,
                    now=self.clock.now(),
                )
        finally:
            _GC_PAUSE.release()

    def node_page(self, *, principal: Principal, name: str) -> NodePage:
        """A node with its GPUs' latest readings and its latest events; NotFound if unknown."""
        node = self.get_node(principal=principal, name=name)
        with self.store.read() as conn:
            events = dashboard.node_events(conn, name)
        return dashboard.node_page(node, self.gpu_readings().get(name), events)

    # -- policy views ------------------------------------------------------------

    def list_partitions(self, *, principal: Principal) -> list[PartitionOut]:
        """Every partition with its nodes and queue counts."""
        with self._lock:
            counts: dict[tuple[str, str], int] = defaultdict(int)
            for job in self._jobs.values():
                counts[job.partition, job.state] += 1
            nodes = [n.node for n in self._nodes.values()]
            out = []
            for p in self.setup.partitions.values():
                members = [
                    n.name
                    for n in nodes
                    if (not p.nodes and not p.pools) or n.name in p.nodes or n.pool in p.pools
                ]
                out.append(
                    PartitionOut(
                        name=p.name,
                        nodes=sorted(members),
                        default_time_s=p.default_time_s,
                        max_time_s=p.max_time_s,
                        priority_tier=p.priority_tier,
                        allowed_accounts=list(p.allowed_accounts),
                        allowed_qos=list(p.allowed_qos),
                        preemptible=p.preemptible,
                        is_default=p.name == self._default_partition,
                        state=self.book.partitions.get(p.name, p).state,  # a window's, if any
                        pending=counts[p.name, "PENDING"],
                        running=counts[p.name, "RUNNING"] + counts[p.name, "COMPLETING"],
                    )
                )
            return out

    def list_qos(self, *, principal: Principal) -> list[QosOut]:
        """Every QoS."""
        return [
            QosOut(
                name=q.name,
                priority=q.priority,
                preempt=list(q.preempt),
                preempt_mode=q.preempt_mode,
                grace_s=q.grace_s,
                usage_factor=q.usage_factor,
                max_jobs_per_user=q.max_jobs_per_user,
                max_gpus_per_user=q.max_gpus_per_user,
                max_gpus_per_account=q.max_gpus_per_account,
                group_gpus=q.group_gpus,
                max_wall_s=q.max_wall_s,
                is_default=q.name == self._default_qos,
            )
            for q in self.setup.qos.values()
        ]

    def list_accounts(self, *, principal: Principal) -> list[AccountOut]:
        """The account tree, parents before children."""
        tree = self.setup.accounts
        if tree is None:
            return []
        shares = tree.normalized_shares()
        return [
            AccountOut(
                name=tree.names[i],
                parent=tree.names[int(tree.parent[i])] if i else "",
                kind="user" if tree.is_user[i] else "account",
                shares=float(tree.shares[i]),
                normalized_shares=float(shares[i]),
            )
            for i in range(len(tree))
        ]

    def list_reservations(self, *, principal: Principal) -> list[ReservationOut]:
        """Every reservation, by start time."""
        return [
            ReservationOut(
                name=r.name,
                start=r.start,
                end=r.end,
                nodes=list(r.nodes),
                gpus=r.gpus,
                users=list(r.users),
                accounts=list(r.accounts),
                maintenance=r.maintenance,
            )
            for r in sorted(self.setup.reservations, key=lambda r: (r.start, r.name))
        ]

    def fairshare(self, *, principal: Principal) -> list[FairshareRow]:
        """Every association as ``sshare -l`` shows it, tree order (a user sees the
        accounts and its own rows only); [] without an account tree."""
        with self._lock:
            ledger = self.book.ledger
            if ledger is None:
                return []
            out = fairshare.table(ledger, int(self.clock.now()))
        if not principal.is_operator:
            out = [r for r in out if r.user in (None, principal.user)]
        return out

    def prediction_report(self, *, principal: Principal, buckets: int = 10) -> PredictionReport:
        """The runtime predictor's error over time (operators): each finished job's estimate
        at its first start, rebuilt from the store (``policies.prediction_error``), against
        the run that ended it, per bucket of submit time.

        Conflict without ``[policy.predict]`` or before any job has ended by itself.
        """
        _require(principal, "operator")
        if not 1 <= buckets <= MAX_BUCKETS:
            raise Invalid("query.buckets", f"must be 1..{MAX_BUCKETS}, got {buckets}")
        if self.setup.predict is None:
            raise Conflict("the policy has no [policy.predict] table: nothing is predicted")
        with self.store.read() as conn:
            jobs = _finished_jobs(conn)
        if not jobs:
            raise Conflict("no job has ended by itself yet: there is nothing to compare")
        outcomes = prediction_error.first_estimates(jobs, QuantilePredictor(self.setup.predict))
        start = min(o.submit for o in outcomes)
        report = prediction_error.prediction_error(outcomes, start, buckets)
        return PredictionReport(start=start, **report)

    def observe(self) -> Observation:
        """The queue, nodes, GPU holders and fairshare as ``/metrics`` reports them: read
        from memory under the lock, never from the store. The route checks the role."""
        with self._lock:
            view = observe(
                now=self.clock.now(),
                jobs=self._jobs.values(),
                nodes=self._nodes,
                node_state=self._node_state,
                on_node=self._on_node,
                job=self._live,
                state=self.book.state,
                partitions=self.setup.partitions.values(),
                ledger=self.book.ledger,
                heartbeat_interval_s=self.setup.heartbeat_interval_s,
            )
            if self.fleet is None:
                return view
            costs = self.fleet.pool_costs(int(view.now))
            pools = [
                PoolView(name, booting, up, costs[name])
                for name, (booting, up) in self.fleet.counts().items()
            ]
            return replace(view, pools=pools)

    # -- accounting --------------------------------------------------------------

    def usage(
        self, *, principal: Principal, start: float, end: float, by: UsageKey = "user"
    ) -> list[UsageRow]:
        """GPU-hours of job runs clipped to [start, end), summed per ``by`` key.

        Fractions count their share and MIG slices their compute share. A
        ``user`` principal gets only its own row. Invalid if end <= start.
        """
        if end <= start:
            raise Invalid("query.end", "must be after start")
        if by not in USAGE_KEYS:
            raise Invalid("query.by", f"must be one of {', '.join(USAGE_KEYS)}")
        user = None if principal.is_operator else principal.user
        with self.store.read() as conn:
            return accounting.usage(
                conn, start=start, end=end, by=by, now=self.clock.now(), user=user
            )

    def export_usage(self, *, principal: Principal, start: float, end: float) -> Iterator[str]:
        """Finished jobs submitted in [start, end) as the simulator's history JSONL lines.

        Each line ends in a newline; ``gpufleet sim run --trace history:FILE``
        replays the file. A ``user`` principal exports its own jobs only.
        """
        if end <= start:
            raise Invalid("query.end", "must be after start")
        user = None if principal.is_operator else principal.user
        with self.store.read() as conn:
            lines = list(accounting.history_lines(conn, start=start, end=end, user=user))
        return iter(lines)

    # -- agents ------------------------------------------------------------------

    def register_agent(
        self, *, principal: Principal, node: str, body: AgentRegister
    ) -> RegisterReply:
        """Record a node's inventory and mark it up (its node token, or admin).

        A new node joins the cluster after every node it knows (placement ties
        go to the earlier node; a restart keeps the order); a known one keeps
        its state (a drain survives). Runs the agent holds that the store does not expect are
        killed on its next sync, and kills already sent are sent again.
        Invalid names the bad inventory key.
        """
        self._agent_check(principal, node)
        try:
            built = nodes_from_groups([body.inventory], source="inventory")
        except ClusterFileError as e:
            where = f"body.inventory.{e.key}" if e.key else "body.inventory"
            raise Invalid(where, e.reason) from None
        if len(built) != 1 or built[0].name != node:
            raise Invalid("body.inventory.names", f"must name exactly this node, {node!r}")
        new = built[0]
        if body.gpu_uuids:
            if len(body.gpu_uuids) != len(new.gpus):
                raise Invalid(
                    "body.gpu_uuids", f"{len(new.gpus)} GPUs but {len(body.gpu_uuids)} UUIDs"
                )
            new = replace(
                new,
                gpus=tuple(
                    replace(g, uuid=u) for g, u in zip(new.gpus, body.gpu_uuids, strict=True)
                ),
            )
        now = self.clock.now()
        with self._lock:
            self._running_check()
            info = self._nodes.get(node)
            facts = {**self._facts, node: body.facts}
            nodes = [n.node for n in self._nodes.values()]
            partitions = self.setup.partitions.values()
            history = [("node.drift", {"drift": d}) for d in drift(new, facts, nodes, partitions)]
            for d in history:
                log.warning("node %s: %s", node, d[1]["drift"])
            values = {
                "name": node,
                "inventory": body.inventory,
                "gpu_uuids": body.gpu_uuids,
                "source": info.source if info else "agent",
                "state": "up",
                "drain": info.drain if info else False,
                "reason": info.reason if info and info.reason != HEARTBEAT_LOST else "",
                "registered": now,
                "last_heartbeat": now,
            }

            def unit(conn: sa.Connection) -> None:
                persist.upsert_node(conn, values)
                if info is None:
                    persist.add_joined(conn, node)
                if self.fleet is not None:
                    persist.drop_booting(conn, node)
                for event, detail in history:
                    persist.audit(
                        conn, time=now, who=principal.user, action=event, target=node, detail=detail
                    )
                if body.differences:  # reported, not silently trusted: in the node's history
                    persist.audit(
                        conn,
                        time=now,
                        who=principal.user,
                        action="node.inventory",
                        target=node,
                        detail={"differences": body.differences},
                    )

            self._writer().call(unit)
            self._holdable.clear()
            if info is None:
                self.book.add_node(new)
                info = NodeInfo(node=new, state="unknown", source="agent")
                self._nodes[node] = info
            if self.fleet is not None:
                self.fleet.joined(node, int(now))
            elif info.node != new and not self._on_node.get(node):
                self.book.replace_node(new)
                info.node = new
            info.inventory = dict(body.inventory)
            if info.reason == HEARTBEAT_LOST:
                info.reason = ""
            self._facts[node] = dict(body.facts)
            info.last_heartbeat = info.saved_heartbeat = now
            self._set_state(info, "up")
            self._note_strays(info, body.running)
            self._kills_sent.pop(node, None)  # a new agent process: it may have missed them
            self._bump(node)
        self._wake()
        return RegisterReply(
            node=node,
            state=self._node_state(node),
            heartbeat_interval_s=self.setup.heartbeat_interval_s,
        )

    def sync_agent(self, *, principal: Principal, node: str, body: AgentSync) -> SyncReply:
        """Apply the agent's reports and answer with what it must start and kill. Never waits.

        Idempotent: a report already applied for (job_id, run) is ignored,
        and the answer is the difference between the store's desired state
        and ``body.running``. Also the node's heartbeat. Forbidden for a
        token of another node; NotFound for an unregistered node.
        """
        self._agent_check(principal, node)
        now = self.clock.now()
        quiet = self._quiet_sync(node, body, now)
        if quiet is not None:
            return quiet
        with self._lock:
            self._running_check()
            info = self._nodes.get(node)
            if info is None or (info.source == "config" and info.last_heartbeat is None):
                raise NotFound(f"node {node}: not registered; register first")
            ended = self._apply_reports(node, body.reports, now)
            ended = self._mig_done(principal, info, body.mig_done, now) or ended
            self._checkpointed(body.checkpoints, now)
            if body.health is not None:
                self._node_health(principal, info, body.health, now)
            info.last_heartbeat = now
            self._readings.record(node, now, body.gpus)
            came_back = info.state != "up"
            heartbeat_due = (
                info.saved_heartbeat is None
                or now - info.saved_heartbeat >= self.setup.heartbeat_interval_s * 4
            )
            if came_back:
                self._writer().call(
                    lambda conn: conn.execute(
                        t.nodes.update()
                        .where(t.nodes.c.name == node)
                        .values(
                            state="up",
                            last_heartbeat=now,
                            reason="" if info.reason == HEARTBEAT_LOST else info.reason,
                        )
                    )
                )
                if info.reason == HEARTBEAT_LOST:
                    info.reason = ""
                self._heartbeats.pop(node, None)
                info.saved_heartbeat = now
                self._set_state(info, "up")
            elif heartbeat_due:
                # Stored with the next cycle's transaction: a heartbeat never waits for a commit.
                self._heartbeats[node] = info.saved_heartbeat = now
            ended = self._confirm_gone(node, body.running, now) or ended
            ended = self._note_strays(info, body.running, body.reports, found=came_back) or ended
            reply = self._reply(node, body.running, now)
            self._answered[node] = self._gen[node]
            if (
                reply.jobs_to_start
                or reply.jobs_to_kill
                or reply.mig_changes
                or self._kills_sent.get(node)
            ):
                self._quiet.pop(node, None)
            else:
                self._quiet[node] = (self._gen[node], _held(body.running))
        if ended or came_back:
            self._wake()
        return reply

    def _quiet_sync(self, node: str, body: AgentSync, now: float) -> SyncReply | None:
        """The answer to a heartbeat that brings nothing and finds nothing new, without
        the lock (which a cycle may hold); None when the sync needs the full path.

        Nothing new: the node's work counter has not moved since an empty answer
        to the same held runs, no kill awaits a resend, and the sync carries no
        report, checkpoint, changed health verdict or heartbeat due for the
        store. The full path would answer it with empty lists too.
        """
        info = self._nodes.get(node)
        last = self._quiet.get(node)
        if (
            not self._started
            or info is None
            or last is None
            or info.state != "up"
            or body.reports
            or body.checkpoints
            or body.mig_done
            or (body.health is not None and body.health != self._health.get(node))
            or info.saved_heartbeat is None
            or now - info.saved_heartbeat >= self.setup.heartbeat_interval_s * 4
            or last != (self._gen.get(node), _held(body.running))
        ):
            return None
        info.last_heartbeat = now
        self._readings.record(node, now, body.gpus)
        return SyncReply(
            heartbeat_interval_s=self.setup.heartbeat_interval_s,
            node_state=self._node_state(node),
        )

    def gpu_readings(self) -> dict[str, NodeReadings]:
        """Each node's latest GPU readings (nodes whose agents sent some), by node name."""
        return self._readings.snapshot()

    async def wait_for_agent_work(self, *, node: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for news for ``node`` (a start or a kill).

        Returns True when woken. The long poll is: sync; if the reply is
        empty and ``wait_s`` > 0, await this, then sync again with no reports.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._gen[node] != self._answered.get(node, -1):
                return True
            self._waiters[node].append((loop, future))
        try:
            await asyncio.wait_for(future, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                waiting = self._waiters.get(node, [])
                if (loop, future) in waiting:
                    waiting.remove((loop, future))

    # -- config and audit --------------------------------------------------------

    def get_config(self, *, principal: Principal) -> ConfigOut:
        """The effective configuration and its version (admin): version 0 and an empty
        document until one is stored (no configuration file and no patch yet)."""
        _require(principal, "admin")
        with self.store.read() as conn:
            row = conn.execute(
                sa.select(t.config).order_by(t.config.c.version.desc()).limit(1)
            ).first()
        if row is None:
            return ConfigOut(version=0, config={}, updated=0.0)
        return ConfigOut(
            version=row.version, config=row.document, updated=row.time, updated_by=row.who
        )

    def patch_config(
        self, *, principal: Principal, patch: Mapping[str, Any], version: int | None = None
    ) -> ConfigOut:
        """Apply a JSON merge patch (RFC 7386) to the configuration (admin). Audited.

        Validated as a whole before anything changes (Invalid names the
        key); ``version`` if given must be the current one (else Conflict),
        so two admins cannot overwrite each other. The new version is
        persisted and takes effect at the next cycle.
        """
        _require(principal, "admin")
        with self._lock:
            self._running_check()
            current = self.get_config(principal=principal)
            if version is not None and version != current.version:
                raise Conflict(f"config is at version {current.version}, not {version}")
            document = merge_patch(current.config, patch)
            setup = None
            if self.setup.reconfigure is not None:
                setup = self.setup.reconfigure(document)
            elif self.setup.validate_config is not None:
                self.setup.validate_config(document)
            out = self._store_config(
                document, current.version, who=principal.user, action="config.patch", detail=patch
            )
            if setup is not None:
                self.setup = _keep_server(setup, self.setup)
                self._load()
        self._wake()
        return out

    def _store_config(
        self,
        document: Mapping[str, Any],
        current: int,
        *,
        who: str,
        action: str,
        detail: Mapping[str, Any],
    ) -> ConfigOut:
        """Store ``document`` as the version after ``current`` (Conflict if another came first)."""
        now = self.clock.now()
        new_version = current + 1
        digest = _digest(document) if action == "config.file" else None

        def unit(conn: sa.Connection) -> None:
            latest = conn.execute(sa.select(sa.func.max(t.config.c.version))).scalar()
            if (latest or 0) != current:
                raise Conflict("the configuration changed meanwhile; retry")
            conn.execute(
                t.config.insert().values(version=new_version, time=now, who=who, document=document)
            )
            persist.audit(
                conn, time=now, who=who, action=action, target=f"v{new_version}", detail=detail
            )
            if digest is not None:
                persist.meta_set(conn, CONFIG_DIGEST, digest)

        self._writer().call(unit)
        return ConfigOut(version=new_version, config=dict(document), updated=now, updated_by=who)

    def _adopt_config(self) -> None:
        """Settle which configuration runs: the file's if it changed since it was last
        stored, else the newest stored version (the file plus the patches since).

        So the newest change wins, whether an edit of the file or a PATCH.
        """
        document = self.setup.document
        if document is None:
            return
        with self.store.read() as conn:
            row = conn.execute(
                sa.select(t.config).order_by(t.config.c.version.desc()).limit(1)
            ).first()
            seen = persist.meta_get(conn, CONFIG_DIGEST)
        if row is None or seen != _digest(document):
            version = row.version if row is not None else 0
            if row is not None and row.who != "config-file":
                # An admin's patches lost to an edit of the file: say so, once, where it shows.
                log.warning(
                    "the configuration file changed: it replaces stored v%d (%s's patch);"
                    " every patch since the file was last read is discarded",
                    row.version,
                    row.who,
                )
            self._store_config(
                document, version, who="config-file", action="config.file", detail={}
            )
        elif row.document != document and self.setup.reconfigure is not None:
            try:
                self.setup = _keep_server(self.setup.reconfigure(row.document), self.setup, True)
            except Invalid as e:
                log.error(
                    "stored configuration v%d no longer loads (%s); using the file",
                    row.version,
                    e.message,
                )

    def list_audit(
        self, *, principal: Principal, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> AuditPage:
        """The audit log, newest first (admin)."""
        _require(principal, "admin")
        if not 1 <= limit <= MAX_PAGE:
            raise Invalid("query.limit", f"must be 1..{MAX_PAGE}, got {limit}")
        stmt = sa.select(t.audit).order_by(t.audit.c.id.desc()).limit(limit + 1)
        if cursor is not None:
            stmt = stmt.where(t.audit.c.id < _cursor(cursor))
        with self.store.read() as conn:
            rows = conn.execute(stmt).all()
        more = len(rows) > limit
        rows = rows[:limit]
        entries = [
            AuditEntry(
                id=r.id, time=r.time, who=r.who, action=r.action, target=r.target, detail=r.detail
            )
            for r in rows
        ]
        return AuditPage(entries=entries, next_cursor=str(rows[-1].id) if more else None)

    # -- internals: state --------------------------------------------------------

    def _writer(self) -> GroupWriter:
        if self.writer is None:
            raise Conflict("the controller is not running")
        return self.writer

    def _running_check(self) -> None:
        if not self._started:
            raise Conflict("the controller is not running")

    def _wake(self) -> None:
        if self._loop is not None:
            self._loop.wake()

    def _derive(self) -> None:
        """What follows from the setup alone (again after a configuration patch)."""
        setup = self.setup
        self._principals = {p.name: p for p in setup.principals}
        self._default_partition = setup.default_partition or next(iter(setup.partitions))
        self._default_qos = setup.default_qos or next(iter(setup.qos))

    def _load(self) -> None:
        """Rebuild the in-memory state from the store and the setup (start, a failed
        cycle, a configuration patch)."""
        # Every job read is kept: collections while they pile up would find no garbage
        # and walk a growing heap each time (a restart with 100,000 pending: 36 s -> 7 s).
        with _GC_PAUSE:
            self._rebuild()

    def _rebuild(self) -> None:
        now = self.clock.now()
        self._derive()
        self.metrics.partitions(self.setup.partitions)
        self._jobs.clear()
        self._by_num.clear()
        self._on_node.clear()
        self._final.clear()
        self._cleanup.clear()
        self._tokens.clear()
        self._nodes.clear()
        self._holdable.clear()
        with self.store.read() as conn:
            node_rows = {r.name: r for r in conn.execute(sa.select(t.nodes))}
            joined = persist.joined_nodes(conn)
            mig_orders = relayout.stored(conn)
            texts = RowTexts()
            jobs = [
                self._interned(LiveJob.from_row(r, texts))
                for r in conn.execute(
                    sa.select(*RowTexts.COLUMNS)
                    .where(sa.or_(t.jobs.c.state.in_(ACTIVE_STATES), t.jobs.c.cleanup))
                    .order_by(t.jobs.c.id)
                )
            ]
            self._next_num = (
                conn.execute(sa.select(sa.func.max(t.jobs.c.job_num))).scalar() or 0
            ) + 1
            self._next_pk = (conn.execute(sa.select(sa.func.max(t.jobs.c.id))).scalar() or 0) + 1
            # The newest submissions, one row each (an array job's first task).
            firsts = (
                sa.select(sa.func.min(t.jobs.c.id))
                .group_by(t.jobs.c.job_num)
                .order_by(t.jobs.c.job_num.desc())
                .limit(self._window.size)
                .scalar_subquery()
            )
            recent = conn.execute(
                sa.select(t.jobs.c.request, t.jobs.c.submit_time)
                .where(t.jobs.c.id.in_(firsts))
                .order_by(t.jobs.c.id)
            ).all()
            self._window = WorkloadWindow(size=self._window.size)
            for r in recent:
                self._window.submit(request_from_json(r.request), int(r.submit_time))
        declared = {n.name: n for n in self.setup.nodes}
        missing = [n for n in self.setup.nodes if n.name not in node_rows]
        if missing:
            self._writer().call(
                lambda conn: conn.execute(
                    t.nodes.insert(),
                    [
                        {
                            "name": n.name,
                            "inventory": {},
                            "gpu_uuids": [],
                            "source": "config",
                            "state": "unknown",
                        }
                        for n in missing
                    ],
                )
            )
        # Placement ties go to the lowest index, and a running cluster appends the nodes
        # agents register: rebuild in that same order, so ties do not change at a restart
        # (rows from before the order was recorded follow by name).
        nodes: list[Node] = []
        for name in dict.fromkeys([*declared, *joined, *sorted(node_rows)]):
            row = node_rows.get(name)
            node = declared.get(name)
            if row is not None and row.inventory:
                node = _inventory_node(row.inventory, row.gpu_uuids) or node
            if node is None:
                continue
            # Agents keep running through a controller restart: give each one a full
            # heartbeat timeout from now to sync again before its node counts as lost.
            state = row.state if row is not None else "unknown"
            info = NodeInfo(
                node=node,
                state=state,
                drain=bool(row.drain) if row is not None else False,
                reason=row.reason if row is not None else "",
                source=row.source if row is not None else "config",
                last_heartbeat=now if state == "up" else None,
                saved_heartbeat=row.last_heartbeat if row is not None else None,
                inventory=dict(row.inventory) if row is not None else {},
            )
            self._nodes[name] = info
            nodes.append(node)
        setup = self.setup
        ledger = fairshare.ledger(
            setup.accounts, setup.fairshare or FairshareArgs(), setup.qos, setup.priority_calc_s
        )
        self.book = JobBook(
            nodes,
            setup.qos,
            setup.partitions,
            ledger=ledger,
            reservations=setup.reservations,
            estimates=setup.predict is not None and setup.predict.backfill,
            stop_at_once=False,  # a victim's room stays held until its agent reports it gone
        )
        self._mig.resume(self.book, mig_orders)  # before the runs: none is on those GPUs
        for name in self._mig.by_node:
            self._nodes[name].node = self.book.state.nodes[self.book.state.index[name]]
        self._estimates = self._trained() if setup.predict is not None else None
        self._factory = setup.profile_factory
        self._scale_with(autoscaler(setup.autoscale))
        self._windows = self._next_switch = None
        if setup.windows and setup.window_policy is not None:
            self._windows = WindowSwitch(Windows(setup.windows, 0, ZoneInfo), setup.window_policy)
            self._switch_windows(int(now), [])
        if ledger is not None:
            with self.store.read() as conn:
                fairshare.rebuild(conn, ledger, self.book.state, int(now))
        for info in self._nodes.values():
            self._set_state(info, info.state)
        for job in jobs:
            if job.cleanup:
                self._cleanup[job.job_id] = job
                self._final[job.job_id] = (job.state, None)
            else:
                self._add_live(job)
            if job.state != "PENDING":
                self._restore_run(job)
        # The pending jobs go into the book now, as part of rebuilding it, so the first
        # cycle after a start costs what any other one does.
        self._sync_queue(int(now))
        self._profile = None

    def _restore_run(self, job: LiveJob) -> None:
        """Put a run the store says is on its nodes back into the book, as it was placed."""
        st = self.book.state
        assignments = []
        for p in job.placements:
            i = st.index[p["node"]]
            mig = tuple(_mig_index(st, i, m) for m in p.get("mig", ()))
            assignments.append(
                Assignment(
                    node=i,
                    gpus=tuple(p["gpus"]) if not mig else (),
                    gpu_milli=p["gpu_milli"],
                    gpu_memory_mib=p.get("gpu_memory_mib", 0),
                    cpu_milli=p["cpu_milli"],
                    memory_mib=p["memory_mib"],
                    mig=mig,
                )
            )
        start = int(job.start_time or 0)
        running = replace(self._stamped(job), state=JobState.RUNNING, start_time=start)
        signal = None
        expected_end = start + (running.expected_runtime_s if self.book.estimates else job.limit_s)
        kill = job.kill
        if job.cleanup:
            # Ended, not yet confirmed gone: the room stays held for no one.
            signal = Signalled(job.job_id, job.run, start, "cancel", "")
        elif kill is not None and str(kill["mode"]).startswith("preempt-"):
            deadline = int(kill["deadline"])
            mode: PreemptMode = "requeue" if kill["mode"] == "preempt-requeue" else "cancel"
            signal = Signalled(job.job_id, job.run, deadline, mode, str(kill.get("for_job", "")))
            expected_end = deadline
        self.book.restore(
            RunningJob(running, tuple(assignments), expected_end), run=job.run, signal=signal
        )
        for name in job.node_list:
            self._on_node[name].add(job.job_id)

    def _take_intake(self) -> None:
        """Add the jobs submitted since the lock was last taken (called holding it)."""
        if not self._intake:
            return
        with self._intake_lock:
            taken, self._intake = self._intake, []
        for live, request, at in taken:
            for job in live:
                if job.job_id not in self._jobs:  # a reload may have read it already
                    self._add_live(job)
            self._window.submit(request, at)

    def _interned(self, job: LiveJob) -> LiveJob:
        """``job`` with its request shared by every job of the same shape: the cycle's
        caches then find it by identity instead of comparing field by field."""
        if len(self._requests) > MAX_SHAPES:
            self._requests.clear()
        job.request = self._requests.setdefault(job.request, job.request)
        return job

    def _add_live(self, job: LiveJob) -> None:
        self._jobs[job.job_id] = job
        self._by_num[job.job_num].add(job.job_id)

    def _drop_live(self, job: LiveJob, state: str, exit_code: int | None) -> None:
        del self._jobs[job.job_id]
        ids = self._by_num[job.job_num]
        ids.discard(job.job_id)
        if not ids:
            del self._by_num[job.job_num]
        self._final[job.job_id] = (state, exit_code)
        if job.job_id in self.book.pending:
            self.book.withdraw(job.job_id)

    def _set_state(self, info: NodeInfo, state: str) -> None:
        """Record a node's state and make the book use it only when up and not drained."""
        info.state = state
        i = self.book.state.index.get(info.node.name)
        if i is None:
            return
        if info.usable:
            self.book.node_up(i)
        else:
            self.book.cordon(i, usable=False)  # keeps the placer away; its runs go on

    def _bump(self, node: str) -> None:
        """New work for ``node``: wake its long poll."""
        self._gen[node] += 1
        for loop, future in self._waiters.pop(node, []):
            loop.call_soon_threadsafe(_resolve, future)

    # -- internals: the cycle ----------------------------------------------------

    def _cycle_safely(self) -> None:
        with self._lock:
            if not self._started:
                return
            try:
                self._cycle()
            except Exception:
                # The store holds the last committed truth; memory may be ahead of it.
                self._load()
                raise

    def _cycle(self) -> None:
        began = time.perf_counter()
        now = self.clock.now()
        inow = int(now)
        self.cycles += 1
        changes: list[Change] = []
        statements: list[sa.Executable] = []
        self._expire_nodes(now, changes, statements)
        self._backstop(now, changes)
        if self._windows is not None:
            self._switch_windows(inow, statements)
        self._sync_queue(inow)
        if self._estimates is not None:
            for job in self._estimates.revise(self.book, self._job_name):
                self._jobs[job.id].core = job
        if self._profile is None or (
            now - self._profile_at >= PROFILE_MIN_S and self._window.drift() >= PROFILE_DRIFT
        ):
            self._profile = self._factory(or_typical(self._window.mark()))
            self._profile_at = now
        plan = run_cycle(self.book.snapshot(inow), self._profile, inow)
        effects = self.book.apply(plan, inow)
        for job_id, reason in plan.reasons.items():
            live = self._jobs.get(job_id)
            if live is not None:
                live.reason = reason
        # An estimate lasts one cycle: a job this plan gives none (held since, or
        # overtaken) shows none, not an earlier plan's.
        for job_id in self._estimated - plan.expected_start.keys():
            live = self._jobs.get(job_id)
            if live is not None:
                live.expected_start = None
        self._estimated = set(plan.expected_start)
        self._ranked = plan.ranked
        for job_id, when in plan.expected_start.items():
            live = self._jobs.get(job_id)
            if live is not None:
                live.expected_start = float(when)
        for s in effects.started:
            changes.append(self._start_change(self._jobs[s.job_id], s, now))
        for sig in effects.signalled:
            changes.append(self._preempt_change(self._jobs[sig.job_id], sig, inow))
        statements += self._mig.order(effects.relayouts, now)
        self._commit(changes, statements)
        for node in {c.node for c in effects.relayouts}:
            self._bump(node)
        if self.fleet is not None:
            self._scale(plan, inow)
        self.metrics.cycle(
            time.perf_counter() - began,
            plan.stats,
            started=[self._live(s.job_id).partition for s in effects.started],
            preempted=[self._live(p.job_id).partition for p in plan.preemptions],
        )

    def _preempt_change(self, live: LiveJob, sig: Signalled, now: int) -> Change:
        """Signal a victim of preemption. In its grace time it runs on; with none it is
        killed as a cancel is (SIGTERM, SIGKILL after the kill grace) and is COMPLETING:
        its room stays held, for its preemptor, until its agent reports it ended."""
        grace = sig.deadline - now
        kill = {
            "mode": "preempt-" + sig.mode,
            "signal": "TERM",
            "grace_s": grace or self.setup.kill_grace_s,
            "deadline": float(sig.deadline if grace else now + self.setup.kill_grace_s),
            "for_job": sig.for_job,
        }
        if grace:
            return Change(live, {"kill": kill}, [], after=partial(_set_kill, kill=kill))
        message = f"preempted by job {sig.for_job}"
        return Change(
            live,
            {"kill": kill, "state": "COMPLETING"},
            [(float(now), "COMPLETING", message)],
            after=partial(_set_kill, kill=kill, state="COMPLETING"),
        )

    def _switch_windows(self, now: int, statements: list[sa.Executable]) -> None:
        """Put in force the policy of the windows open at ``now`` if they changed; the
        switch is logged, audited (in ``statements``, or at once with none) and shown
        in the metrics."""
        assert self._windows is not None
        policy = self._windows.switch(now)
        self._next_switch = self._windows.next_change(now)
        if policy is None:
            return
        first = len(self._windows.switches) == 1
        open_now = self._windows.open_windows or ()
        self._factory = policy.profile_factory
        self._scale_with(policy.autoscaler)
        self._profile = None
        self.book.qos = policy.qos
        self.book.partitions = policy.partitions
        self.metrics.windows((w.name for w in self.setup.windows), open_now)
        names = ", ".join(open_now) or "none"
        log.info("policy windows open: %s (next change at %s)", names, self._next_switch)
        if first:
            return  # the policy the controller starts with: no switch
        self.metrics.window_switches.inc()
        statements.append(
            t.audit.insert().values(
                time=float(now),
                who="scheduler",
                action="policy.window",
                target=names,
                detail={"open": list(open_now), "next_change": self._next_switch},
            )
        )

    def _stamped(self, job: LiveJob) -> Job:
        """The core job of ``job``, with its runtime estimate when the controller predicts."""
        if self._estimates is not None:
            job.core = self._estimates.stamp(job.job(), job.name)
        return job.job()

    def _job_name(self, job_id: str) -> str:
        return self._jobs[job_id].name

    def _trained(self) -> Estimates:
        """A predictor told of every finished job in the store, in the order they ended."""
        assert self.setup.predict is not None
        estimates = Estimates(QuantilePredictor(self.setup.predict))
        with self.store.read() as conn:
            for job in _finished_jobs(conn):
                estimates.predictor.observe(job.features, job.ran_s, failed=job.failed)
        return estimates

    def _learn(self, live: LiveJob, now: float, final: str) -> None:
        """``live`` ended by itself now in state ``final``: the predictor learns the length
        of its run and whether it failed."""
        if self._estimates is not None and live.start_time is not None:
            ran = int(now - live.start_time)
            self._estimates.finished(live.job(), live.name, ran, failed=final == "FAILED")

    # -- node pools --------------------------------------------------------------

    def _start_fleet(self) -> None:
        """The fleet over the configured pools, adopting pool nodes the store knows as up
        and waiting again for those it knows as booting."""
        assert self.setup.provider is not None
        self.fleet = Fleet(self.setup.pools, self._scaler)
        self.provider = provider(self.setup.provider, self._node_token)
        now = int(self.clock.now())
        for name, info in self._nodes.items():
            if info.state == "up":
                self.fleet.adopt(name, now)
        with self.store.read() as conn:
            booting = persist.booting_nodes(conn)
        stale = [name for name, pool, at in booting if not self.fleet.restore(name, pool, int(at))]
        for name in stale:
            if name not in self.fleet.members:  # not up either: nothing here will delete it
                log.error("autoscale: node %s was booting but its pool is gone: delete it", name)
        for name, member in self.fleet.members.items():
            self.provider.adopt(self.fleet.pools[member.pool], name)

        def forget(conn: sa.Connection) -> None:
            for name in stale:
                persist.drop_booting(conn, name)

        if stale:
            self._writer().call(forget)

    def _scale_with(self, scaler: Autoscaler) -> None:
        """The autoscaler in force from now (the fleet's, once it is started)."""
        self._scaler = scaler
        if self.fleet is not None:
            self.fleet.scaler = scaler

    def _scale(self, plan: Plan, now: int) -> None:
        """Ask the fleet after a cycle and carry out its orders: a node leaves the book
        (and the store, and its token is revoked) before its provider deletes it."""
        assert self.fleet is not None and self.provider is not None
        names = self.book.state.nodes
        planned = {names[i].name for ix in plan.expected_nodes.values() for i in ix}
        reasons = {j: self._jobs[j].reason for j in self.book.pending if j in self._jobs}
        orders = self.fleet.step(self.book, reasons, planned, now)
        for pool, name in orders.delete:
            if self._retire_node(name, now):
                self.provider.delete(pool, name, now)
            else:
                self.fleet.adopt(name, now)  # a run came to it since: it stays
        if orders.create:
            # Stored before any is asked for: a restart waits for them, never asks twice.
            asked = [
                {"name": node.name, "pool": pool.name, "created": float(now)}
                for pool, node in orders.create
            ]

            def unit(conn: sa.Connection) -> None:
                persist.add_booting(conn, asked)
                for pool, node in orders.create:
                    persist.audit(
                        conn, time=now, who="autoscale", action="node.create",
                        target=node.name, detail={"pool": pool.name},
                    )  # fmt: skip

            self._writer().call(unit)
        for pool, node in orders.create:
            log.info("autoscale: pool %s asks for node %s", pool.name, node.name)
            self.provider.create(pool, node, now)

    def _retire_node(self, name: str, now: float) -> bool:
        """Take an idle node out of the cluster for good; False while work is on it."""
        if self._on_node.get(name) or (name in self.book.state.index and self._busy(name)):
            return False
        info = self._nodes.pop(name, None)
        self._holdable.clear()
        if info is not None:
            self.book.remove_node(name)
        for table in (self._facts, self._quiet, self._health, self._heartbeats, self._kills_sent):
            table.pop(name, None)
        self._mig.drop(name)
        revoked = [
            tok.id
            for tok in list_tokens(self.store)
            if tok.node == name and tok.role == "node" and not tok.revoked
        ]

        def unit(conn: sa.Connection) -> None:
            conn.execute(t.nodes.delete().where(t.nodes.c.name == name))
            persist.drop_booting(conn, name)
            conn.execute(relayout.cleared(name))
            persist.audit(
                conn, time=now, who="autoscale", action="node.delete", target=name, detail={}
            )

        self._writer().call(unit)
        for token_id in revoked:
            revoke_token(self._writer(), token_id=token_id, now=now, who="autoscale")
        self._tokens.clear()
        log.info("autoscale: node %s deleted", name)
        return True

    def _busy(self, name: str) -> bool:
        return bool(self.book.on_node[self.book.state.index[name]])

    def _node_token(self, name: str) -> str:
        """A node token for a node the provider is about to create (for its agent)."""
        created = issue_token(
            self._writer(),
            name=f"autoscale-{name}",
            user=f"node-{name}",
            role="node",
            node=name,
            now=self.clock.now(),
            who="autoscale",
        )
        return created.token

    def _commit(self, changes: list[Change], statements: Sequence[sa.Executable] = ()) -> None:
        """Persist every change (and ``statements``) in one transaction, then apply the
        changes in memory and notify."""
        if not changes and not statements:
            return
        rows: list[persist.JobChange] = []
        history: list[dict[str, Any]] = []
        runs: list[dict[str, Any]] = []
        ends: list[dict[str, Any]] = []
        for c in changes:
            rows.append({"id": c.job.pk, **c.row})
            history.extend(
                {"job": c.job.pk, "time": tm, "state": s, "reason": r} for tm, s, r in c.history
            )
            runs.extend(c.runs)
            ends.extend(c.ends)

        def unit(conn: sa.Connection) -> None:
            for stmt in statements:
                conn.execute(stmt)
            persist.update_jobs(conn, rows)
            persist.start_runs(conn, runs)
            persist.end_runs(conn, ends)
            persist.add_history(conn, history)

        self._writer().call(unit)
        touched: set[str] = set()
        for c in changes:
            touched.update(c.job.node_list)
            c.after(c.job)
            touched.update(c.job.node_list)
        for node in touched:
            self._bump(node)

    def _start_change(self, live: LiveJob, s: Any, now: float) -> Change:
        row = start_row(s.placements, s.assignments, run=s.run, start_time=now)
        placements = row["assignments"]
        run = {
            "job": live.pk,
            "run": s.run,
            "start_time": now,
            "node_list": row["node_list"],
            "gpu_milli": gpu_milli_equivalent(live.request),
            "user": live.user,
            "account": live.account,
            "partition": live.partition,
            "qos": live.qos,
        }

        def after(job: LiveJob) -> None:
            job.state, job.reason, job.start_time, job.run = "RUNNING", "", now, s.run
            job.placements, job.kill, job.expected_start = placements, None, None
            for name in job.node_list:
                self._on_node[name].add(job.job_id)

        return Change(live, row, [(now, "RUNNING", "")], runs=[run], after=after)

    def _end_change(
        self,
        live: LiveJob,
        mode: str | None,
        exit_code: int | None,
        signal: int | None,
        now: float,
        message: str,
        outcome: str = "",
        cleanup: dict[str, Any] | None = None,
        *,
        end: float | None = None,
    ) -> Change:
        """The run of ``live`` ended; ``mode`` is the kill that ended it, if any.

        The book has already been told (finish or stop); this records the
        final state, or the trip back to PENDING for a requeue. With
        ``cleanup`` (the kill still to send) the run's end is recorded but
        its tasks may still live: the book keeps its room until its nodes
        confirm them gone (``_confirm_gone``) and the job waits in
        ``_cleanup``. ``end`` is when it ended, if before ``now`` (a late
        report): its end time and final state's time; a requeue is ``now``.
        """
        ended = now if end is None else end
        requeue = cleanup is None and (
            (mode in ("requeue", "preempt-requeue", "node-fail") and live.requeue)
            or mode == "requeue"
        )
        final = {
            "cancel": "CANCELLED",
            "preempt-cancel": "PREEMPTED",
            "preempt-requeue": "PREEMPTED",
            "requeue": "REQUEUED",
            "timeout": "TIMEOUT",
            "node-fail": "NODE_FAIL",
        }.get(mode or "", outcome)
        steps = [(ended, final, message)]
        row: dict[str, Any] = {
            "exit_code": exit_code,
            "signal": signal,
            "kill": cleanup,
            "cleanup": cleanup is not None,
            "task_exits": None,
        }
        if requeue:
            if final != "REQUEUED":
                steps.append((now, "REQUEUED", message))
            steps.append((now, "PENDING", ""))
            row.update(
                state="PENDING",
                reason="",
                restart_count=live.restart_count + 1,
                node_list=None,
                gpu_uuids=None,
                assignments=None,
                start_time=None,
            )
        else:
            # A hold ends with the job (a held job cancelled is CANCELLED, no longer held).
            row.update(state=final, end_time=ended, reason=message, held=False, admin_hold=False)
            if final in LEARNT_STATES:
                self._learn(live, ended, final)
        run_end = {
            "job": live.pk,
            "run": live.run,
            "end_time": ended,
            "outcome": final,
            "exit_code": exit_code,
            "signal": signal,
        }

        def after(job: LiveJob) -> None:
            job.exits = {}
            if cleanup is not None:
                self._hold_room(job, int(now))
                self._drop_live(job, final, exit_code)
                job.state, job.kill, job.cleanup = final, cleanup, True
                self._cleanup[job.job_id] = job
                return
            for name in job.node_list:
                self._on_node[name].discard(job.job_id)
            job.kill = None
            if requeue:
                self.metrics.requeued.labels(job.partition).inc()
                job.state, job.reason, job.start_time = "PENDING", "", None
                job.restart_count += 1
                job.placements = []
                job.core = None
            else:
                job.state, job.held, job.admin_hold = final, False, False
                self._drop_live(job, final, exit_code)

        return Change(live, row, steps, ends=[run_end], after=after)

    def _expire_nodes(
        self, now: float, changes: list[Change], statements: list[sa.Executable]
    ) -> None:
        """Nodes silent past the heartbeat timeout go DOWN; their runs end NODE_FAIL
        (requeued if requeueable), or as the kill under way said (a cancel stays a
        cancel). The node rows change in the same transaction as the jobs, and so do
        the heartbeats syncs left to store."""
        for name, at in self._heartbeats.items():
            statements.append(
                t.nodes.update().where(t.nodes.c.name == name).values(last_heartbeat=at)
            )
        self._heartbeats.clear()
        for name, info in self._nodes.items():
            if info.state != "up" or info.last_heartbeat is None:
                continue
            silent = now - info.last_heartbeat - self._restart_grace(name, info.last_heartbeat)
            if silent <= self.setup.heartbeat_timeout_s:
                continue
            i = self.book.state.index[name]
            for end in self.book.node_down(i, int(now)):
                lingering = self._cleanup.get(end.job_id)
                if lingering is not None:
                    self.book.withdraw(end.job_id)
                    changes.append(self._release(lingering))
                    continue
                live = self._jobs[end.job_id]
                mode = live.kill["mode"] if live.kill else None
                if mode not in ("cancel", "timeout", "preempt-cancel", "requeue"):
                    mode = "node-fail"
                if not (mode == "requeue" or (mode == "node-fail" and live.requeue)):
                    self.book.withdraw(end.job_id)
                changes.append(self._end_change(live, mode, None, None, now, f"node {name} lost"))
            info.state = "down"
            info.reason = HEARTBEAT_LOST
            statements.append(
                t.nodes.update()
                .where(t.nodes.c.name == name)
                .values(state="down", reason=HEARTBEAT_LOST)
            )

    def _backstop(self, now: float, changes: list[Change]) -> None:
        """End runs whose agents let a deadline pass by ``backstop_s`` without a report.

        The deadline is a kill's (cancel, preemption) or the time limit plus
        the kill grace (the agent enforces the limit itself). A cancel or a
        timeout is recorded (CANCELLED, TIMEOUT, PREEMPTED) and SIGKILL is
        sent on the next sync; the room stays held until the agents
        confirm the run gone or its node goes DOWN, as Slurm keeps a
        COMPLETING job's nodes. A requeue only escalates to SIGKILL: the job
        cannot run again while its old run may still hold its GPUs.
        """
        late = self.setup.backstop_s
        changed = {c.job.job_id for c in changes}  # a lost node ended them already
        # Every started run is in the book: walk those, not every active job.
        for job_id in list(self.book.running):
            live = self._jobs.get(job_id)  # None: in cleanup, ended already
            if live is None or live.state == "PENDING" or live.start_time is None:
                continue
            if job_id in changed:
                continue
            if live.kill is not None:
                deadline = float(live.kill["deadline"])
                mode = str(live.kill["mode"])
            elif not live.time_limit_s:
                continue  # no limit: no deadline for its agent to miss
            else:
                deadline = live.start_time + live.time_limit_s + self.setup.kill_grace_s
                mode = "timeout"
            if now < deadline + late or (live.kill is not None and live.kill["signal"] == "KILL"):
                continue
            kill = {"mode": mode, "signal": "KILL", "grace_s": 0, "deadline": now}
            if mode in ("requeue", "preempt-requeue"):
                escalate = partial(_set_kill, kill=kill)
                changes.append(Change(live, {"kill": kill}, [], after=escalate))
                continue
            message = f"no report from its node within {late:g} s of its deadline"
            changes.append(self._end_change(live, mode, None, None, now, message, cleanup=kill))

    def _hold_room(self, job: LiveJob, now: int) -> None:
        """Keep the ended run's room held in the book, for no one, until confirmed gone."""
        r = self.book.running[job.job_id]
        self.book.stop(job.job_id, now, requeue=False)
        signal = Signalled(job.job_id, job.run, now, "cancel", "")
        self.book.restore(replace(r, expected_end=now), run=job.run, signal=signal)

    def _confirm_gone(self, node: str, running: Sequence[RunRef], now: float) -> bool:
        """Runs in cleanup on ``node`` that its agent no longer holds are gone there;
        a run gone on all its nodes gives its room back. Returns whether any did."""
        held = {(r.job_id, r.run) for r in running}
        changes = []
        for job_id in sorted(self._on_node.get(node, ())):
            live = self._cleanup.get(job_id)
            if live is None or (job_id, live.run) in held:
                continue
            live.gone.add(node)
            if live.gone >= set(live.node_list):
                changes.append(self._release(live))
        self._commit(changes)
        return bool(changes)

    def _release(self, live: LiveJob) -> Change:
        """The run of a job in cleanup is gone everywhere: give its room back."""

        def after(job: LiveJob) -> None:
            if job.job_id in self.book.running:
                self.book.stop(job.job_id, int(self.clock.now()), requeue=False)
            for name in job.node_list:
                self._on_node[name].discard(job.job_id)
            job.kill, job.cleanup = None, False
            self._cleanup.pop(job.job_id, None)

        return Change(live, {"cleanup": False, "kill": None}, [], after=after)

    def _sync_queue(self, now: int) -> None:
        """Put in the book the pending jobs the cycle may consider; give the rest a reason.

        Held jobs, unmet dependencies and array tasks over their limit stay out;
        the cycle itself keeps a job to its begin time and node constraints.
        As Slurm, a hold shows first, then ``BeginTime``, then a dependency.
        """
        running_tasks: dict[int, int] = defaultdict(int)
        singles: dict[tuple[str, str], int] = {}
        unknown: set[str] = set()
        waiting: list[LiveJob] = []
        for job in self._jobs.values():
            started = job.state != "PENDING"
            if started and job.array_limit is not None:
                running_tasks[job.job_num] += 1
            if started or (job.dependency and job.dependency.singleton):
                key = (job.user, job.name)
                pk = 0 if started else job.pk
                singles[key] = min(singles.get(key, pk), pk)
            if started:
                continue
            waiting.append(job)
            if job.dependency:
                unknown.update(
                    ref
                    for ref in job.dependency.refs
                    if ref not in self._final and not self._active_ref(ref)
                )
        if unknown:
            self._load_final(unknown)
        allowed: dict[int, int] = {}
        pending = self.book.pending
        for job in waiting:
            reason = ""
            hold = job.hold
            if hold is not None:
                reason = HOLD_REASONS[hold]
            elif job.dependency is not None:
                reason = self._dependency_reason(job, singles)
                if reason and job.job().begin_time > now:
                    reason = "BeginTime"
            if not reason and job.array_limit is not None:
                left = allowed.setdefault(job.job_num, job.array_limit - running_tasks[job.job_num])
                if left <= 0:
                    reason = "JobArrayTaskLimit"
                else:
                    allowed[job.job_num] = left - 1
            if reason:
                job.reason = reason
                if job.job_id in pending:
                    self.book.withdraw(job.job_id)
            elif job.job_id not in pending:
                self.book.submit(self._stamped(job), runs=job.run)

    def _node_named(self, name: str) -> Node | None:
        info = self._nodes.get(name)
        return info.node if info is not None else None

    def _active_ref(self, ref: str) -> bool:
        return ref in self._jobs or (ref.isdigit() and int(ref) in self._by_num)

    def _load_final(self, refs: set[str]) -> None:
        nums = [int(r) for r in refs if r.isdigit()]
        with self.store.read() as conn:
            rows = conn.execute(
                sa.select(
                    t.jobs.c.job_id, t.jobs.c.job_num, t.jobs.c.state, t.jobs.c.exit_code
                ).where(sa.or_(t.jobs.c.job_id.in_(list(refs)), t.jobs.c.job_num.in_(nums)))
            ).all()
        for r in rows:
            if r.state in TERMINAL_STATES:
                self._final[r.job_id] = (r.state, r.exit_code)
        for num in nums:
            states = [(r.state, r.exit_code) for r in rows if r.job_num == num]
            if (
                states
                and str(num) not in self._final
                and all(s in TERMINAL_STATES for s, _ in states)
            ):
                ok = all(s == "COMPLETED" for s, _ in states)
                self._final[str(num)] = ("COMPLETED" if ok else "FAILED", None)

    def _dependency_reason(self, job: LiveJob, singles: dict[tuple[str, str], int]) -> str:
        dep = job.dependency
        assert dep is not None
        if dep.singleton and singles.get((job.user, job.name), job.pk) < job.pk:
            return "Dependency"
        for kind, refs in (
            ("afterok", dep.afterok),
            ("afternotok", dep.afternotok),
            ("afterany", dep.afterany),
        ):
            for ref in refs:
                if self._active_ref(ref):
                    return "Dependency"
                state = self._final.get(ref, ("COMPLETED", 0))[0]
                if kind == "afterok" and state != "COMPLETED":
                    return "DependencyNeverSatisfied"
                if kind == "afternotok" and state == "COMPLETED":
                    return "DependencyNeverSatisfied"
        return ""

    # -- internals: jobs ---------------------------------------------------------

    def _targets(self, conn: sa.Connection, principal: Principal, job_id: str) -> Sequence[Any]:
        jobs = sa.select(*RowTexts.COLUMNS)  # a finished job may be revived: LiveJob.from_row
        rows = conn.execute(jobs.where(t.jobs.c.job_id == job_id)).all()
        if not rows and job_id.isdigit():
            rows = conn.execute(
                jobs.where(t.jobs.c.job_num == int(job_id)).order_by(t.jobs.c.id)
            ).all()
        if not rows or (not principal.is_operator and rows[0].user != principal.user):
            raise NotFound(f"job {job_id}: no such job")
        if principal.role == "node":
            raise Forbidden("a node token cannot act on jobs")
        return rows

    def _act(self, principal: Principal, job_id: str, action: str, message: str) -> JobOut:
        now = self.clock.now()
        with self._lock:
            self._running_check()
            with self.store.read() as conn:
                rows = self._targets(conn, principal, job_id)
            changes: list[Change] = []
            finished_rows = []
            for row in rows:
                if row.job_id in self._cleanup:
                    raise Conflict(f"job {row.job_id}: its run is still being stopped on its nodes")
                live = self._jobs.get(row.job_id)
                if live is None:
                    finished_rows.append(row)
                    continue
                change = self._action_change(live, action, now, message, principal)
                if change is not None:
                    changes.append(change)
            if action == "requeue" and finished_rows:
                texts = RowTexts()
                changes.extend(self._revive(r, texts, now, message) for r in finished_rows)
            if not changes and action == "hold" and self._all_held(rows):
                # As Slurm's scontrol hold: holding what is already held succeeds quietly.
                return self.get_job(principal=principal, job_id=rows[0].job_id)
            if not changes:
                raise Conflict(f"job {job_id}: cannot {action} a job that is {rows[0].state}")
            self._commit(changes)
            if action != "hold":
                self._wake()
        return self.get_job(principal=principal, job_id=rows[0].job_id)

    def _action_change(
        self, live: LiveJob, action: str, now: float, message: str, principal: Principal
    ) -> Change | None:
        if action == "hold":
            return self._hold_change(live, "admin" if principal.is_operator else "user")
        if action == "release":
            if live.hold == "admin" and not principal.is_operator:
                raise Forbidden(
                    f"job {live.job_id}: held by an operator or admin, and only they may release it"
                )
            return self._hold_change(live, None)
        if live.state == "PENDING":
            if action == "requeue":
                return None
            return self._end_change(live, None, None, None, now, message, outcome="CANCELLED")
        if live.kill is not None and live.kill["mode"] == "cancel":
            return None
        mode = "cancel" if action == "cancel" else "requeue"
        kill = {
            "mode": mode,
            "signal": "TERM",
            "grace_s": self.setup.kill_grace_s,
            "deadline": now + self.setup.kill_grace_s,
        }
        return Change(
            live,
            {"kill": kill, "state": "COMPLETING"},
            [(now, "COMPLETING", message)],
            after=lambda j: _set_kill(j, kill, "COMPLETING"),
        )

    def _all_held(self, rows: Sequence[Any]) -> bool:
        """Whether ``rows`` have a pending job and every pending one is held."""
        pending = [j for r in rows if (j := self._jobs.get(r.job_id)) and j.state == "PENDING"]
        return bool(pending) and all(j.held for j in pending)

    def _hold_change(self, live: LiveJob, hold: HoldKind | None) -> Change | None:
        """Put a pending job under ``hold`` (None: release it); None when nothing changes.

        An admin hold is never lowered to a user hold. The reason shows at once.
        """
        if live.state != "PENDING" or live.hold == hold or (hold == "user" and live.held):
            return None
        if hold is not None and live.job_id in self.book.pending:
            self.book.withdraw(live.job_id)
        held, admin = hold is not None, hold == "admin"

        def flip(job: LiveJob) -> None:
            job.held, job.admin_hold = held, admin
            # The cycle, woken by a release, gives the next reason.
            job.reason = HOLD_REASONS[hold] if hold is not None else ""

        return Change(live, {"held": held, "admin_hold": admin}, [], after=flip)

    def _revive(self, row: Any, texts: RowTexts, now: float, message: str) -> Change:
        live = LiveJob.from_row(row, texts)
        changes = {
            "state": "PENDING",
            "reason": "",
            "end_time": None,
            "exit_code": None,
            "signal": None,
            "restart_count": row.restart_count + 1,
            "kill": None,
            "node_list": None,
            "gpu_uuids": None,
            "assignments": None,
            "start_time": None,
        }

        def after(job: LiveJob) -> None:
            self.metrics.requeued.labels(job.partition).inc()
            job.state, job.restart_count, job.placements = "PENDING", row.restart_count + 1, []
            self._final.pop(job.job_id, None)
            self._add_live(job)

        return Change(
            live, changes, [(now, "REQUEUED", message), (now, "PENDING", "")], after=after
        )

    def _visible_row(self, conn: sa.Connection, principal: Principal, job_id: str) -> Any:
        row = conn.execute(sa.select(t.jobs).where(t.jobs.c.job_id == job_id)).first()
        if row is None or (not principal.is_operator and row.user != principal.user):
            raise NotFound(f"job {job_id}: no such job")
        return row

    def _job_out(self, row: Any, history: Sequence[Any]) -> JobOut:
        live = self._jobs.get(row.job_id)
        fields = row._mapping
        # A listed row carries only the spec's paths (_LISTED), a full one the whole spec.
        spec = fields.get("spec", fields)
        array_id = str(row.job_num) if row.array_task_id is not None else None
        stdout, stderr = output_paths(
            spec,
            job_id=row.job_id,
            array_job_id=array_id,
            task=row.array_task_id,
            name=row.name,
            user=row.user,
        )
        request = row.request
        return JobOut(
            job_id=row.job_id,
            array_job_id=array_id,
            array_task_id=row.array_task_id,
            name=row.name,
            user=row.user,
            account=row.account,
            partition=row.partition,
            qos=row.qos,
            state=row.state,
            reason=live.reason if live is not None else row.reason,
            nodes=request["nodes"],
            gpus_per_node=request["gpus"],
            gpu_milli=request["gpu_milli"],
            mig_profile=request["mig_profile"] or None,
            cpus_per_task=request["cpu_milli"] // 1000,
            mem_mib=request["memory_mib"],
            time_limit_s=row.time_limit_s,
            submit_time=row.submit_time,
            start_time=row.start_time,
            end_time=row.end_time,
            expected_start=live.expected_start if live is not None else None,
            priority=(
                self._ranked.of(row.job_id)
                if self._ranked is not None and live is not None and live.state == "PENDING"
                else None
            ),
            node_list=row.node_list or [],
            gpu_uuids=row.gpu_uuids or [],
            exit_code=row.exit_code,
            signal=row.signal,
            restart_count=row.restart_count,
            workdir=spec["workdir"],
            stdout_path=stdout,
            stderr_path=stderr,
            held=row.held,
            hold=hold_kind(row.held, row.admin_hold),
            history=[JobEvent(time=h.time, state=h.state, reason=h.reason) for h in history],
        )

    # -- internals: agents -------------------------------------------------------

    def _checkpointed(self, checkpoints: Sequence[Checkpointed], now: float) -> None:
        """Record runs' latest checkpoints for preemption's cost (no later than now:
        a node's clock may run ahead)."""
        for c in checkpoints:
            live = self._jobs.get(c.job_id)
            running = self.book.running.get(c.job_id)
            if live is None or live.run != c.run or running is None:
                continue
            at = int(min(c.at, now))
            if at > (running.job.last_checkpoint or 0):
                self.book.checkpoint(c.job_id, at)

    def _node_health(
        self, principal: Principal, info: NodeInfo, health: NodeHealth, now: float
    ) -> None:
        """Act on a node's changed health verdict: drain it with the reason, or resume a
        node its health drained (an operator's drain stays); mask the GPUs it names,
        so that new jobs avoid them while the rest of the node works. Each change,
        and each remediation, is an event in the node's history."""
        name = info.node.name
        last = self._health.get(name) or NodeHealth(ok=True)  # silence until a problem
        self._health[name] = health
        events: list[tuple[str, dict[str, Any]]] = []
        if health.remediation and last.at != health.at:
            events.append(("node.remediation", {"result": health.remediation}))
        if (last.ok, last.reason, last.masked_gpus) == (
            health.ok,
            health.reason,
            health.masked_gpus,
        ):
            if not events:
                return
        else:
            detail = {"ok": health.ok, "reason": health.reason, "masked_gpus": health.masked_gpus}
            events.append(("node.health", detail))
        by_health = info.drain and info.reason.startswith(HEALTH_DRAIN)
        drain: bool | None = None
        if not health.ok and (not info.drain or by_health):
            drain, reason = True, HEALTH_DRAIN + health.reason
        elif health.ok and by_health:
            drain, reason = False, ""

        def unit(conn: sa.Connection) -> None:
            if drain is not None:
                update = t.nodes.update().where(t.nodes.c.name == name)
                conn.execute(update.values(drain=drain, reason=reason))
            for action, detail in events:
                persist.audit(
                    conn, time=now, who=principal.user, action=action, target=name, detail=detail
                )

        self._writer().call(unit)
        for g in set(last.masked_gpus) | set(health.masked_gpus):
            if g < len(info.node.gpus):
                self.book.mask_gpu(name, g, g in health.masked_gpus)
        if drain is not None:
            info.drain, info.reason = drain, reason
            self._set_state(info, info.state)
            log.warning("node %s %s", name, "drained: " + reason if drain else "healthy: resumed")

    def _agent_check(self, principal: Principal, node: str) -> None:
        if principal.role == "admin":
            return
        if principal.role != "node" or principal.node != node:
            raise Forbidden(f"only node {node}'s own token may act for it")

    def _apply_reports(self, node: str, reports: Sequence[RunReport], now: float) -> bool:
        changes = []
        for rep in reports:
            lingering = self._cleanup.get(rep.job_id)
            if lingering is not None and lingering.run == rep.run and node in lingering.node_list:
                lingering.gone.add(node)
                if lingering.gone >= set(lingering.node_list):
                    changes.append(self._release(lingering))
                continue
            live = self._jobs.get(rep.job_id)
            if live is None or live.run != rep.run or live.state == "PENDING":
                continue  # an old run, or a report already applied
            if node not in live.node_list or node in live.exits:
                continue
            change = self._task_ended(live, node, rep, now)
            if change is not None:
                changes.append(change)
        self._commit(changes)
        return bool(changes)

    def _task_ended(self, live: LiveJob, node: str, rep: RunReport, now: float) -> Change:
        """One task of the run ended on ``node``.

        A single-node run ends with it. A gang's run ends when all its tasks
        have ended (COMPLETED only if all exited 0; the exit code is the
        worst), or at its first failure: then the run is FAILED with that
        task's code and the others are killed, their room held until they
        are confirmed gone. A run ends when its last task did on its node,
        not when the controller heard of it (its agent may have been down).
        """
        start = live.start_time if live.start_time is not None else now
        at = min(max(rep.at, start), now)  # the node's time, bounded against its clock's skew
        exit = {
            "state": rep.state,
            "exit_code": rep.exit_code,
            "signal": rep.signal,
            "message": rep.message,
            "cause": rep.cause,
            "at": at,
        }
        exits = {**live.exits, node: exit}
        ok = rep.state == "exited" and rep.exit_code == 0
        mode = live.kill["mode"] if live.kill else None
        # A run its time limit ended is TIMEOUT whatever its exit (as in Slurm), even
        # one that traps SIGTERM and exits 0; an agent that gives no cause is taken
        # at its word only for a death by signal after the limit.
        past_limit = (
            live.start_time is not None
            and live.time_limit_s > 0  # 0: no limit to be past
            and at >= start + live.time_limit_s
        )
        if mode is None and (
            any(e.get("cause") == "time_limit" for e in exits.values())
            or (rep.cause is None and rep.state == "signalled" and past_limit)
        ):
            mode = "timeout"
        others = [n for n in live.node_list if n not in exits]
        if mode is None and rep.cause == "node_fail" and not others:
            # The node could not start or follow the run (its agent's state directory
            # failed): not the job's doing, so NODE_FAIL and a requeue, as for a lost node.
            mode = "node-fail"
        if others and (ok or mode is not None):

            def record(job: LiveJob) -> None:
                job.exits = exits

            return Change(live, {"task_exits": exits}, [], after=record)
        if others:
            kill = {
                "mode": "gang-fail",
                "signal": "TERM",
                "grace_s": self.setup.kill_grace_s,
                "deadline": now + self.setup.kill_grace_s,
            }
            message = f"task on {node} failed: " + (rep.message or _how(exit))
            change = self._end_change(
                live, None, rep.exit_code, rep.signal, now, message, "FAILED", kill, end=at
            )
            change.after = _then(change.after, lambda job: job.gone.update(exits))
            return change
        worst = max(exits.values(), key=_badness)
        code, signal = worst["exit_code"], worst["signal"]
        good = all(e["state"] == "exited" and e["exit_code"] == 0 for e in exits.values())
        outcome = "COMPLETED" if good else "FAILED"
        # Task exits stored before they carried their time ended when heard of.
        end = max(float(e.get("at", now)) for e in exits.values())
        if (mode in ("requeue", "preempt-requeue", "node-fail") and live.requeue) or (
            mode == "requeue"
        ):
            self.book.stop(live.job_id, int(end), requeue=True)
            if live.job_id in self.book.pending:
                self.book.withdraw(live.job_id)  # the next cycle decides if it may start
        elif mode is None:
            self.book.finish(live.job_id, int(end))
        else:
            self.book.stop(live.job_id, int(end), requeue=False)
        message = str(worst["message"])
        return self._end_change(live, mode, code, signal, now, message, outcome, end=end)

    def _note_strays(
        self,
        info: NodeInfo,
        running: Sequence[RunRef],
        reports: Sequence[RunReport] = (),
        *,
        found: bool = True,
    ) -> bool:
        """Keep new work off a node while its agent holds runs the controller does not
        expect (``_reply`` kills them: a run a lost node kept, whose job ran again),
        since their room is not known, as a cancel's room stays held until its end is
        reported. Returns whether the node just became usable again.

        Strays are ``found`` only when the node (re)registers or comes back from down:
        any other sync may carry a list of runs older than an end already reported
        (a long poll's), and only shrinks the strays known."""
        name = info.node.name
        expected = {(j, self._live(j).run) for j in self._on_node.get(name, ())}
        expected.update((r.job_id, r.run) for r in reports)  # ended, whatever else it says
        strays = frozenset((r.job_id, r.run) for r in running) - expected
        if not found:
            strays &= info.strays
        if strays == info.strays:
            return False
        cleared = not strays
        info.strays = strays
        self._set_state(info, info.state)
        if not cleared:
            held = ", ".join(f"job {j} run {r}" for j, r in sorted(strays))
            log.warning("node %s holds runs not expected (%s): no new work yet", name, held)
        return cleared

    def _reply(self, node: str, running: Sequence[RunRef], now: float) -> SyncReply:
        """What ``node`` must start and kill, given the runs it holds.

        A run under a kill gets it whether the agent holds the run or not: one
        it has not started yet (the start and a cancel crossed) it ends
        unstarted and reports, so the job ends at once and the start can never
        run later. Each kill is sent once (``_new_kills``).
        """
        held = {(r.job_id, r.run) for r in running}
        starts: list[JobLaunch] = []
        kills: list[JobKill] = []
        desired = set()
        for job_id in sorted(self._on_node.get(node, ())):
            live = self._live(job_id)
            desired.add((job_id, live.run))
            if node in live.exits:
                continue  # this gang task has ended; the others run on
            if live.kill is not None:
                kills.append(
                    JobKill(
                        job_id=job_id,
                        run=live.run,
                        signal=live.kill["signal"],
                        grace_s=int(live.kill["grace_s"]),
                        reason=live.kill["mode"],
                    )
                )
            elif (job_id, live.run) not in held:
                starts.append(self._launch(live, node))
        for job_id, run in sorted(held - desired):
            kills.append(
                JobKill(job_id=job_id, run=run, signal="KILL", grace_s=0, reason="not expected")
            )
        return SyncReply(
            jobs_to_start=starts,
            jobs_to_kill=self._new_kills(node, kills, now),
            mig_changes=self._mig.changes(node),
            heartbeat_interval_s=self.setup.heartbeat_interval_s,
            node_state=self._node_state(node),
        )

    def _mig_done(
        self, principal: Principal, info: NodeInfo, dones: Sequence[MigDone], now: float
    ) -> bool:
        """Apply the agent's reports of MIG changes (``controller.relayout``); True when a
        GPU got its new layout. A failed change leaves the GPU out of work (audited), for
        the operator: the node's next registration describes it anew."""
        node = info.node.name
        settled = [d for d in dones if self._mig.settle(node, d)]
        if not settled:
            return False
        for d in settled:
            if d.error:
                log.error("node %s: MIG change of GPU %d failed: %s", node, d.gpu, d.error)
            else:
                self.book.reconfigured(node, d.gpu)
        info.node = self.book.state.nodes[self.book.state.index[node]]
        info.inventory = with_mig(info.inventory, info.node)

        def unit(conn: sa.Connection) -> None:
            conn.execute(
                t.nodes.update().where(t.nodes.c.name == node).values(inventory=info.inventory)
            )
            conn.execute(relayout.cleared(node, [d.gpu for d in settled]))
            for d in settled:
                action = "node.mig.failed" if d.error else "node.mig"
                who = principal.user
                persist.audit(
                    conn, time=now, who=who, action=action, target=node, detail=d.model_dump()
                )

        self._writer().call(unit)
        return any(not d.error for d in settled)

    def _new_kills(self, node: str, kills: Sequence[JobKill], now: float) -> list[JobKill]:
        """The kills of ``kills`` not yet sent to ``node``: a changed one (SIGKILL after
        TERM) at once, the same one again only ``KILL_RESEND_S`` after it was sent
        (in case the answer was lost). Forgets the kills no longer wanted."""
        sent = self._kills_sent.get(node, {})
        fresh: list[JobKill] = []
        remembered: dict[tuple[str, int], tuple[JobKill, float]] = {}
        for kill in kills:
            key = (kill.job_id, kill.run)
            before = sent.get(key)
            if before is not None and before[0] == kill and now - before[1] < KILL_RESEND_S:
                remembered[key] = before
            else:
                fresh.append(kill)
                remembered[key] = (kill, now)
        if remembered:
            self._kills_sent[node] = remembered
        else:
            self._kills_sent.pop(node, None)
        return fresh

    def _live(self, job_id: str) -> LiveJob:
        """An active job, or one in cleanup."""
        live = self._jobs.get(job_id)
        return live if live is not None else self._cleanup[job_id]

    def _launch(self, live: LiveJob, node: str) -> JobLaunch:
        spec = live.spec
        rank = live.node_list.index(node)
        place = live.placements[rank]
        array_id = str(live.job_num) if live.task is not None else None
        stdout, stderr = output_paths(
            spec,
            job_id=live.job_id,
            array_job_id=array_id,
            task=live.task,
            name=live.name,
            user=live.user,
        )
        return JobLaunch(
            job_id=live.job_id,
            run=live.run,
            name=live.name,
            user=live.user,
            argv=spec.get("command"),
            script=spec.get("script"),
            workdir=spec["workdir"],
            env={**dict(self._partition_nccl(live)), **(spec.get("env") or {})},
            stdout_path=stdout,
            stderr_path=stderr,
            time_limit_s=live.time_limit_s,
            kill_grace_s=self.setup.kill_grace_s,
            gpu_uuids=list(place.get("mig") or place["gpu_uuids"]),
            gpu_milli=place["gpu_milli"],
            gpu_memory_mib=place.get("gpu_memory_mib") or 0,
            cpu_milli=place["cpu_milli"],
            memory_mib=place["memory_mib"],
            signal=spec.get("signal"),
            array_job_id=array_id,
            array_task_id=live.task,
            node_rank=rank,
            node_list=live.node_list,
            checkpoint_dir=self._checkpoint_dir(live),
            container=spec.get("container"),
        )

    def _partition_nccl(self, live: LiveJob) -> tuple[tuple[str, str], ...]:
        part = self.setup.partitions.get(live.partition)
        return part.nccl if part is not None else ()

    def _checkpoint_dir(self, live: LiveJob) -> str:
        """The job's checkpoint directory: under its partition's storage (by user, then
        job), else under its workdir. The same for every run, so a requeue resumes."""
        part = self.setup.partitions.get(live.partition)
        if part is not None and part.checkpoint_dir:
            return os.path.join(part.checkpoint_dir, live.user, live.job_id)
        return os.path.join(live.spec["workdir"], ".gpufleet", "checkpoints", live.job_id)

    def _node_state(self, name: str) -> str:
        """What the node list shows. A drain shows whatever the agent's state (as
        Slurm's ``drain``/``drng``), so a drain of a down or agentless node is seen."""
        info = self._nodes[name]
        busy = bool(self._on_node.get(name))
        if info.drain:
            return "draining" if busy else "drain"
        if info.state != "up":
            return info.state
        if not busy:
            return "idle"
        i = self.book.state.index[name]
        st = self.book.state
        full = (
            all(
                int(st.gpu_milli_total[i, g] - st.gpu_milli_free[i, g]) >= 1000
                for g in range(len(info.node.gpus))
            )
            if info.node.gpus
            else True
        )
        return "allocated" if full else "mixed"

    def _node_out(self, name: str, viewer: str | None) -> NodeOut:
        """The node as ``viewer`` may see it: None (an operator) sees every job's id, a
        user only its own jobs' ids, the others counted, so job ids tell nothing about
        who owns what (as a job is 404 to another user)."""
        info = self._nodes[name]
        st = self.book.state
        i = st.index[name]
        jobs: list[str] = []
        others = 0
        per_gpu: dict[int, list[str]] = defaultdict(list)
        per_gpu_others: dict[int, int] = defaultdict(int)
        masked = self._masked(name)
        for job_id in sorted(self._on_node.get(name, ())):
            live = self._live(job_id)
            mine = viewer is None or live.user == viewer
            if mine:
                jobs.append(job_id)
            else:
                others += 1
            for p in live.placements:
                if p["node"] == name:
                    for g in p["gpus"]:
                        if mine:
                            per_gpu[g].append(job_id)
                        else:
                            per_gpu_others[g] += 1
        return NodeOut(
            name=name,
            state=self._node_state(name),
            reason=info.reason,
            pool=info.node.pool,
            cpu_milli=info.node.cpu_milli,
            cpu_milli_used=int(st.cpu_total[i] - st.cpu_free[i]),
            memory_mib=info.node.memory_mib,
            memory_mib_used=int(st.mem_total[i] - st.mem_free[i]),
            gpus=[
                GpuOut(
                    index=g.index,
                    model=g.model,
                    memory_mib=g.memory_mib,
                    uuid=g.uuid,
                    used_milli=int(st.gpu_milli_total[i, g.index] - st.gpu_milli_free[i, g.index]),
                    jobs=per_gpu[g.index],
                    other_jobs=per_gpu_others[g.index],
                    mig=[p for p, _ in g.mig or ()],
                    masked=masked.get(g.index, ""),
                )
                for g in info.node.gpus
            ],
            labels=dict(info.node.labels),
            last_heartbeat=info.last_heartbeat,
            jobs=jobs,
            other_jobs=others,
        )

    def _masked(self, name: str) -> dict[int, str]:
        """The GPUs of ``name`` its agent's health verdict masks, with why (the GPU's
        reading says; else ``unhealthy``)."""
        health = self._health.get(name)
        if health is None or not health.masked_gpus:
            return {}
        readings = self._readings.snapshot().get(name)
        why = {r.index: r.health_reason for r in readings.gpus} if readings else {}
        return {g: why.get(g) or "unhealthy" for g in health.masked_gpus}

    def _set_drain(self, principal: Principal, name: str, *, drain: bool, reason: str) -> NodeOut:
        _require(principal, "operator")
        now = self.clock.now()
        with self._lock:
            self._running_check()
            info = self._nodes.get(name)
            if info is None:
                raise NotFound(f"node {name}: no such node")

            def unit(conn: sa.Connection) -> None:
                conn.execute(
                    t.nodes.update()
                    .where(t.nodes.c.name == name)
                    .values(drain=drain, reason=reason)
                )
                persist.audit(
                    conn,
                    time=now,
                    who=principal.user,
                    action="node.drain" if drain else "node.resume",
                    target=name,
                    detail={"reason": reason},
                )

            self._writer().call(unit)
            info.drain, info.reason = drain, reason
            self._set_state(info, info.state)
        self._wake()
        return self.get_node(principal=principal, name=name)


_LISTED = (
    *(c for c in t.jobs.c if c.name not in ("spec", "assignments", "kill", "task_exits")),
    t.jobs.c.spec["workdir"].as_string().label("workdir"),
    t.jobs.c.spec["stdout"].as_string().label("stdout"),
    t.jobs.c.spec["stderr"].as_string().label("stderr"),
)
"""What a job listing reads: the row without its large JSON, and the spec's paths only."""


@dataclass(frozen=True, slots=True)
class _Event:
    """A history entry not stored as a row (a job's submission)."""

    time: float
    state: str
    reason: str


@dataclass(eq=False)
class Change:
    """One job's change in a commit: its row values, history steps and run rows.

    ``after`` applies the change to memory once the transaction committed.
    """

    job: LiveJob
    row: dict[str, Any]
    history: list[tuple[float, str, str]]
    runs: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    after: Callable[[LiveJob], None] = lambda job: None


def _finished_jobs(conn: sa.Connection) -> list[prediction_error.Finished]:
    """The jobs that ended by themselves, in the order they ended, each with the run that
    ended it and its first start."""
    runs = t.job_runs
    first = (
        sa.select(runs.c.job, sa.func.min(runs.c.start_time).label("first_start"))
        .group_by(runs.c.job)
        .subquery()
    )
    rows = conn.execute(
        sa.select(
            t.jobs.c.user,
            t.jobs.c.account,
            t.jobs.c.name,
            t.jobs.c.submit_time,
            t.jobs.c.time_limit_s,
            t.jobs.c.state,
            runs.c.gpu_milli,
            runs.c.start_time,
            runs.c.end_time,
            first.c.first_start,
        )
        .join(runs, (runs.c.job == t.jobs.c.id) & (runs.c.run == t.jobs.c.run))
        .join(first, first.c.job == t.jobs.c.id)
        .where(t.jobs.c.state.in_(LEARNT_STATES), runs.c.end_time.is_not(None))
        .order_by(runs.c.end_time, t.jobs.c.id)
    )
    return [
        prediction_error.Finished(
            Features(r.user, r.account, r.name, r.gpu_milli / 1000, r.time_limit_s or MAX_TIME_S),
            submit=int(r.submit_time),
            first_start=int(r.first_start),
            end=int(r.end_time),
            ran_s=int(r.end_time - r.start_time),
            failed=r.state == "FAILED",
        )
        for r in rows
    ]


def _held(running: Sequence[RunRef]) -> frozenset[tuple[str, int]]:
    return frozenset((r.job_id, r.run) for r in running)


def _badness(exit: Mapping[str, Any]) -> tuple[int, int, int]:
    """Orders task exits from best to worst: exit 0, then higher codes, then signals."""
    return (exit["state"] != "exited", exit["signal"] or 0, exit["exit_code"] or 0)


def _how(exit: Mapping[str, Any]) -> str:
    if exit["state"] == "signalled":
        return f"killed by signal {exit['signal']}"
    if exit["state"] == "failed_to_start":
        return "failed to start"
    return f"exit code {exit['exit_code']}"


def _then(
    first: Callable[[LiveJob], None], second: Callable[[LiveJob], None]
) -> Callable[[LiveJob], None]:
    def both(job: LiveJob) -> None:
        first(job)
        second(job)

    return both


def _set_kill(job: LiveJob, kill: dict[str, Any], state: str | None = None) -> None:
    job.kill = kill
    if state is not None:
        job.state = state


def _execute(stmt: sa.Executable, conn: sa.Connection) -> None:
    conn.execute(stmt)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_RANK = {"node": 0, "metrics": 0, "alerts": 0, "user": 1, "operator": 2, "admin": 3}
_SYSTEM = Principal(user="system", role="admin")


def _cursor(cursor: str) -> int:
    """The row id a ``next_cursor`` names; Invalid for anything this server never issued
    (``isdigit`` alone takes "²", and an id must fit the stores' 64-bit keys)."""
    if not (cursor.isascii() and cursor.isdigit()) or int(cursor) >= 2**63:
        raise Invalid("query.cursor", "not a cursor this server issued")
    return int(cursor)


def _require(principal: Principal, role: Role) -> None:
    """Forbidden unless ``principal`` has ``role`` or a higher one (node, metrics and alerts
    tokens rank lowest, each only its own)."""
    lowest = principal.role in ("node", "metrics", "alerts") and role != principal.role
    if _RANK[principal.role] < _RANK[role] or lowest:
        raise Forbidden(f"needs the {role} role")


def _check_refs(conn: sa.Connection, refs: Sequence[str]) -> None:
    """Invalid unless every job a dependency names exists."""
    if not refs:
        return
    nums = [int(r) for r in refs if r.isdigit()]
    found: set[str] = set(
        conn.execute(sa.select(t.jobs.c.job_id).where(t.jobs.c.job_id.in_(list(refs)))).scalars()
    )
    if nums:
        numbers = conn.execute(sa.select(t.jobs.c.job_num).where(t.jobs.c.job_num.in_(nums)))
        found.update(map(str, numbers.scalars().all()))
    missing = [r for r in refs if r not in found]
    if missing:
        raise Invalid("body.dependency", f"no job {missing[0]}")


def _digest(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def _keep_server(
    new: ControllerSetup, old: ControllerSetup, timings: bool = False
) -> ControllerSetup:
    """``new`` with what no configuration document holds kept from ``old``, and the
    server's timings too unless ``timings`` (they change only at a restart)."""
    kept: dict[str, Any] = {
        "workload_window": old.workload_window,
        "output_read_limit": old.output_read_limit,
        "backstop_s": old.backstop_s,
        "validate_config": old.validate_config,
        "reconfigure": old.reconfigure,
        "document": old.document,
    }
    if not timings:
        for name in ("interval_s", "heartbeat_interval_s", "heartbeat_timeout_s", "kill_grace_s"):
            kept[name] = getattr(old, name)
    return replace(new, **kept)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, ``null`` deletes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _has_account(tree: AccountTree, name: str) -> bool:
    try:
        tree.account(name)
    except KeyError:
        return False
    return True


def _inventory_node(inventory: dict[str, Any], uuids: Sequence[str]) -> Node | None:
    try:
        nodes = nodes_from_groups([inventory], source="store")
    except ClusterFileError:
        return None
    node = nodes[0]
    if len(uuids) == len(node.gpus):
        gpus = tuple(replace(g, uuid=u) for g, u in zip(node.gpus, uuids, strict=True))
        node = replace(node, gpus=gpus)
    return node


def _mig_index(st: ClusterState, node: int, mig_id: str) -> int:
    """The state's index of MIG instance ``"GPU:PROFILE@START"`` on ``node``."""
    gpu, _, rest = mig_id.partition(":")
    start = int(rest.rpartition("@")[2])
    hits = np.flatnonzero(
        (st.mig_node == node) & (st.mig_gpu == int(gpu)) & (st.mig_start == start)
    )
    return int(hits[0])


class _StateLock:
    """The controller's state lock (reentrant): each acquisition first runs ``on_enter``
    (taking in the submissions committed meanwhile)."""

    def __init__(self, on_enter: Callable[[], None]) -> None:
        self._lock = threading.RLock()
        self._on_enter = on_enter

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._on_enter()
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _CollectorPause:
    """Pauses the cyclic garbage collector while any holder needs it paused.

    ``gc.disable`` is process-wide: the count makes concurrent holders safe
    (the collector resumes when the last one releases)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0

    def hold(self) -> None:
        with self._lock:
            self._holders += 1
            gc.disable()

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                gc.enable()

    def __enter__(self) -> None:
        self.hold()

    def __exit__(self, *exc: object) -> None:
        self.release()


_GC_PAUSE = _CollectorPause()
