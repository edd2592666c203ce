"""Speculative compaction drafts: their JSON shape and the client's one-round-trip apply.

A speculative job (``compact(reason="speculative")``) plans and summarizes like a threshold
compaction on a snapshot, then stores a **draft** at ``<p>:session:{<sid>}:draft`` instead of
committing (the session is untouched). ``compact(reason="threshold" | "overflow")`` without
custom instructions first runs ``apply_draft.lua``: one EVALSHA that either appends the draft's
compaction entry as a child of the current leaf and writes a finished (``succeeded``) job record
with its events, or deletes the draft and names the cause (:data:`DISCARD_CAUSES`); the normal
job then runs.

A draft is valid while its snapshot leaf is on the current path, no compaction entry was
appended on that path since, and the entries appended since weigh at most ``keep_recent_tokens``
(the sum of their stored JSON line lengths / 4, oh-my-pi's bound): those entries then stay in
the context after the draft's kept region, exactly once.

Draft JSON fields (camelCase): ``jobId``, ``snapshotLeafId``, ``snapshotRevision``,
``firstKeptEntryId``, ``tokensBefore``, ``tokensAfter`` (of the snapshot's compacted context),
``summary``, ``shortSummary`` (when the entry has one), ``details``, ``fromExtension``,
``entry`` (the entry without id/parentId/timestamp), ``lineTail`` (the stored line after
``timestamp``, filled in by the script), ``snapshotEntries``, ``snapshotTokens``, ``createdAt``.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from api_client._calls import Command, Flow, Pipeline, Script, cmd
from api_client.errors import InvalidRequestError
from api_client.events import event_fields
from api_client.keys import KeyLayout
from api_client.settings import ClientSettings
from api_client.wire import (
    QUEUE_COMPACT,
    CompactReason,
    EventType,
    JobEvent,
    JobKind,
    JobRecord,
    JobState,
    now_iso,
    route_for,
)

__all__ = [
    "DISCARD_CAUSES", "DraftOutcome", "apply_draft", "check_draft", "discard_note", "read_draft",
    "uses_draft",
]

DISCARD_CAUSES: tuple[str, ...] = (
    "nodraft", "nosession", "corrupt", "offpath", "compacted", "grown", "noid",
)
_WALK_LIMIT = 10_000
_CANDIDATES = 4


@dataclass(frozen=True, slots=True)
class DraftOutcome:
    """What an apply (or check) did: ``applied`` with the new job and entry, ``valid`` (check),
    or ``discarded`` with the cause (``nodraft``: there was none)."""

    status: str
    job_id: str | None = None
    entry: dict[str, Any] | None = None
    cause: str | None = None
    growth_tokens: int | None = None

    @property
    def applied(self) -> bool:
        return self.status == "applied"


def uses_draft(reason: CompactReason | str, instructions: str | None) -> bool:
    """Only automatic compactions without custom instructions may take a draft."""
    return reason in (CompactReason.THRESHOLD, CompactReason.OVERFLOW) and not instructions


def _record(job_id: str, session_id: str, reason: CompactReason, ts: str) -> JobRecord:
    route = route_for(JobKind.COMPACT, reason)
    return JobRecord(id=job_id, kind=JobKind.COMPACT, session_id=session_id,
                     state=JobState.SUCCEEDED, reason=reason, priority=route.priority,
                     queue=route.queue, created_at=ts, started_at=ts, finished_at=ts)


def _call(layout: KeyLayout, settings: ClientSettings, session_id: str, reason: CompactReason,
          mode: str) -> tuple[Script, str]:
    s = layout.session(session_id)
    job_id = layout.new_job_id(session_id)
    ts = now_iso()
    record = _record(job_id, session_id, reason, ts)
    compacted = JobEvent.for_record(record, EventType.SESSION_COMPACT, timestamp=ts)
    done = JobEvent.completion(record, JobState.SUCCEEDED, duration_ms=0, timestamp=ts)
    fields = [x for pair in record.to_redis().items() for x in pair]
    keys = [*s.data(), s.effects, s.draft, layout.job(job_id).record, s.events]
    args = [mode, job_id, str(_WALK_LIMIT), str(settings.keep_recent_tokens), ts,
            " ".join(secrets.token_hex(4) for _ in range(_CANDIDATES)), str(settings.job_ttl_s),
            str(settings.session_event_maxlen), compacted.to_json(), done.to_json(), *fields]
    return Script("apply_draft", keys, args), job_id


def _global_copies(layout: KeyLayout, settings: ClientSettings, job_id: str,
                   events: tuple[tuple[str, str], ...]) -> Pipeline:
    # As the worker's commits: the session stream got the events atomically; the global stream
    # (another Cluster slot) gets its copies right after.
    return Pipeline(tuple(
        Command("xadd", (layout.global_events, {"type": kind, "job": job_id, "data": data}),
                {"maxlen": settings.event_stream_maxlen, "approximate": True})
        for kind, data in events), transaction=False)


def apply_draft(layout: KeyLayout, settings: ClientSettings, session_id: str,
                reason: CompactReason | str) -> Flow[DraftOutcome]:
    """Apply the session's draft if it is still valid (one EVALSHA; see the module doc)."""
    why = CompactReason(reason)
    if why not in (CompactReason.THRESHOLD, CompactReason.OVERFLOW):
        raise InvalidRequestError(f"a draft is applied by a threshold or overflow compaction, "
                                  f"not {why.value}")
    script, job_id = _call(layout, settings, session_id, why, "apply")
    reply = [str(x) for x in (yield script)]
    if reply[0] != "applied":
        return DraftOutcome("discarded", cause=reply[1])
    _, _, _, line, _, ev1, ev2 = reply
    yield _global_copies(layout, settings, job_id, (
        (EventType.SESSION_COMPACT.value, ev1), (EventType.COMPACTION_END.value, ev2)))
    return DraftOutcome("applied", job_id=job_id, entry=dict(json.loads(line)))


