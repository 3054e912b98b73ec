"""The agent protocol: a node's daemon registers, then long-polls sync.

A sync that finds nothing to do and asks to wait (``wait_s`` > 0) parks
here, off the thread pool, until the controller has news for the node or
the wait ends; it then syncs once more without reports, which are already
applied. The service checks that a node token acts for its own node.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from gpufleet.api.agent_schemas import AgentRegister, AgentSync, RegisterReply, SyncReply
from gpufleet.api.auth import Agent, ControllerDep
from gpufleet.api.openapi import problems
from gpufleet.api.params import NamePath

router = APIRouter(prefix="/v1/agents/{node}", tags=["agents"])


@router.post("/register", summary="Register a node's inventory", responses=problems(404))
def register(
    node: NamePath, body: AgentRegister, who: Agent, controller: ControllerDep
) -> RegisterReply:
    """Record the node's inventory and mark it up; a known node keeps its drain."""
    return controller.register_agent(principal=who, node=node, body=body)


@router.post("/sync", summary="Report runs and fetch work", responses=problems(404))
async def sync(node: NamePath, body: AgentSync, who: Agent, controller: ControllerDep) -> SyncReply:
    """Apply the agent's reports; answer what to start and kill, waiting up to
    ``wait_s`` seconds for work when there is none yet."""
    reply = await run_in_threadpool(controller.sync_agent, principal=who, node=node, body=body)
    if reply.jobs_to_start or reply.jobs_to_kill or body.wait_s <= 0:
        return reply
    if not await controller.wait_for_agent_work(node=node, timeout_s=body.wait_s):
        return reply
    again = AgentSync(running=body.running)
    return await run_in_threadpool(controller.sync_agent, principal=who, node=node, body=again)
