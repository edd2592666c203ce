"""Wire models shared by the client and the workers (pydantic v2, camelCase on the wire): a job's
record and events, its usage and a prune's result, and the texts and event type of a job's end.

The enums they hold are in :mod:`api_client.contract.job_enums`; the routing (task names,
queues, Celery priorities, broker options) is in :mod:`api_client.contract.routing`, which
this module imports for a record's default queue and priority.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api_client.contract.agent_settings import AgentSettings
from api_client.contract.job_enums import CompactReason, EventType, JobKind, JobState
from api_client.contract.keys import split_tenant
from api_client.contract.routing import PRIORITY_MANUAL, QUEUE_COMPACT

__all__ = [
    "AgentSettings",
    "JobEvent",
    "JobRecord",
    "PruneResult",
    "TokenUsage",
    "failure_message",
    "job_error_text",
    "now_iso",
    "terminal_event_type",
]


def terminal_event_type(kind: JobKind, state: JobState) -> EventType:
    """The type of the one completion event a job publishes (see :meth:`JobStore.finish`)."""
    if kind is JobKind.COMPACT:
        return EventType.COMPACTION_END
    if state is JobState.SUCCEEDED:
        return {JobKind.PRUNE: EventType.PRUNE_END,
                JobKind.SUMMARIZE: EventType.SUMMARIZE_END}.get(kind, EventType.SESSION_TREE)
    return EventType.CANCELLED if state is JobState.CANCELLED else EventType.FAILED


def failure_message(reason: CompactReason | str | None, message: str | None) -> str:
    """docs/rules.md "Automatic compaction": the error text of a failed automatic compaction;
    manual: as is."""
    text = message or "compaction failed"
    if reason == CompactReason.OVERFLOW:
        return f"Context overflow recovery failed: {text}"
    if reason == CompactReason.THRESHOLD:
        return f"Auto-compaction failed: {text}"
    return text


def job_error_text(kind: JobKind, state: JobState, reason: CompactReason | str | None = None,
                   message: str | None = None) -> str:
    """The error text a job of ``kind`` ending ``cancelled`` or ``failed`` carries (record, event,
    and the raised :class:`JobCancelledError` / :class:`JobFailedError`), on either side.

    docs/rules.md "Automatic compaction" names a cancelled compaction "Compaction cancelled"; a
    branch summary is no
    compaction. A failed compaction reads as that section says (:func:`failure_message`).
    """
    if state is JobState.CANCELLED:
        return {JobKind.BRANCH_SUMMARY: "Branch summary cancelled",
                JobKind.SUMMARIZE: "Summary cancelled"}.get(kind, "Compaction cancelled")
    if kind is JobKind.COMPACT:
        return failure_message(reason or CompactReason.MANUAL, message)
    return message or "job failed"


def now_iso() -> str:
    """UTC ISO-8601 with ms and ``Z``, the session format's timestamp."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True,
        use_enum_values=False,
    )

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict with camelCase keys; ``None`` fields dropped."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class TokenUsage(_Wire):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


class PruneResult(_Wire):
    """What a prune job did: the result of :meth:`JobHandle.wait` for ``prune``."""

    pruned_entry_ids: list[str] = Field(default_factory=list)
    tokens_saved: int = 0


# Record fields stored as JSON inside the Redis hash; everything else is a plain string.
_JSON_FIELDS = frozenset({"entry", "usage", "result", "input", "draftUsage", "agent"})


