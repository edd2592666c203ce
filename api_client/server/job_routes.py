"""Jobs over HTTP: compact, prune, branch summary (202 with the job's id, or 200 with the entry
when a draft applied on the spot), the record with a long poll, cancel."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from api_client import AsyncJobHandle
from api_client.server.fanout import TooManyWaiters, waiters_refused
from api_client.server.schemas import (
    BranchSummaryRequest,
    CancelResult,
    CompactRequest,
    JobAccepted,
    JobApplied,
)
from api_client.server.server_state import authorize, server_state
from api_client.server.worker_routes import JobView, worker_lost

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["jobs"], dependencies=[Depends(authorize)])

_ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {"model": JobAccepted, "description": "queued (or coalesced into an equal job): "
                                               "GET /v1/jobs/{jobId} tells how it ends"}}


def accepted(handle: AsyncJobHandle) -> JSONResponse:
    """202 with a :class:`JobAccepted` body (the document's; written here without the model)."""
    return JSONResponse({"jobId": handle.id, "coalesced": handle.coalesced}, status_code=202,
                        headers={"Location": f"/v1/jobs/{handle.id}"})


@router.post("/sessions/{session_id}/compact", status_code=202,
             responses={**_ACCEPTED, 200: {"model": JobApplied,
                                           "description": "a draft applied: the entry is in"}})
async def compact(session_id: str, body: CompactRequest, request: Request) -> JSONResponse:
    """Threshold and overflow compactions without instructions apply a valid speculative draft
    at once (200); otherwise the job is queued (202)."""
    state = server_state(request)
    handle = await state.client.compact(session_id, body.reason, body.instructions,
                                        context_window=body.context_window, agent=body.agent)
    if not handle.from_draft:
        return accepted(handle)
    entry = await handle.wait(timeout=1.0)  # finished already: the record holds the entry
    assert isinstance(entry, dict)
    applied = JobApplied(job_id=handle.id, entry=entry)
    return JSONResponse(applied.model_dump(by_alias=True), status_code=200)


@router.post("/sessions/{session_id}/prune", status_code=202, responses=_ACCEPTED)
async def prune(session_id: str, request: Request) -> JSONResponse:
    state = server_state(request)
    return accepted(await state.client.prune(session_id))


@router.post("/sessions/{session_id}/branch-summary", status_code=202, responses=_ACCEPTED)
async def branch_summary(session_id: str, body: BranchSummaryRequest,
                         request: Request) -> JSONResponse:
    state = server_state(request)
    return accepted(await state.client.branch_summary(session_id, body.target_id,
                                                      body.instructions, agent=body.agent))


@router.get("/jobs/{job_id}", response_model=JobView, response_model_exclude_none=True)
async def get_job(job_id: str, request: Request,
                  wait: Annotated[float, Query(ge=0, description="hold the request until the "
                                               "job ends, at most this many seconds (capped by "
                                               "COMPACTOR_API_MAX_WAIT_S)")] = 0) -> JSONResponse:
    """The job record (state, kind, reason, times, attempts, model, usage; the entry or result
    once it succeeded, the error once it failed)."""
    state = server_state(request)
    jobs = state.client.jobs  # one read of the record (JobNotFoundError: 404)
    if wait <= 0:
        record = await jobs.get(job_id)
    else:  # the process's one reader wakes it (api_client.server.fanout)
        try:
            async with state.fanout.job_end(job_id) as ended:
                record = await jobs.get(job_id)
                if not record.state.terminal:
                    await asyncio.wait({ended}, timeout=min(wait, state.settings.api_max_wait_s))
                    record = await jobs.get(job_id)
        except TooManyWaiters as err:
            return waiters_refused(err)
    body = record.to_wire()
    if await worker_lost(state.client, record):
        body["workerLost"] = True
    return JSONResponse(body)


@router.post("/jobs/{job_id}/cancel", response_model=CancelResult)
async def cancel_job(job_id: str, request: Request) -> CancelResult:
    state = server_state(request)
    handle = await state.client.job(job_id)
    after = await handle.cancel()
    return CancelResult(job_id=job_id, state=after)
