"""Sessions over HTTP: create, read, pi v3 JSONL out and in, delete, the context, appends."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from api_client import SessionNotFoundError
from api_client.contract.errors import ReadTooLargeError
from api_client.server.schemas import (
    Appended,
    AppendEntries,
    ContextView,
    CreateSession,
    LeafMoved,
    SessionCreated,
    SessionView,
    SetLeaf,
)
from api_client.server.server_state import ServerState, authorize, server_state

__all__ = ["JSONL_MEDIA_TYPE", "router"]

JSONL_MEDIA_TYPE = "application/x-ndjson"
router = APIRouter(prefix="/v1/sessions", tags=["sessions"], dependencies=[Depends(authorize)])

_JSONL_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {
    JSONL_MEDIA_TYPE: {"schema": {"type": "string"}}}}}


@router.post("/{session_id}/entries", response_model=Appended)
async def append_entries(session_id: str, body: AppendEntries,
                         request: Request) -> JSONResponse:
    """``revision`` is the one this append made (the append's own reply)."""
    state = server_state(request)
    ids, revision = await state.client.sessions.append_with_revision(session_id, body.entries)
    # An Appended body, written without the model: FastAPI would validate it again.
    return JSONResponse({"entryIds": ids, "revision": revision})


@router.post("", status_code=201, response_model=SessionCreated)
async def create_session(request: Request, response: Response,
                         body: CreateSession | None = None) -> SessionCreated:
    """Without a body (or with {}): a new session named by a new UUID."""
    state = server_state(request)
    body = body or CreateSession()
    sid = await state.client.sessions.create(body.session_id, cwd=body.cwd, title=body.title)
    response.headers["Location"] = f"/v1/sessions/{sid}"
    return SessionCreated(session_id=sid)


async def _bounded(state: ServerState, session_id: str) -> None:
    """A session this route would build as one JSON document over ``api_max_read_bytes`` is
    413 before it is read (its JSONL export streams any size: docs/security.md)."""
    limit = state.settings.api_max_read_bytes
    size = await state.client.sessions.stored_size(session_id)
    if size > limit:
        raise ReadTooLargeError(f"session {session_id}", setting="api_max_read_bytes",
                                limit=limit, value=size)


@router.get("/{session_id}", response_model=SessionView)
async def get_session(session_id: str, request: Request) -> SessionView:
    state = server_state(request)
    await _bounded(state, session_id)
    snapshot = await state.client.sessions.load(session_id)
    return SessionView(session_id=session_id, revision=snapshot.revision,
                       leaf_id=snapshot.leaf_id,
                       entries=[entry.raw for entry in snapshot.session.entries])


@router.get("/{session_id}/jsonl", response_class=PlainTextResponse,
            responses={200: {"content": {JSONL_MEDIA_TYPE: {"schema": {"type": "string"}}},
                             "description": "the session as pi v3 JSONL, as stored"}})
async def export_session(session_id: str, request: Request) -> Response:
    """Streamed in pieces as they are read (the server holds one at a time); a session replaced
    while it is sent is cut short (the body ends without its last chunk)."""
    state = server_state(request)
    pieces = await state.client.sessions.export_stream(session_id)  # 404 before any header
    return StreamingResponse(pieces, media_type=JSONL_MEDIA_TYPE)


@router.put("/{session_id}/jsonl", status_code=201, response_model=SessionCreated,
            openapi_extra=_JSONL_BODY,
            responses={200: {"model": SessionCreated, "description": "replaced (replace=true)"}})
async def import_session(session_id: str, request: Request,
                         replace: Annotated[bool, Query(description="replace an existing "
                                                        "session (else 409)")] = False
                         ) -> JSONResponse:
    """Store a pi session file (v1 and v2 are migrated) under ``session_id``; a file with a
    line it cannot use is refused whole (422, naming the line), storing nothing."""
    state = server_state(request)
    text = (await request.body()).decode("utf-8", "replace")
    existed = replace and await state.client.sessions.exists(session_id)
    sid = await state.client.sessions.import_jsonl(text, session_id, replace=replace,
                                                   source=f"PUT {session_id}")
    return JSONResponse(SessionCreated(session_id=sid).model_dump(by_alias=True),
                        status_code=200 if existed else 201)


@router.delete("/{session_id}", status_code=204, response_class=Response,
               responses={404: {"description": "no such session"}})
async def delete_session(session_id: str, request: Request) -> Response:
    state = server_state(request)
    if not await state.client.sessions.delete(session_id):
        raise SessionNotFoundError(f"Session {session_id} not found")
    return Response(status_code=204)


@router.get("/{session_id}/context", response_model=ContextView)
async def get_context(session_id: str, request: Request) -> ContextView:
    state = server_state(request)
    await _bounded(state, session_id)
    context = await state.client.context(session_id)
    return ContextView(session_id=session_id, revision=context.revision,
                       leaf_id=context.leaf_id, messages=context.messages)


@router.put("/{session_id}/leaf", response_model=LeafMoved)
async def set_leaf(session_id: str, body: SetLeaf, request: Request) -> LeafMoved:
    """Move the leaf (pi's tree navigation): a mirror appends each entry under its own parent,
    which is not the leaf after a navigation or after Compactor appended an entry itself."""
    state = server_state(request)
    revision = await state.client.sessions.navigate(session_id, body.leaf_id)
    return LeafMoved(leaf_id=body.leaf_id, revision=revision)