class JobRecord(_Wire):
    """One job, as stored in ``<p>:session:{<sid>}:job:<token>`` (a hash, camelCase fields)."""

    id: str
    kind: JobKind
    session_id: str
    state: JobState = JobState.QUEUED
    reason: CompactReason | None = None
    instructions: str | None = None
    target_id: str | None = None
    priority: int = PRIORITY_MANUAL
    queue: str = QUEUE_COMPACT
    attempts: int = 0
    created_at: str = ""
    started_at: str | None = None
    finished_at: str | None = None
    result_entry_id: str | None = None
    entry: dict[str, Any] | None = None
    result: dict[str, Any] | None = None  # prune: PruneResult fields
    error: str | None = None
    model: str | None = None
    usage: TokenUsage | None = None
    cancel_requested: bool = False
    # Set by the client when a draft could not be applied and this job runs instead (the cause).
    draft_discarded: str | None = None
    # The agent's context window, when the request named it (observe does): the threshold the
    # loop guard judges ``ineffective`` against.
    context_window: int | None = None
    # A draft applied by the client: its compact() call → entry in hand, in ms (worker metric).
    stall_ms: float | None = None
    # Speculation counted apart: a speculative job's own model tokens; on a compaction applied
    # from a draft or built on a stale one, what its drafts cost (the extensions summed).
    draft_usage: TokenUsage | None = None
    # USD of every model call this job made, at the candidates' prices (stale rounds included:
    # what the tenant's usage counts); absent when it called no model.
    cost_usd: float | None = None
    draft_cost_usd: float | None = None  # the USD of ``draft_usage``
    # A summarize job's request: systemPrompt, prompt, maxTokens (the task carries ids only).
    input: dict[str, Any] | None = None
    # The agent's compaction settings the request carried (docs/compaction.md); None: the
    # worker's own settings throughout.
    agent: AgentSettings | None = None
    # The exactly-once marker (docs/recovery.md): the entry id the job's commit wrote ('' = a
    # change without an entry), set by the commit scripts with ``result``; None: not committed.
    # The workers' own: read from Redis, never written from here nor shown on the wire.
    effect: str | None = Field(default=None, exclude=True)

    def to_redis(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in self.to_wire().items():
            if key in _JSON_FIELDS:
                out[key] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            elif isinstance(value, bool):
                out[key] = "1" if value else "0"
            else:
                out[key] = str(value)
        return out

    @classmethod
    def from_redis(cls, fields: Mapping[str, str], entry_line: str | None = None) -> JobRecord:
        """The record of its hash ``fields``; ``entry_line``: the session's line of the entry
        the record names (:meth:`entry_to_read`), read with it (docs/storage.md "The entry is
        stored once"): the record's ``entry``, and an applied draft's ``result.entry``."""
        data: dict[str, Any] = {}
        for key, value in fields.items():
            if key in _JSON_FIELDS:
                data[key] = json.loads(value)
            elif key == "cancelRequested":
                data[key] = value == "1"
            elif value != "" or key == "effect":  # (a prune's effect is '')
                data[key] = value
        if entry_line and "entry" not in data:
            entry = data["entry"] = json.loads(entry_line)
            result = data.get("result")
            if isinstance(result, dict) and result.get("fromDraft") is True \
                    and "entry" not in result:
                data["result"] = {**result, "entry": entry}  # (the last key, as it was stored)
        return cls.model_validate(data)

    @staticmethod
    def entry_to_read(fields: Mapping[str, str]) -> str | None:
        """The id of the entry a record's ``fields`` name and do not hold (its reader reads it
        from the session's ``entries``); None: nothing to read (no entry, or an older
        worker's record holding its copy)."""
        if "entry" in fields:
            return None
        return fields.get("resultEntryId") or None

    def prune_result(self) -> PruneResult | None:
        return None if self.result is None else PruneResult.model_validate(self.result)

    @property
    def tenant(self) -> str:
        """The tenant of the job, as its qualified session id says (``acme~s1``)."""
        return split_tenant(self.session_id)[0]


class JobEvent(_Wire):
    """One job event (docs/rules.md "Job events").

    ``state`` is set only on a job's completion event (exactly one per job, published by
    :meth:`JobStore.finish` together with the state change). ``stream_id`` and ``entry_ref``
    are filled on read (docs/storage.md "Job events in Redis").
    """

    type: EventType
    job_id: str
    session_id: str
    kind: JobKind
    reason: CompactReason | None = None
    state: JobState | None = None
    attempt: int = 0
    model: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    duration_ms: int | None = None
    aborted: bool | None = None
    will_retry: bool | None = None
    error: str | None = None
    entry: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    old_leaf_id: str | None = None
    new_leaf_id: str | None = None
    from_extension: bool | None = None
    ineffective: bool | None = None  # compaction_end: the context stayed above the guard share
    draft_usage: TokenUsage | None = None  # as JobRecord.draft_usage
    cost_usd: float | None = None  # completion events: as JobRecord.cost_usd
    draft_cost_usd: float | None = None
    timestamp: str = Field(default_factory=now_iso)
    stream_id: str | None = Field(default=None, exclude=True)
    # Read from a stream: the id of the entry stored apart (api_client.contract.job_events).
    entry_ref: str | None = Field(default=None, exclude=True)

    @property
    def terminal(self) -> bool:
        return self.state is not None and self.state.terminal

    @property
    def tenant(self) -> str:
        """The tenant of the job, as its qualified session id says (``acme~s1``)."""
        return split_tenant(self.session_id)[0]

    def to_json(self) -> str:
        return json.dumps(self.to_wire(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def for_record(cls, record: JobRecord, type: EventType, **fields: Any) -> JobEvent:
        """An event about ``record`` (job, session, kind, reason and attempt filled in)."""
        base: dict[str, Any] = {
            "job_id": record.id, "session_id": record.session_id, "kind": record.kind,
            "reason": record.reason, "attempt": record.attempts, "model": record.model,
        }
        base.update(fields)
        return cls(type=type, **base)

    @classmethod
    def completion(cls, record: JobRecord, state: JobState, **fields: Any) -> JobEvent:
        """The completion event of ``record`` ending in ``state``."""
        fields.setdefault("aborted",
                          state is JobState.CANCELLED if record.kind is JobKind.COMPACT else None)
        if record.kind is JobKind.COMPACT:
            fields.setdefault("will_retry", record.reason is CompactReason.OVERFLOW
                              and state is JobState.SUCCEEDED)
        return cls.for_record(record, terminal_event_type(record.kind, state), state=state,
                              **fields)
