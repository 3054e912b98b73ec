"""Jobs: submit, list, show, read output, cancel, hold, release, requeue.

A user acts on its own jobs only: the service answers 404 for another
user's job, so a job id tells nothing about who owns it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response

from gpufleet.api.auth import ControllerDep, User
from gpufleet.api.openapi import problems
from gpufleet.api.params import Cursor, NameQuery, OptionalReason
from gpufleet.api.schemas import JobOut, JobPage, JobStateName, JobSubmit, Submitted
from gpufleet.controller.service import MAX_PAGE
from gpufleet.controller.views import OutputChunk

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobId = Annotated[
    str,
    Path(
        pattern=r"^[0-9]{1,18}(_[0-9]{1,9})?$",
        description="a job id, an array job id, or an array task as ARRAYID_INDEX",
        examples=["42", "42_3"],
    ),
]


@router.post(
    "",
    status_code=201,
    summary="Submit a job",
    responses={200: {"model": Submitted, "description": "a retry of an earlier request_id"}},
)
async def submit(
    spec: JobSubmit, response: Response, who: User, controller: ControllerDep
) -> Submitted:
    """Queue a job or an array job; 201 with its id, or 200 with the first job's id when
    ``request_id`` repeats an earlier submission of this user."""
    # In the event loop: the service checks in memory and awaits the commit.
    submitted = await controller.submit_async(principal=who, spec=spec)
    if submitted.duplicate:
        response.status_code = 200
    return submitted


@router.get("", summary="List jobs")
def list_jobs(
    who: User,
    controller: ControllerDep,
    user: NameQuery = None,
    state: Annotated[list[JobStateName], Query(max_length=10)] = [],  # noqa: B006
    partition: NameQuery = None,
    account: NameQuery = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Cursor = None,
) -> JobPage:
    """Jobs matching every filter, newest first (a user sees its own jobs only).
    ``state`` may repeat; pass ``next_cursor`` back as ``cursor`` for the next page."""
    return controller.list_jobs(
        principal=who,
        user=user,
        states=state,
        partition=partition,
        account=account,
        limit=limit,
        cursor=cursor,
    )


@router.get("/{job_id}", summary="Show a job", responses=problems(404))
def get_job(job_id: JobId, who: User, controller: ControllerDep) -> JobOut:
    """One job with its history."""
    return controller.get_job(principal=who, job_id=job_id)


@router.get("/{job_id}/output", summary="Read a job's output", responses=problems(404))
def read_output(
    job_id: JobId,
    who: User,
    controller: ControllerDep,
    stream: Literal["stdout", "stderr"] = "stdout",
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=16 << 20)] = None,
) -> OutputChunk:
    """A slice of the job's stdout or stderr from ``offset``; ask again from
    ``next_offset`` to follow it."""
    return controller.read_output(
        principal=who, job_id=job_id, stream=stream, offset=offset, limit=limit
    )


@router.post("/{job_id}/cancel", summary="Cancel a job", responses=problems(404, 409))
def cancel(
    job_id: JobId,
    who: User,
    controller: ControllerDep,
    body: OptionalReason = None,
) -> JobOut:
    """Cancel a pending job, or kill a running one; an array job id cancels every task."""
    reason = body.reason if body is not None else ""
    return controller.cancel_job(principal=who, job_id=job_id, reason=reason)


@router.post("/{job_id}/hold", summary="Hold a pending job", responses=problems(404, 409))
def hold(job_id: JobId, who: User, controller: ControllerDep) -> JobOut:
    """Keep a pending job from starting until it is released."""
    return controller.hold_job(principal=who, job_id=job_id)


@router.post("/{job_id}/release", summary="Release a held job", responses=problems(404, 409))
def release(job_id: JobId, who: User, controller: ControllerDep) -> JobOut:
    """Let a held job be scheduled again."""
    return controller.release_job(principal=who, job_id=job_id)


@router.post("/{job_id}/requeue", summary="Requeue a job", responses=problems(404, 409))
def requeue(job_id: JobId, who: User, controller: ControllerDep) -> JobOut:
    """Stop a running job (or take a finished one) and queue it again."""
    return controller.requeue_job(principal=who, job_id=job_id)
