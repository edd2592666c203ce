"""oh-my-pi's remote compaction endpoint, two ways: ``POST /v1/summarize`` (``{systemPrompt,
prompt, maxTokens?}`` → ``{summary}``) and ``POST /v1/chat/completions`` (non-streaming, for a
``remoteEndpoint`` that ends in ``/chat/completions``), both with a bearer token; and
``POST /v1/summarize/<secret>``, the first without a header: oh-my-pi sends none to it, so the
secret in its path is its credential (:mod:`api_client.server.summarize_url`, docs/oh-my-pi.md).

Each request is a summarize job (:meth:`AsyncCompactionClient.summarize`): a worker runs it
through the model router (retries, fallback, cooldowns, deadline, metrics; Flower shows it) and
the request waits for it. A caller that hangs up cancels its job; one that outwaits
``COMPACTOR_API_SUMMARIZE_TIMEOUT_S`` gets 504 and the job is cancelled too.

No worker alive (their heartbeats, the read ``GET /v1/workers`` makes): the request is answered
424 ``no_worker`` at once and no job is made; while it waits, the count is read every
``_LIVENESS_S``, and when it is 0 and the job is still queued or its worker is lost, the job is
cancelled (no worker that starts later runs it) and the answer is the same 424. The caller, an
agent, then compacts by itself at once rather than at its timeout (docs/oh-my-pi.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response

from api_client import (
    AsyncJobHandle,
    CompactorError,
    InvalidRequestError,
    JobFailedError,
    JobTimeoutError,
    NoWorkerError,
)
from api_client.contract.job_enums import JobState
from api_client.contract.reservations import refusal
from api_client.server.problems import MEDIA_TYPE
from api_client.server.schemas import (
    ChatChoice,
    ChatChoiceMessage,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ChatUsage,
    SummarizeRequest,
    Summary,
)
from api_client.server.server_state import ServerState, authorize, server_state
from api_client.server.worker_routes import worker_lost, workers_alive

__all__ = ["chat_prompts", "router"]

router = APIRouter(prefix="/v1", tags=["summaries"])
# The bearer routes; the summarize URL's check is BearerAuth's too (its tenant from the path).
_BEARER = [Depends(authorize)]
# 424, not 503 (docs/oh-my-pi.md "What falls back, and when"): the caller is an agent that can
# summarize by itself, and oh-my-pi retries a 5xx 10 times (~512 s) before it does.
_NO_WORKER_DOC: dict[int | str, dict[str, Any]] = {424: {
    "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/ProblemBody"}}},
    "description": "no_worker: no worker is alive to make the summary, answered at once (no "
                   "job is made), or the job's worker was lost while the request waited and "
                   "none is left (the job is cancelled, jobId names it); summarize by "
                   "yourself, or ask GET /v1/workers when to try again"}}

_HANG_UP_POLL_S = 0.5  # how soon a caller's hang-up cancels its job
_LIVENESS_S = 1.0  # how soon a waiting caller learns that no worker is left for its job
_CLOSED = 499  # nginx's "client closed request": logged, never read by anyone


class CallerGone(Exception):
    pass


async def _result(request: Request, state: ServerState, handle: AsyncJobHandle) -> Any:
    """The job's result, cancelling the job when the caller hangs up, the time runs out or no
    worker is left to run it."""
    waiting = asyncio.ensure_future(handle.wait(timeout=state.settings.api_summarize_timeout_s))
    checked = time.monotonic()
    try:
        while not (await asyncio.wait({waiting}, timeout=_HANG_UP_POLL_S))[0]:
            if await request.is_disconnected():
                raise CallerGone()
            if time.monotonic() - checked >= _LIVENESS_S:
                checked = time.monotonic()
                if await _orphaned(state, handle):
                    raise NoWorkerError(_NO_WORKER + f"; its job {handle.id} is cancelled",
                                        job_id=handle.id)
        return waiting.result()
    except (CallerGone, JobTimeoutError, NoWorkerError):
        with contextlib.suppress(CompactorError):
            await handle.cancel()
        raise
    finally:
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(BaseException):
                await waiting


_NO_WORKER = ("no Compactor worker is alive to make the summary (no fresh heartbeat: GET "
              "/v1/workers); the caller does better to summarize by itself than to wait")


async def _orphaned(state: ServerState, handle: AsyncJobHandle) -> bool:
    """No worker is alive and the job is still queued, or its worker is lost: nothing will run
    it. One read (the heartbeats') while a worker is alive."""
    if await workers_alive(state.client) > 0:
        return False
    record = await handle.record()
    return record.state is JobState.QUEUED or await worker_lost(state.client, record)


async def _summarize(request: Request, state: ServerState, system_prompt: str, prompt: str,
                     max_tokens: int | None) -> tuple[AsyncJobHandle, dict[str, Any]]:
    if await workers_alive(state.client) == 0:
        raise NoWorkerError(_NO_WORKER + "; no job was made")
    handle = await state.client.summarize(system_prompt, prompt, max_tokens=max_tokens)
    try:
        result = await _result(request, state, handle)
    except JobFailedError as err:
        # Refused by its worker for the tenant's model budget or a prompt over the model's
        # window: answered as admission does (429 quota_exceeded with resetsAt, 413
        # prompt_too_large), not as a failed model (docs/security.md).
        refused = refusal((await handle.record()).result)
        if refused is None:
            raise
        raise refused from err
    assert isinstance(result, dict) and isinstance(result.get("summary"), str)
    return handle, result


@router.post("/summarize", response_model=Summary, response_model_exclude_none=True,
             dependencies=_BEARER, responses=_NO_WORKER_DOC)
async def summarize(body: SummarizeRequest, request: Request) -> Summary | Response:
    """The summary of ``prompt`` under ``systemPrompt`` by the workers' models."""
    state = server_state(request)
    return await _summary(body, request, state)


_SECRET = Path(description="the secret of a summarize URL (`compactor summarize-url`): the "
                           "credential of this route, which takes no Authorization header")


@router.post("/summarize/{url_secret}", response_model=Summary,
             response_model_exclude_none=True, responses=_NO_WORKER_DOC)
async def summarize_by_url(body: SummarizeRequest, request: Request,
                           url_secret: Annotated[str, _SECRET]) -> Summary | Response:
    """``/v1/summarize`` for a caller that sends no header (oh-my-pi): the tenant is the one
    whose token the secret was derived from; a wrong secret is 401."""
    state = server_state(request)
    del url_secret  # checked by BearerAuth before the body was read
    return await _summary(body, request, state)


async def _summary(body: SummarizeRequest, request: Request, state: ServerState
                   ) -> Summary | Response:
    try:
        _, result = await _summarize(request, state, body.system_prompt, body.prompt,
                                     body.max_tokens)
    except CallerGone:
        return Response(status_code=_CLOSED)
    return Summary(summary=result["summary"])


def _text(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, list):  # content parts: their text
        return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return content or ""


def chat_prompts(messages: list[ChatMessage]) -> tuple[str, str]:
    """(system prompt, prompt): system (and developer) messages, then the others' text; when
    there are several of those, each line-led by its role."""
    system = "\n\n".join(_text(m) for m in messages if m.role in ("system", "developer"))
    rest = [m for m in messages if m.role not in ("system", "developer")]
    if not rest:
        raise InvalidRequestError("messages: no user message to summarize")
    if len(rest) == 1:
        return system, _text(rest[0])
    return system, "\n\n".join(f"{m.role}: {_text(m)}" for m in rest)


@router.post("/chat/completions", response_model=ChatCompletion, dependencies=_BEARER,
             responses=_NO_WORKER_DOC)
async def chat_completions(body: ChatCompletionRequest,
                           request: Request) -> ChatCompletion | Response:
    """A chat completion whose answer is the summary (non-streaming only)."""
    state = server_state(request)
    if body.stream:
        raise InvalidRequestError("stream: true is not supported: this endpoint answers once")
    system, prompt = chat_prompts(body.messages)
    try:
        handle, result = await _summarize(request, state, system, prompt,
                                          body.max_completion_tokens or body.max_tokens)
    except CallerGone:
        return Response(status_code=_CLOSED)
    usage = (await handle.record()).usage
    tokens = ChatUsage() if usage is None else ChatUsage(
        prompt_tokens=usage.input + usage.cache_read + usage.cache_write,
        completion_tokens=usage.output,
        total_tokens=usage.input + usage.cache_read + usage.cache_write + usage.output)
    models = result.get("models") or [body.model or "compactor"]
    return ChatCompletion(
        id=f"chatcmpl-{handle.id.rpartition(':')[2]}", created=int(time.time()),
        model=str(models[0]), usage=tokens,
        choices=[ChatChoice(message=ChatChoiceMessage(content=result["summary"]))])
