"""The controller's service: every operation the HTTP API (and the CLI's direct
store commands) performs, with its permission checks, in one class.

Routers stay thin: they authenticate with ``authenticate``, call one method
with keyword arguments and serialise the result. Methods raise only the
``controller.errors`` types for anything a caller did wrong (``NotFound``,
``Forbidden``, ``Invalid`` naming the field, ``Conflict``); anything else is
a bug.

Roles: ``admin`` may do everything; ``operator`` sees every job and node and
may cancel, hold, release or requeue anyone's job and drain or resume nodes;
``user`` submits and acts on its own jobs only (another user's job is
``NotFound`` to it, so job ids leak nothing); ``node`` may only register and
sync as its own node.

Durability: a method returns only after what it changed is committed, so an
acknowledged submission survives a crash of the controller. Scheduling
decisions are persisted before any agent can see them.

Threading: every method is safe to call from many threads at once. All
methods are blocking except ``wait_for_agent_work`` (a coroutine); an async
server runs the blocking ones in its thread pool.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpufleet.api.agent_schemas import AgentRegister, AgentSync, RegisterReply, SyncReply
from gpufleet.api.schemas import JobOut, JobPage, JobStateName, JobSubmit, Role, Submitted
from gpufleet.controller.clock import Clock
from gpufleet.controller.setup import ControllerSetup
from gpufleet.controller.views import (
    AccountOut,
    AuditPage,
    ConfigOut,
    FairshareRow,
    NodeOut,
    OutputChunk,
    PartitionOut,
    QosOut,
    ReservationOut,
    TokenCreated,
    TokenOut,
    UsageKey,
    UsageRow,
)

DEFAULT_PAGE = 100
MAX_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's user and role; ``node`` only for a node token."""

    user: str
    role: Role
    token_id: str = ""
    node: str | None = None
    account: str = ""

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
        self, *, setup: ControllerSetup, db_url: str, clock: Clock | None = None
    ) -> None:
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------

    def start(self, *, loop: bool = True) -> None:
        """Migrate the store to head, rebuild state from it, start the loop.

        With ``loop=False`` no thread starts: the caller drives scheduling by
        ``run_cycle_now`` (tests with a manual clock). Running jobs are left
        running: their agents re-report them. Idempotent.
        """
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the loop and the writer after in-flight commits; idempotent. Kills no job."""
        raise NotImplementedError

    def run_cycle_now(self) -> None:
        """Run one scheduling cycle synchronously and persist its effects (tests, admin)."""
        raise NotImplementedError

    # -- auth --------------------------------------------------------------------

    def authenticate(self, *, token: str) -> Principal | None:
        """The principal a bearer token stands for, or None if unknown or revoked.

        Compares SHA-256 digests, so the secret is never stored.
        """
        raise NotImplementedError

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
        raise NotImplementedError

    def revoke_token(self, *, principal: Principal, token_id: str) -> None:
        """Revoke a token (admin only); NotFound if no such id. Idempotent. Audited."""
        raise NotImplementedError

    def list_tokens(self, *, principal: Principal) -> list[TokenOut]:
        """Every token, revoked ones included (admin only), oldest first."""
        raise NotImplementedError

    # -- jobs --------------------------------------------------------------------

    def submit(self, *, principal: Principal, spec: JobSubmit) -> Submitted:
        """Queue a job (or an array job) for ``principal`` (user role or above).

        Fills defaults (partition, QoS, account, time limit), validates names
        and the array/dependency/signal syntax (``Invalid`` with ``body.X``),
        and returns after the job is committed. A ``request_id`` seen before
        for this user returns the first job with ``duplicate=True`` and
        creates nothing.
        """
        raise NotImplementedError

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
        raise NotImplementedError

    def get_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """One job with its full history; NotFound if absent or not the caller's."""
        raise NotImplementedError

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

        NotFound for an unknown job or a file not (yet) there; at most
        ``limit`` bytes (default the setup's ``output_read_limit``), decoded
        as UTF-8 with replacement.
        """
        raise NotImplementedError

    def cancel_job(self, *, principal: Principal, job_id: str, reason: str = "") -> JobOut:
        """Cancel a pending job at once, or ask the agents to kill a running one.

        An array job id cancels every task not yet finished. Conflict if the
        job has already ended. Own job or operator.
        """
        raise NotImplementedError

    def hold_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """Hold a pending job (or every pending task of an array); Conflict if not pending."""
        raise NotImplementedError

    def release_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """Release a held job (or array); Conflict if it is not held."""
        raise NotImplementedError

    def requeue_job(self, *, principal: Principal, job_id: str) -> JobOut:
        """Stop a running job and put it back in the queue (its run number grows).

        A finished job (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL,
        PREEMPTED) is queued again too, as Slurm's ``scontrol requeue`` does.
        Conflict for a pending job.
        """
        raise NotImplementedError

    # -- nodes -------------------------------------------------------------------

    def list_nodes(self, *, principal: Principal) -> list[NodeOut]:
        """Every node with its per-GPU allocation, by name."""
        raise NotImplementedError

    def get_node(self, *, principal: Principal, name: str) -> NodeOut:
        """One node; NotFound if unknown."""
        raise NotImplementedError

    def drain_node(self, *, principal: Principal, name: str, reason: str) -> NodeOut:
        """Start no more jobs on the node; running ones finish (operator). Audited."""
        raise NotImplementedError

    def resume_node(self, *, principal: Principal, name: str, reason: str = "") -> NodeOut:
        """Undo a drain, or bring a down node back if its agent syncs (operator). Audited."""
        raise NotImplementedError

    # -- policy views ------------------------------------------------------------

    def list_partitions(self, *, principal: Principal) -> list[PartitionOut]:
        """Every partition with its nodes and queue counts."""
        raise NotImplementedError

    def list_qos(self, *, principal: Principal) -> list[QosOut]:
        """Every QoS."""
        raise NotImplementedError

    def list_accounts(self, *, principal: Principal) -> list[AccountOut]:
        """The account tree, parents before children."""
        raise NotImplementedError

    def list_reservations(self, *, principal: Principal) -> list[ReservationOut]:
        """Every reservation, by start time."""
        raise NotImplementedError

    def fairshare(self, *, principal: Principal) -> list[FairshareRow]:
        """Shares, decayed usage and factor of every association, tree order."""
        raise NotImplementedError

    # -- accounting --------------------------------------------------------------

    def usage(
        self, *, principal: Principal, start: float, end: float, by: UsageKey = "user"
    ) -> list[UsageRow]:
        """GPU-hours of job runs clipped to [start, end), summed per ``by`` key.

        Fractions count their share and MIG slices their compute share. A
        ``user`` principal gets only its own row. Invalid if end <= start.
        """
        raise NotImplementedError

    def export_usage(
        self, *, principal: Principal, start: float, end: float
    ) -> Iterator[str]:
        """Finished jobs submitted in [start, end) as the simulator's history JSONL lines.

        Each line ends in a newline; ``gpufleet sim run --trace history:FILE``
        replays the file. A ``user`` principal exports its own jobs only.
        """
        raise NotImplementedError

    # -- agents ------------------------------------------------------------------

    def register_agent(
        self, *, principal: Principal, node: str, body: AgentRegister
    ) -> RegisterReply:
        """Record a node's inventory and mark it up (its node token, or admin).

        A new node joins the cluster; a known one keeps its state (a drain
        survives). Runs the agent holds that the store does not expect are
        killed on its next sync. Invalid names the bad inventory key.
        """
        raise NotImplementedError

    def sync_agent(self, *, principal: Principal, node: str, body: AgentSync) -> SyncReply:
        """Apply the agent's reports and answer with what it must start and kill. Never waits.

        Idempotent: a report already applied for (job_id, run) is ignored,
        and the answer is the difference between the store's desired state
        and ``body.running``. Also the node's heartbeat. Forbidden for a
        token of another node; NotFound for an unregistered node.
        """
        raise NotImplementedError

    async def wait_for_agent_work(self, *, node: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for news for ``node`` (a start or a kill).

        Returns True when woken. The long poll is: sync; if the reply is
        empty and ``wait_s`` > 0, await this, then sync again with no reports.
        """
        raise NotImplementedError

    # -- config and audit --------------------------------------------------------

    def get_config(self, *, principal: Principal) -> ConfigOut:
        """The effective configuration and its version (admin)."""
        raise NotImplementedError

    def patch_config(
        self, *, principal: Principal, patch: Mapping[str, Any], version: int | None = None
    ) -> ConfigOut:
        """Apply a JSON merge patch (RFC 7386) to the configuration (admin). Audited.

        Validated as a whole before anything changes (Invalid names the
        key); ``version`` if given must be the current one (else Conflict),
        so two admins cannot overwrite each other. The new version is
        persisted and takes effect at the next cycle.
        """
        raise NotImplementedError

    def list_audit(
        self, *, principal: Principal, limit: int = DEFAULT_PAGE, cursor: str | None = None
    ) -> AuditPage:
        """The audit log, newest first (admin)."""
        raise NotImplementedError
