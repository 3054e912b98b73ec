"""Who the caller is: the user and role its token stands for, whatever the role.

``gpufleet queue --me`` asks it, since a token's user need not be the
login name of whoever holds it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from gpufleet.api.auth import authenticate
from gpufleet.api.schemas import Identity
from gpufleet.controller.service import Principal

router = APIRouter(prefix="/v1", tags=["tokens"])


@router.get("/whoami", summary="Who the token stands for")
async def whoami(who: Annotated[Principal, Depends(authenticate)]) -> Identity:
    """The user, role and (for a node token) node of the token the request carries."""
    return Identity(user=who.user, role=who.role, node=who.node)
