"""The web dashboard's data: the cluster map in one request, and a node's page.

Both need a token, as every other route; the page itself (``api.web``) is
static and carries no data.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from gpufleet.api.auth import ControllerDep, User
from gpufleet.api.openapi import problems
from gpufleet.api.params import NamePath
from gpufleet.controller.dashboard import ClusterMap, NodePage

router = APIRouter(prefix="/v1/dashboard", tags=["dashboard"])


@router.get("/map", summary="The cluster map", response_model=ClusterMap)
def cluster_map(who: User, controller: ControllerDep) -> Response:
    """Every node and GPU with its state (free, allocated, shared, mig, draining,
    unhealthy, offline) and the jobs holding it; the owners of the caller's jobs
    (every job's for an operator)."""
    # Serialised once, here: FastAPI would dump the validated map, validate it again
    # and dump it again, which costs more than building it at 8,000 GPUs.
    body = controller.cluster_map(principal=who).model_dump_json()
    return Response(body, media_type="application/json")


@router.get("/nodes/{name}", summary="A node's page", responses=problems(404))
def node_page(name: NamePath, who: User, controller: ControllerDep) -> NodePage:
    """The node, its GPUs' latest readings and its latest events, newest first."""
    return controller.node_page(principal=who, name=name)
