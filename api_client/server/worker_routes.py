"""``GET /v1/workers``: how many workers are alive (their heartbeat is fresh), and the
``workerLost`` flag of a running job whose worker is gone (docs/recovery.md "Worker liveness").

Workers write their heartbeat into one zset (``KeyLayout.workers``: worker id → until when, by
Redis's clock, it counts); a read compares with Redis's clock too, so hosts whose clocks differ
agree. The lease of a running job (``<record>:lease``) names its holder ``<worker id>/<token>``:
the job's worker is lost when the lease is gone or the holder's heartbeat went stale.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from api_client import AsyncCompactionClient
from api_client.contract.job_enums import JobState
from api_client.contract.lua_scripts import register_async
from api_client.contract.wire import JobRecord
from api_client.server.server_state import authorize, server_state

__all__ = ["JobView", "WorkersAlive", "router", "worker_lost", "workers_alive"]

router = APIRouter(prefix="/v1", tags=["workers"], dependencies=[Depends(authorize)])


class WorkersAlive(BaseModel):
    alive: int = Field(description="workers whose heartbeat is fresh (written every second, "
                                   "counted for three)")


class JobView(JobRecord):
    """The job record as ``GET /v1/jobs/{id}`` shows it."""

    worker_lost: bool | None = Field(
        default=None, description="true while the job is running and the worker holding it "
                                  "is gone (its lease or heartbeat expired); absent otherwise")


async def _read(client: AsyncCompactionClient, worker_id: str = "") -> tuple[int, bool]:
    read = register_async(client.redis, "workers_read")  # EVALSHA, loaded again on NOSCRIPT
    reply: Any = await read(keys=[client.layout.workers], args=[worker_id])
    return int(reply[0]), bool(int(reply[1]))


async def workers_alive(client: AsyncCompactionClient) -> int:
    return (await _read(client))[0]


async def worker_lost(client: AsyncCompactionClient, record: JobRecord) -> bool:
    """Whether a running job's worker is gone: no lease, or its holder's heartbeat is stale (a
    holder without a heartbeat of its own, a prefork child, is judged by its lease alone)."""
    if record.state is not JobState.RUNNING:
        return False
    holder = await client.redis.get(client.layout.job(record.id).lease)
    if holder is None:
        # The job may have ended since ``record`` was read (its worker released the lease as it
        # finished): lost only if it still runs (else a client gives up on a finished job).
        return (await client.jobs.get(record.id)).state is JobState.RUNNING
    worker_id = str(holder.decode() if isinstance(holder, bytes) else holder).rpartition("/")[0]
    return (await _read(client, worker_id))[1]


@router.get("/workers", response_model=WorkersAlive)
async def workers(request: Request) -> WorkersAlive:
    """How many workers are alive: a client that finds none need not wait for a job (the pi
    extension then lets the agent compact by itself)."""
    state = server_state(request)
    return WorkersAlive(alive=await workers_alive(state.client))
