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
from typing import TYPE_CHECKING, TypeAlias

from api_client._calls import Flow
from api_client._decide import should_compact, should_precompute
from api_client._handle import AsyncJobHandle, JobHandle
from api_client.drafts import DraftOutcome, apply_draft, check_draft, refuse, uses_draft
from api_client.errors import BrokerUnavailableError
from api_client.jobs import check_context_window
from api_client.wire import DRAFT_APPLIED_ROUTE, CompactReason, JobKind

if TYPE_CHECKING:
    from api_client._client import AsyncCompactionClient, CompactionClient, TaskProducer

    _Client: TypeAlias = CompactionClient | AsyncCompactionClient

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


def _attempt(client: _Client, session_id: str, reason: CompactReason | str,
             instructions: str | None, context_window: int | None,
             started: float) -> Flow[tuple[str | None, bool, str | None]]:
    """The loop guard and the draft in one round trip (automatic reasons only): (job id of a
    finished job — the applied draft, or the refusal's failed record —, from a draft, discard
    cause worth reporting)."""
    check_context_window(context_window)
    if reason not in GUARDED:
        return None, False, None
    outcome: DraftOutcome = yield from apply_draft(
        client.layout, client.settings, session_id, reason,
        use_draft=uses_draft(reason, instructions), context_window=context_window,
        started=started)
    if outcome.status == "guarded" and outcome.guard_count is not None:
        job_id = yield from refuse(client.layout, client.settings, session_id, reason,
                                   outcome.guard_count, context_window)
        return job_id, False, None
    if not outcome.applied or outcome.job_id is None:
        return None, False, None if outcome.cause in (None, "nodraft") else outcome.cause
    return outcome.job_id, True, None


def from_draft(client: CompactionClient, session_id: str, reason: CompactReason | str,
               instructions: str | None, context_window: int | None = None,
               ) -> tuple[JobHandle | None, str | None]:
    """(finished handle, None) when a draft applied or the loop guard refused (then ``wait()``
    raises :class:`CompactionLoopError`), else (None, discard cause or None)."""
    job_id, applied, cause = client.io.run(_attempt(
        client, session_id, reason, instructions, context_window, time.perf_counter()))
    if job_id is None:
        return None, cause
    if applied:
        _notify(client.producer, job_id)
    return JobHandle(client, job_id, session_id, JobKind.COMPACT, from_draft=applied), None


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
                           reason: CompactReason | str, instructions: str | None,
                           context_window: int | None = None,
                           ) -> tuple[AsyncJobHandle | None, str | None]:
    job_id, applied, cause = await client.io.run(_attempt(
        client, session_id, reason, instructions, context_window, time.perf_counter()))
    if job_id is None:
        return None, cause
    if applied:
        await asyncio.to_thread(_notify, client.producer, job_id)
    return AsyncJobHandle(client, job_id, session_id, JobKind.COMPACT, from_draft=applied), None


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


