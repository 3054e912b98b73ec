"""Nodes: list and show for everyone; drain and resume for operators."""

from __future__ import annotations

from fastapi import APIRouter

from gpufleet.api.auth import ControllerDep, Operator, User
from gpufleet.api.openapi import problems
from gpufleet.api.params import NamePath, OptionalReason
from gpufleet.api.schemas import Reason
from gpufleet.controller.views import NodeOut

router = APIRouter(prefix="/v1/nodes", tags=["nodes"])


@router.get("", summary="List nodes")
def list_nodes(who: User, controller: ControllerDep) -> list[NodeOut]:
    """Every node with its per-GPU allocation, by name."""
    return controller.list_nodes(principal=who)


@router.get("/{name}", summary="Show a node", responses=problems(404))
def get_node(name: NamePath, who: User, controller: ControllerDep) -> NodeOut:
    """One node."""
    return controller.get_node(principal=who, name=name)


@router.post("/{name}/drain", summary="Drain a node", responses=problems(404, 409))
def drain(name: NamePath, body: Reason, who: Operator, controller: ControllerDep) -> NodeOut:
    """Start no more jobs on the node; the running ones finish."""
    return controller.drain_node(principal=who, name=name, reason=body.reason)


@router.post("/{name}/resume", summary="Resume a node", responses=problems(404, 409))
def resume(
    name: NamePath,
    who: Operator,
    controller: ControllerDep,
    body: OptionalReason = None,
) -> NodeOut:
    """Undo a drain, or bring a down node back once its agent syncs."""
    reason = body.reason if body is not None else ""
    return controller.resume_node(principal=who, name=name, reason=reason)
