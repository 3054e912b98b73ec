"""The live configuration and the audit log (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpufleet.api.auth import Admin, ControllerDep
from gpufleet.api.openapi import problems
from gpufleet.api.params import Cursor
from gpufleet.api.schemas import ConfigPatch
from gpufleet.controller.service import MAX_PAGE
from gpufleet.controller.views import AuditPage, ConfigOut

router = APIRouter(prefix="/v1", tags=["config"])


@router.get("/config", summary="The effective configuration")
def get_config(who: Admin, controller: ControllerDep) -> ConfigOut:
    """The configuration document and its version."""
    return controller.get_config(principal=who)


@router.patch("/config", summary="Change the configuration", responses=problems(409))
def patch_config(body: ConfigPatch, who: Admin, controller: ControllerDep) -> ConfigOut:
    """Merge ``patch`` into the configuration (RFC 7386: ``null`` deletes a key).
    Validated as a whole; it takes effect at the next scheduling cycle and is audited."""
    return controller.patch_config(principal=who, patch=body.patch, version=body.version)


@router.get("/audit", summary="The audit log")
def audit(
    who: Admin,
    controller: ControllerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Cursor = None,
) -> AuditPage:
    """Who changed what, newest first."""
    return controller.list_audit(principal=who, limit=limit, cursor=cursor)
