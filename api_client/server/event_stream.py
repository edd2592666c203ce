"""Job events as Server-Sent Events: one session's stream, or every session's.

Each event is ``id: <stream id>``, ``event: <type>``, ``data: <JobEvent JSON>``. A client that
reconnects with ``Last-Event-ID`` (browsers do it by themselves) gets what came after that
event; without it ``since`` says where to begin (``now``: only new events, the default;
``start``: everything the stream retains; a stream id). ``follow=false`` sends what is there
(by default from the start) and ends.
A following stream is a follower of the process's one reader (api_client.server.fanout): it
holds no Redis connection of its own.
While nothing happens a comment line goes out every ``COMPACTOR_API_SSE_KEEPALIVE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response, StreamingResponse

from api_client import AsyncEventReader, JobEvent, SessionNotFoundError
from api_client.contract.job_records import stream_start
from api_client.server.fanout import Fanout, Follower, TooManyWaiters, waiters_refused
from api_client.server.server_state import ServerState, authorize, server_state

__all__ = ["router", "sse_frame"]

router = APIRouter(prefix="/v1", tags=["events"], dependencies=[Depends(authorize)])

_SSE: dict[int | str, dict[str, Any]] = {200: {
    "description": "text/event-stream: `id` is the stream id, `event` the type, `data` the "
                   "event as JSON (JobEvent)",
    "content": {"text/event-stream": {"schema": {"type": "string"}}}}}
Since = Annotated[str | None, Query(description="start | now | a stream id (Last-Event-ID "
                                               "wins); default now, or start with follow=false")]
Follow = Annotated[bool, Query(description="false: send what is retained, then end")]
LastEventId = Annotated[str | None, Header(alias="Last-Event-ID")]


def sse_frame(event: JobEvent) -> bytes:
    # JobEvent.to_json is one line (json.dumps escapes newlines), as a data: field needs.
    return (f"id: {event.stream_id}\nevent: {event.type.value}\n"
            f"data: {event.to_json()}\n\n").encode()


async def _frames(reader: AsyncEventReader, keepalive_s: float) -> AsyncIterator[bytes]:
    """The reader's events as frames, a keepalive comment after each quiet ``keepalive_s``.
    The pending read survives a keepalive (it is only cancelled when the client goes)."""
    pending: asyncio.Task[JobEvent] | None = None
    try:
        yield b": connected\n\n"  # headers and a first byte out at once
        while True:
            if pending is None:
                pending = asyncio.ensure_future(reader.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=keepalive_s)
            if not done:
                yield b": keepalive\n\n"
                continue
            task, pending = pending, None
            try:
                event = task.result()
            except StopAsyncIteration:
                return
            yield sse_frame(event)
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
        with contextlib.suppress(Exception):
            await reader.aclose()


async def _follow(fanout: Fanout, follower: Follower,
                  keepalive_s: float) -> AsyncIterator[bytes]:
    """The follower's events as frames, a keepalive comment after each quiet
    ``keepalive_s``."""
    try:
        yield b": connected\n\n"  # headers and a first byte out at once
        while True:
            try:
                event = await asyncio.wait_for(follower.queue.get(), keepalive_s)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            yield sse_frame(event)
    finally:
        fanout.unfollow(follower)


async def _stream(state: ServerState, session_id: str | None, since: str | None, follow: bool,
                  last_event_id: str | None) -> Response:
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    for position in (since, last_event_id):  # both checked, though Last-Event-ID wins
        if position is not None:
            stream_start(position, None)  # InvalidRequestError: 400
    if follow:
        layout = state.client.layout
        key = layout.session(session_id).events if session_id else layout.global_events
        try:
            follower = await state.fanout.follow(key, last_event_id or since)
        except TooManyWaiters as err:
            return waiters_refused(err)
        return StreamingResponse(_follow(state.fanout, follower,
                                         state.settings.api_sse_keepalive_s),
                                 media_type="text/event-stream", headers=headers)
    reader = state.client.events(session_id, since=last_event_id or since, follow=follow,
                                 block_ms=int(state.settings.api_sse_keepalive_s * 1000))
    return StreamingResponse(_frames(reader, state.settings.api_sse_keepalive_s),
                             media_type="text/event-stream", headers=headers)


@router.get("/sessions/{session_id}/events", response_class=StreamingResponse, responses=_SSE)
async def session_events(session_id: str, request: Request, since: Since = None,
                         follow: Follow = True,
                         last_event_id: LastEventId = None) -> Response:
    """404 for a session that does not exist (never created, or deleted)."""
    state = server_state(request)
    if not await state.client.sessions.exists(session_id):
        raise SessionNotFoundError(f"Session {session_id} not found")
    return await _stream(state, session_id, since, follow, last_event_id)


@router.get("/events", response_class=StreamingResponse, responses=_SSE)
async def all_events(request: Request, since: Since = None, follow: Follow = True,
                     last_event_id: LastEventId = None) -> Response:
    state = server_state(request)
    return await _stream(state, None, since, follow, last_event_id)
