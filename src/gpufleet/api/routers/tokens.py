"""API tokens (admin): create one (its secret is shown once), list, revoke."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gpufleet.api.auth import Admin, ControllerDep
from gpufleet.api.openapi import problems
from gpufleet.api.params import NamePath
from gpufleet.api.schemas import TokenCreate
from gpufleet.controller.views import TokenCreated, TokenOut

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post("", status_code=201, summary="Create a token")
def create(body: TokenCreate, who: Admin, controller: ControllerDep) -> TokenCreated:
    """A new token for ``user`` with ``role``; the response holds the secret, once."""
    return controller.create_token(
        principal=who, name=body.name, user=body.user, role=body.role, node=body.node
    )


@router.get("", summary="List tokens")
def list_tokens(who: Admin, controller: ControllerDep) -> list[TokenOut]:
    """Every token, revoked ones included, without secrets."""
    return controller.list_tokens(principal=who)


@router.delete(
    "/{token_id}",
    status_code=204,
    response_class=Response,
    summary="Revoke a token",
    responses=problems(404),
)
def revoke(
    token_id: NamePath,
    who: Admin,
    controller: ControllerDep,
) -> None:
    """Revoke a token at once; revoking it again changes nothing."""
    controller.revoke_token(principal=who, token_id=token_id)
