"""The agent protocol: a node's daemon registers, then long-polls sync.

A sync that finds nothing to do and asks to wait (``wait_s`` > 0) parks
here, off the thread pool, until the controller has news for the node, the
wait ends or the server begins to stop (``stop_long_polls``); it then syncs
once more without reports, which are already applied. The service checks
that a node token acts for its own node.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool

from gpufleet.api.agent_schemas import AgentRegister, AgentSync, RegisterReply, SyncReply
from gpufleet.api.auth import Agent, ControllerDep
from gpufleet.api.openapi import problems
from gpufleet.api.params import NamePath

router = APIRouter(prefix="/v1/agents/{node}", tags=["agents"])

POLL_SLICE_S = 1.0
"""A parked sync looks this often whether the server is stopping."""


def stop_long_polls(app: FastAPI) -> None:
    """Make parked syncs answer within a slice, so a graceful shutdown is quick.

    Call it from the event loop's thread (a signal handler there will do).
    """
    app.state.stopping = True


@router.post("/register", summary="Register a node's inventory", responses=problems(404))
def register(
    node: NamePath, body: AgentRegister, who: Agent, controller: ControllerDep
) -> RegisterReply:
    """Record the node's inventory and mark it up; a known node keeps its drain."""
    return controller.register_agent(principal=who, node=node, body=body)


@router.post("/sync", summary="Report runs and fetch work", responses=problems(404))
async def sync(
    node: NamePath, body: AgentSync, who: Agent, controller: ControllerDep, request: Request
) -> SyncReply:
    """Apply the agent's reports; answer what to start and kill, waiting up to
    ``wait_s`` seconds for work when there is none yet."""
    reply = await run_in_threadpool(controller.sync_agent, principal=who, node=node, body=body)
    if reply.jobs_to_start or reply.jobs_to_kill or body.wait_s <= 0:
        return reply
    deadline = time.monotonic() + body.wait_s
    while not request.app.state.stopping:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if await controller.wait_for_agent_work(node=node, timeout_s=min(POLL_SLICE_S, left)):
            break
    # Synced again even when no news came: news between two slices is not lost.
    again = AgentSync(running=body.running)
    return await run_in_threadpool(controller.sync_agent, principal=who, node=node, body=again)
