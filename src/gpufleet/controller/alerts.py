"""Alerts that act: the ``[alerts]`` configuration and Alertmanager's webhook body.

``controller.webhook`` does what is described here.

Alertmanager posts each notification (a group of alerts) to the webhook
receiver, ``POST /api/v1/alerts/webhook``. Firing alerts carrying an
``action`` label (deploy/prometheus/gpufleet-rules.yml sets it) are acted on;
resolved ones and those without the label only get an answer.

* ``action="drain"`` (a GPU fault: a hardware XID, uncorrectable ECC, a
  failed or pending row remap, a GPU far too hot): the node in ``Hostname``
  (or ``node``) is drained, with the alert and the GPU as the reason. The
  controller places work on whole nodes' GPUs, so the node is what is
  drained; the GPU is named for the operator. A node drained already is
  left as it is.
* ``action="idle-gpu"``: the job in ``hpc_job`` (each, when several share a
  GPU) gets the policy of its partition (``[alerts.idle_gpu]`` in the
  configuration). Its owner is told first, by an event in the job's
  history (``gpufleet show``), once per run; with ``requeue`` or ``cancel``,
  an alert still firing ``grace_s`` after that notice requeues or cancels
  the job. The default is to notify only. Alertmanager repeats a firing
  alert every ``repeat_interval``, which paces the steps.

Every action is audited under the webhook token's user: ``node.drain`` (as
an operator's drain), ``job.idle-notice``, ``job.requeue``,
``job.cancel``. The notice's audit entry is also what the grace time counts
from, so it survives a restart of the controller.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

IdleAction = Literal["notify", "requeue", "cancel"]
Outcome = Literal["drain", "notify", "requeue", "cancel", "none"]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IdleRule(_Strict):
    """What an idle-GPU alert does to a job of a partition."""

    action: IdleAction = Field(
        "notify", description="notify the owner only, or then requeue or cancel the job"
    )
    grace_s: int = Field(
        3600, ge=0, le=30 * 86400, description="from the notice to the requeue or cancel"
    )


class IdleGpuConfig(IdleRule):
    """``[alerts.idle_gpu]``: the rule for every partition, and ``partitions`` overriding it
    for some (``[alerts.idle_gpu.partitions.NAME]``)."""

    partitions: dict[str, IdleRule] = Field(default_factory=dict)

    def rule(self, partition: str) -> IdleRule:
        return self.partitions.get(partition, self)


class AlertsConfig(_Strict):
    """The ``[alerts]`` table: what the Alertmanager webhook does."""

    drain: bool = Field(True, description="drain the node named in a GPU-fault alert")
    idle_gpu: IdleGpuConfig = Field(default_factory=IdleGpuConfig)


def problems(config: AlertsConfig, partitions: set[str]) -> list[str]:
    """The configuration's problems: rules for partitions that do not exist."""
    return [
        f"alerts.idle_gpu.partitions.{name}: no such partition"
        for name in config.idle_gpu.partitions
        if name not in partitions
    ]


class Alert(BaseModel):
    """One alert of a notification, as Alertmanager's webhook (version 4) sends it."""

    model_config = ConfigDict(extra="ignore")  # Alertmanager may add fields

    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(default_factory=dict, max_length=256)
    annotations: dict[str, str] = Field(default_factory=dict, max_length=256)
    fingerprint: str = Field("", max_length=128)


class Notification(BaseModel):
    """A notification: Alertmanager's webhook body (only the fields used are checked)."""

    model_config = ConfigDict(extra="ignore")

    version: str = Field("4", max_length=16)
    status: Literal["firing", "resolved"]
    receiver: str = Field("", max_length=256)
    alerts: list[Alert] = Field(default_factory=list, max_length=10_000)


class Action(BaseModel):
    """What the controller did about one alert: ``none`` with the reason in ``detail``."""

    alert: str
    fingerprint: str
    action: Outcome
    target: str = ""
    detail: str = ""


class WebhookReply(BaseModel):
    actions: list[Action]
