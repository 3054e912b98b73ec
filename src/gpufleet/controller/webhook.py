"""The Alertmanager webhook's actions (``controller.alerts`` describes them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from gpufleet.adapters.store import tables as t
from gpufleet.controller import persist
from gpufleet.controller.alerts import (
    Action,
    Alert,
    AlertsConfig,
    IdleGpuConfig,
    Notification,
    Outcome,
    WebhookReply,
)
from gpufleet.controller.errors import Conflict, NotFound
from gpufleet.controller.service import Controller, Principal

NOTICE = "job.idle-notice"
"""The audit action of a notice; the grace time counts from the first one of a run."""
SYSTEM = Principal(user="system", role="admin")


def handle(controller: Controller, *, principal: Principal, body: Notification) -> WebhookReply:
    """Act on every alert of ``body`` (see the module doc) on behalf of ``principal``."""
    stored = controller.get_config(principal=SYSTEM).config
    config = AlertsConfig.model_validate(stored.get("alerts", {}))
    # The actions are an operator's, audited under the webhook token's user.
    actor = Principal(user=principal.user, role="operator")
    out: list[Action] = []
    for alert in body.alerts:
        kind = alert.labels.get("action", "")
        if alert.status != "firing":
            out.append(_none(alert, "resolved"))
        elif kind == "drain":
            out.append(_drain(controller, actor, alert) if config.drain else _none(alert, "off"))
        elif kind == "idle-gpu":
            jobs = [j for j in alert.labels.get("hpc_job", "").split(",") if j]
            out += [_idle(controller, actor, alert, job, config.idle_gpu) for job in jobs]
            if not jobs:
                out.append(_none(alert, "no hpc_job label"))
        else:
            out.append(
                _none(alert, f"no action for action={kind!r}" if kind else "no action label")
            )
    return WebhookReply(actions=out)


def _name(alert: Alert) -> str:
    return alert.labels.get("alertname", "")


def _did(alert: Alert, action: Outcome, target: str, detail: str) -> Action:
    return Action(
        alert=_name(alert), fingerprint=alert.fingerprint, action=action, target=target,
        detail=detail,
    )  # fmt: skip


def _none(alert: Alert, why: str, target: str = "") -> Action:
    return _did(alert, "none", target, why)


def _describe(alert: Alert) -> str:
    """The alert in a line: its name, then its summary or the GPU it names."""
    what = alert.annotations.get("summary") or (
        f"GPU {alert.labels['gpu']}" if "gpu" in alert.labels else ""
    )
    return f"alert {_name(alert)}" + (f": {what}" if what else "")


def _drain(controller: Controller, actor: Principal, alert: Alert) -> Action:
    node = alert.labels.get("Hostname") or alert.labels.get("node", "")
    if not node:
        return _none(alert, "no Hostname or node label")
    try:
        shown = controller.get_node(principal=actor, name=node)
    except NotFound:
        return _none(alert, "no such node", node)
    if shown.state in ("drain", "draining"):
        return _none(alert, f"drained already: {shown.reason}", node)
    reason = _describe(alert)
    controller.drain_node(principal=actor, name=node, reason=reason)
    return _did(alert, "drain", node, reason)


def _idle(
    controller: Controller, actor: Principal, alert: Alert, job_id: str, config: IdleGpuConfig
) -> Action:
    try:
        job = controller.get_job(principal=SYSTEM, job_id=job_id)
    except NotFound:
        return _none(alert, "no such job", job_id)
    if job.state != "RUNNING":
        return _none(alert, f"the job is {job.state}", job_id)
    rule = config.rule(job.partition)
    run = job.restart_count + 1
    now = controller.clock.now()
    noticed = _noticed(controller, job_id, run)
    detail = {"alert": _name(alert), "fingerprint": alert.fingerprint, "run": run}
    if noticed is None:
        then = "" if rule.action == "notify" else f"; {rule.action} in {rule.grace_s} s if still so"
        message = f"{_describe(alert)}: its GPUs are idle{then}"
        _record(controller, actor, job_id, now, NOTICE, detail | {"policy": rule.action}, message)
        return _did(alert, "notify", job_id, message)
    if rule.action == "notify":
        return _none(alert, "notified already; the partition's policy is notify", job_id)
    waited = now - noticed
    if waited < rule.grace_s:
        return _none(
            alert, f"notified {waited:.0f} s ago; {rule.action} after {rule.grace_s} s", job_id
        )
    reason = f"{_describe(alert)}: GPUs idle {waited:.0f} s after notice"
    try:
        if rule.action == "requeue":
            controller.requeue_job(principal=actor, job_id=job_id)
        else:
            controller.cancel_job(principal=actor, job_id=job_id, reason=reason)
    except Conflict as e:  # it ended or is being stopped meanwhile
        return _none(alert, str(e), job_id)
    _record(controller, actor, job_id, now, f"job.{rule.action}", detail | {"reason": reason}, None)
    return _did(alert, rule.action, job_id, reason)


def _noticed(controller: Controller, job_id: str, run: int) -> float | None:
    """When this run of the job was first noticed idle, from the audit log; None if never."""
    with controller.store.read() as conn:
        rows = conn.execute(
            sa.select(t.audit.c.time, t.audit.c.detail)
            .where(t.audit.c.action == NOTICE, t.audit.c.target == job_id)
            .order_by(t.audit.c.id)
        ).all()
    return next((float(r.time) for r in rows if (r.detail or {}).get("run") == run), None)


def _record(
    controller: Controller,
    actor: Principal,
    job_id: str,
    now: float,
    action: str,
    detail: Mapping[str, Any],
    event: str | None,
) -> None:
    """Audit ``action`` on the job and, with ``event``, add it to the job's history."""

    def unit(conn: sa.Connection) -> None:
        persist.audit(conn, time=now, who=actor.user, action=action, target=job_id, detail=detail)
        if event is not None:
            row = conn.execute(
                sa.select(t.jobs.c.id, t.jobs.c.state).where(t.jobs.c.job_id == job_id)
            ).one()
            conn.execute(
                t.job_history.insert().values(job=row.id, time=now, state=row.state, reason=event)
            )

    if controller.writer is None:
        raise Conflict("the controller is not running")
    controller.writer.call(unit)