def check_draft(layout: KeyLayout, settings: ClientSettings,
                session_id: str) -> Flow[DraftOutcome]:
    """Is the draft still valid? Read-only unless invalid (then it is deleted)."""
    script, _ = _call(layout, settings, session_id, CompactReason.THRESHOLD, "check")
    reply = [str(x) for x in (yield script)]
    if reply[0] == "valid":
        return DraftOutcome("valid", growth_tokens=int(reply[1]))
    return DraftOutcome("discarded", cause=reply[1])


def discard_note(layout: KeyLayout, settings: ClientSettings, session_id: str, job_id: str,
                 reason: CompactReason | str, cause: str, *, created: bool) -> Flow[None]:
    """After a discarded draft: the ``draft_discarded`` event (on the job that runs instead) and,
    on a job this request created, its ``draftDiscarded`` field (the worker's metric)."""
    record = JobRecord(id=job_id, kind=JobKind.COMPACT, session_id=session_id,
                       reason=CompactReason(reason), queue=QUEUE_COMPACT)
    event = JobEvent.for_record(record, EventType.DRAFT_DISCARDED, error=cause)
    fields = event_fields(event)
    calls: list[Command] = []
    if created:
        calls.append(cmd("hset", layout.job(job_id).record, "draftDiscarded", cause))
    calls.append(Command("xadd", (layout.session(session_id).events, fields),
                         {"maxlen": settings.session_event_maxlen, "approximate": True}))
    calls.append(Command("xadd", (layout.global_events, fields),
                         {"maxlen": settings.event_stream_maxlen, "approximate": True}))
    yield Pipeline(tuple(calls), transaction=False)


def read_draft(layout: KeyLayout, session_id: str) -> Flow[dict[str, Any] | None]:
    """The stored draft (for inspection), or None."""
    raw = yield cmd("get", layout.session(session_id).draft)
    return None if raw is None else dict(json.loads(raw))
