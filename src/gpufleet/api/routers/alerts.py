"""Alertmanager's webhook receiver: alerts that act (``controller.alerts`` says how).

Alertmanager sends its token like Prometheus does (``http_config``'s
``authorization`` in its ``webhook_configs``). An ``alerts`` token may post
here and do nothing else; operators and admins may post too. The actions
run as an operator's, audited under the token's user.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from gpufleet.api.auth import ControllerDep, require
from gpufleet.controller.alerts import Notification, WebhookReply
from gpufleet.controller.service import Principal
from gpufleet.controller.webhook import handle

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])

Alertmanager = Annotated[Principal, Depends(require("alerts", "operator", "admin"))]


@router.post("/webhook", summary="Act on Alertmanager's alerts")
async def webhook(body: Notification, who: Alertmanager, controller: ControllerDep) -> WebhookReply:
    """Drain the node of a GPU-fault alert; apply the partition's idle-GPU policy to the job
    of an idle-GPU alert. Answers what was done about each alert."""
    return await run_in_threadpool(handle, controller, principal=who, body=body)
