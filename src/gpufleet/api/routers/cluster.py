"""The policy the cluster runs: partitions, QoS, accounts, reservations and fairshare."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpufleet.api.auth import ControllerDep, User
from gpufleet.controller.views import (
    AccountOut,
    FairshareRow,
    PartitionOut,
    PredictionReport,
    QosOut,
    ReservationOut,
)

router = APIRouter(prefix="/v1", tags=["cluster"])


@router.get("/partitions", summary="List partitions")
def partitions(who: User, controller: ControllerDep) -> list[PartitionOut]:
    """Every partition with its nodes, limits and queue counts."""
    return controller.list_partitions(principal=who)


@router.get("/qos", summary="List QoS")
def qos(who: User, controller: ControllerDep) -> list[QosOut]:
    """Every quality of service with its priority, preemption and limits."""
    return controller.list_qos(principal=who)


@router.get("/accounts", summary="The account tree")
def accounts(who: User, controller: ControllerDep) -> list[AccountOut]:
    """Accounts and users with their shares, parents before children."""
    return controller.list_accounts(principal=who)


@router.get("/reservations", summary="List reservations")
def reservations(who: User, controller: ControllerDep) -> list[ReservationOut]:
    """Every reservation, by start time."""
    return controller.list_reservations(principal=who)


@router.get("/fairshare", summary="Fairshare of every association")
def fairshare(who: User, controller: ControllerDep) -> list[FairshareRow]:
    """Shares, decayed usage and fairshare factor, in tree order."""
    return controller.fairshare(principal=who)


@router.get("/predict/report", summary="The runtime predictor's error over time")
def predict_report(
    who: User,
    controller: ControllerDep,
    buckets: Annotated[int, Query(description="slices of the jobs by submit time")] = 10,
) -> PredictionReport:
    """Each finished job's estimate at its first start against its runtime, and the time
    limit's, overall and per bucket of submit time (operators)."""
    return controller.prediction_report(principal=who, buckets=buckets)
