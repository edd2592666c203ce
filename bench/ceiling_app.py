"""The ceiling of bench_http's load runs: FastAPI serving one Redis call per request, the least
an HTTP front of Redis can do (a path parameter, a JSON body parsed by pydantic, one asyncio
Redis round trip, a JSON answer). Same routes as ``compactor serve``'s compact and append.

    CEILING_REDIS_URL=redis://... uvicorn bench.ceiling_app:app --port P [--workers N]
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

app = FastAPI()
_redis = redis.asyncio.Redis.from_url(os.environ.get("CEILING_REDIS_URL", "redis://127.0.0.1"),
                                      decode_responses=True)


class Compact(BaseModel):
    reason: str = "manual"


class Append(BaseModel):
    entries: list[dict[str, Any]]


@app.post("/v1/sessions/{session_id}/compact")
async def compact(session_id: str, body: Compact) -> JSONResponse:
    job = await _redis.incr(f"ceiling:{session_id}")
    return JSONResponse({"jobId": f"{session_id}-{job}", "coalesced": False}, status_code=202)


@app.post("/v1/sessions/{session_id}/entries")
async def append(session_id: str, body: Append) -> JSONResponse:
    revision = await _redis.incr(f"ceiling:{session_id}:rev")
    return JSONResponse({"entryIds": [str(revision)], "revision": revision})
