"""Instant compaction on the client (README "Instant compaction"): compact from a draft, and
``observe`` — the one call a platform makes after every turn.

Mixed into :class:`CompactionClient` / :class:`AsyncCompactionClient`; the Redis work is the
flows of :mod:`api_client.drafts`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from api_client._calls import Flow
from api_client._decide import should_compact, should_precompute
from api_client._handle import AsyncJobHandle, JobHandle
from api_client.drafts import DraftOutcome, apply_draft, check_draft, refuse, uses_draft
from api_client.errors import BrokerUnavailableError
from api_client.jobs import EnqueueResult, _JobCore, parse_enqueue
from api_client.wire import DRAFT_APPLIED_ROUTE, CompactReason, JobKind

if TYPE_CHECKING:
    from api_client._aclient import AsyncCompactionClient
    from api_client._client import CompactionClient
    from api_client._producer import TaskProducer

# Counted and refused by the loop guard (README "Instant compaction"; manual never is).
GUARDED = (CompactReason.THRESHOLD, CompactReason.OVERFLOW)

__all__ = ["ObserveResult", "from_draft", "from_draft_async", "observe", "observe_async"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ObserveResult:
    """What :meth:`CompactionClient.observe` did. ``action``: ``none`` (below the band, or a
    valid draft is ready), ``precompute`` (a speculative job enqueued or in flight: ``handle``)
    or ``compact`` (``handle``; ``from_draft`` when a draft made it finish at once)."""

    action: str
    handle: JobHandle | AsyncJobHandle | None = None
    from_draft: bool = False
    draft_ready: bool = False


def _notify(producer: TaskProducer, job_id: str) -> None:
    """The session_compact hooks run on a worker; the entry is committed either way."""
    try:
        producer.send(job_id, DRAFT_APPLIED_ROUTE)
    except BrokerUnavailableError as err:
        log.warning("draft applied for job %s; session_compact hooks not notified: %s",
                    job_id, err)


@dataclass(frozen=True, slots=True)
class _Tried:
    finished: str | None = None  # job id of a finished job: the applied draft, or a refusal
    from_draft: bool = False
    cause: str | None = None  # a discarded draft's cause worth reporting
    enqueued: EnqueueResult | None = None  # no draft: the job enqueued in the same script


def _attempt(jobs: _JobCore, session_id: str, request: dict[str, Any],
             broker_db: int | None, started: float) -> Flow[_Tried]:
    """The loop guard, the draft and — when no draft was there — the enqueue, in one round trip
    (automatic reasons only; ``compact_auto.lua``)."""
    reason, instructions = request["reason"], request["instructions"]
    # Checked where it is written: enqueue_call and apply_draft.
    context_window = request.get("context_window")
    if reason not in GUARDED:
        return _Tried()
    # Combined only when the script can index the job itself (the broker is this Redis): else
    # the due index lies in another Cluster slot, and writing it around an apply would cost
    # the draft path two round trips; the caller then enqueues as for a manual compaction.
    job = None if broker_db is None else jobs.enqueue_script(
        session_id, JobKind.COMPACT, reason, instructions, None, broker_db, context_window)
    outcome: DraftOutcome = yield from apply_draft(
        jobs.layout, jobs.settings, session_id, reason,
        use_draft=uses_draft(reason, instructions), context_window=context_window,
        started=started, then=None if job is None else job.script)
    if job is not None and outcome.status == "enqueued" and outcome.enqueue_reply is not None:
        return _Tried(enqueued=parse_enqueue(outcome.enqueue_reply, job.route, pushed=True))
    if outcome.status == "guarded" and outcome.guard_count is not None:
        job_id = yield from refuse(jobs.layout, jobs.settings, session_id, reason,
                                   outcome.guard_count, context_window)
        return _Tried(finished=job_id)
    if not outcome.applied or outcome.job_id is None:
        return _Tried(cause=None if outcome.cause in (None, "nodraft") else outcome.cause)
    return _Tried(finished=outcome.job_id, from_draft=True)


def from_draft(client: CompactionClient, session_id: str, request: dict[str, Any],
               ) -> tuple[JobHandle | None, EnqueueResult | None, str | None]:
    """(finished handle, None, None) when a draft applied or the loop guard refused (then
    ``wait()`` raises :class:`CompactionLoopError`); (None, the enqueued job, None) when there
    was no draft; else (None, None, the discard cause or None): the caller enqueues."""
    tried = client.io.run(_attempt(client.jobs, session_id, request, client._inline_db(),
                                   time.perf_counter()))
    if tried.finished is None:
        return None, tried.enqueued, tried.cause
    if tried.from_draft:
        _notify(client.producer, tried.finished)
    return JobHandle(client, tried.finished, session_id, JobKind.COMPACT,
                     from_draft=tried.from_draft), None, None


def observe(client: CompactionClient, session_id: str, *, context_tokens: int,
            context_window: int) -> ObserveResult:
    """After a turn: compact above the threshold (from a valid draft when there is one),
    precompute a draft inside the band below it (coalesced), else nothing."""
    s = client.settings
    if should_compact(context_tokens, context_window, s):
        handle = client.compact(session_id, reason="threshold", context_window=context_window)
        return ObserveResult("compact", handle, handle.from_draft)
    if not should_precompute(context_tokens, context_window, s):
        return ObserveResult("none")
    if client.io.run(check_draft(client.layout, s, session_id)).status == "valid":
        return ObserveResult("none", draft_ready=True)
    return ObserveResult("precompute", client.compact(session_id, reason="speculative",
                                                      context_window=context_window))


async def from_draft_async(client: AsyncCompactionClient, session_id: str,
                           request: dict[str, Any],
                           ) -> tuple[AsyncJobHandle | None, EnqueueResult | None, str | None]:
    tried = await client.io.run(_attempt(client.jobs, session_id, request, client._inline_db(),
                                         time.perf_counter()))
    if tried.finished is None:
        return None, tried.enqueued, tried.cause
    if tried.from_draft:
        await asyncio.to_thread(_notify, client.producer, tried.finished)
    return AsyncJobHandle(client, tried.finished, session_id, JobKind.COMPACT,
                          from_draft=tried.from_draft), None, None


async def observe_async(client: AsyncCompactionClient, session_id: str, *, context_tokens: int,
                        context_window: int) -> ObserveResult:
    s = client.settings
    if should_compact(context_tokens, context_window, s):
        handle = await client.compact(session_id, reason="threshold",
                                      context_window=context_window)
        return ObserveResult("compact", handle, handle.from_draft)
    if not should_precompute(context_tokens, context_window, s):
        return ObserveResult("none")
    if (await client.io.run(check_draft(client.layout, s, session_id))).status == "valid":
        return ObserveResult("none", draft_ready=True)
    return ObserveResult("precompute", await client.compact(session_id, reason="speculative",
                                                            context_window=context_window))


