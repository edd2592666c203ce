"""Instant compaction on the client (README "Instant compaction"): compact from a draft, and
``observe`` — the one call a platform makes after every turn.

Mixed into :class:`CompactionClient` / :class:`AsyncCompactionClient`; the Redis work is the
flows of :mod:`api_client.drafts`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from api_client._decide import should_compact, should_precompute
from api_client._handle import AsyncJobHandle, JobHandle
from api_client.drafts import DraftOutcome, apply_draft, check_draft, uses_draft
from api_client.errors import BrokerUnavailableError
from api_client.wire import DRAFT_APPLIED_ROUTE, CompactReason, JobKind

if TYPE_CHECKING:
    from api_client._client import AsyncCompactionClient, CompactionClient, TaskProducer

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


def from_draft(client: CompactionClient, session_id: str, reason: CompactReason | str,
               instructions: str | None) -> tuple[JobHandle | None, str | None]:
    """(finished handle, None) when the draft applied, else (None, discard cause or None)."""
    if not uses_draft(reason, instructions):
        return None, None
    outcome: DraftOutcome = client.io.run(apply_draft(client.layout, client.settings, session_id,
                                                    reason))
    if not outcome.applied or outcome.job_id is None:
        return None, None if outcome.cause == "nodraft" else outcome.cause
    _notify(client.producer, outcome.job_id)
    return JobHandle(client, outcome.job_id, session_id, JobKind.COMPACT,
                     from_draft=True), None


def observe(client: CompactionClient, session_id: str, *, context_tokens: int,
            context_window: int) -> ObserveResult:
    """After a turn: compact above the threshold (from a valid draft when there is one),
    precompute a draft inside the band below it (coalesced), else nothing."""
    s = client.settings
    if should_compact(context_tokens, context_window, s):
        handle = client.compact(session_id, reason="threshold")
        return ObserveResult("compact", handle, handle.from_draft)
    if not should_precompute(context_tokens, context_window, s):
        return ObserveResult("none")
    if client.io.run(check_draft(client.layout, s, session_id)).status == "valid":
        return ObserveResult("none", draft_ready=True)
    return ObserveResult("precompute", client.compact(session_id, reason="speculative"))


async def from_draft_async(client: AsyncCompactionClient, session_id: str,
                           reason: CompactReason | str,
                           instructions: str | None) -> tuple[AsyncJobHandle | None, str | None]:
    if not uses_draft(reason, instructions):
        return None, None
    outcome: DraftOutcome = await client.io.run(apply_draft(client.layout, client.settings,
                                                          session_id, reason))
    if not outcome.applied or outcome.job_id is None:
        return None, None if outcome.cause == "nodraft" else outcome.cause
    await asyncio.to_thread(_notify, client.producer, outcome.job_id)
    return AsyncJobHandle(client, outcome.job_id, session_id, JobKind.COMPACT,
                          from_draft=True), None


async def observe_async(client: AsyncCompactionClient, session_id: str, *, context_tokens: int,
                        context_window: int) -> ObserveResult:
    s = client.settings
    if should_compact(context_tokens, context_window, s):
        handle = await client.compact(session_id, reason="threshold")
        return ObserveResult("compact", handle, handle.from_draft)
    if not should_precompute(context_tokens, context_window, s):
        return ObserveResult("none")
    if (await client.io.run(check_draft(client.layout, s, session_id))).status == "valid":
        return ObserveResult("none", draft_ready=True)
    return ObserveResult("precompute", await client.compact(session_id, reason="speculative"))


