"""Wire models and names shared by the client and the workers (pydantic v2, camelCase on the wire).

Routing (task names, queues, Celery priorities) is defined here once; the worker registers its
tasks under :data:`TASK_NAMES` and consumes :data:`QUEUES`. With the Redis transport a *lower*
Celery priority number is served first, and producers and consumers must agree on
:data:`BROKER_TRANSPORT_OPTIONS` (``priority_steps`` and ``sep`` name the Redis lists).
"""

from __future__ import annotations

import json
from bisect import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from api_client.contract.agent_settings import AgentSettings
from api_client.contract.keys import KeyLayout, split_tenant

__all__ = [
    "AMQP_MAX_PRIORITY",
    "BROKER_TRANSPORT_OPTIONS",
    "DRAFT_APPLIED_ROUTE",
    "PRIORITY_BRANCH",
    "PRIORITY_MANUAL",
    "PRIORITY_OVERFLOW",
    "PRIORITY_PRUNE",
    "PRIORITY_SPECULATIVE",
    "PRIORITY_THRESHOLD",
    "QUEUES",
    "QUEUE_BRANCH",
    "QUEUE_COMPACT",
    "QUEUE_PRUNE",
    "QUEUE_SPECULATIVE",
    "QUEUE_URGENT",
    "TASK_BRANCH_SUMMARY",
    "TASK_COMPACT",
    "TASK_DRAFT_APPLIED",
    "TASK_NAMES",
    "TASK_PRUNE",
    "TASK_SUMMARIZE",
    "TERMINAL_STATES",
    "AgentSettings",
    "CompactReason",
    "EventType",
    "JobEvent",
    "JobKind",
    "JobRecord",
    "JobState",
    "PruneResult",
    "Route",
    "TokenUsage",
    "all_routes",
    "broker_priority",
    "failure_message",
    "is_amqp",
    "job_error_text",
    "now_iso",
    "queue_arguments",
    "queue_list",
    "redis_transport_options",
    "route_for",
    "shown_kwargs",
    "terminal_event_type",
]


class JobKind(StrEnum):
    COMPACT = "compact"
    PRUNE = "prune"
    BRANCH_SUMMARY = "branch_summary"
    # No session: a system prompt and a prompt through the model router (the HTTP API's
    # /v1/summarize); its record lives under a session id of its own (summarize-<hex>).
    SUMMARIZE = "summarize"


class CompactReason(StrEnum):
    MANUAL = "manual"
    THRESHOLD = "threshold"
    OVERFLOW = "overflow"
    # Plan and summarize like threshold, but store a draft instead of committing (drafts.py).
    SPECULATIVE = "speculative"


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class EventType(StrEnum):
    COMPACTION_START = "compaction_start"
    COMPACTION_END = "compaction_end"     # terminal event of every compact job
    SESSION_COMPACT = "session_compact"   # the committed compaction entry
    PRUNE_END = "prune_end"               # terminal event of a successful prune job
    BRANCH_SUMMARY = "branch_summary"     # the committed branch_summary entry
    SESSION_TREE = "session_tree"         # terminal event of a successful branch job
    CANCELLED = "cancelled"               # terminal: prune/branch job cancelled
    FAILED = "failed"                     # terminal: prune/branch job failed
    STALE = "stale"                       # a result was discarded; the job re-plans
    DRAFT_SAVED = "draft_saved"           # a speculative job stored its draft
    DRAFT_DISCARDED = "draft_discarded"   # a draft could not be applied (``error`` = cause)
    SUMMARIZE_END = "summarize_end"       # terminal event of a successful summarize job
    MODEL_PROGRESS = "model_progress"     # a chunked summary: result {call, calls, candidate}


TASK_COMPACT = "compactor.compact"
TASK_PRUNE = "compactor.prune"
TASK_BRANCH_SUMMARY = "compactor.branch_summary"
# After a client applied a draft: a worker runs the session_compact hooks (arg: the job id).
TASK_DRAFT_APPLIED = "compactor.draft_applied"
TASK_SUMMARIZE = "compactor.summarize"
TASK_NAMES: Mapping[JobKind, str] = {
    JobKind.COMPACT: TASK_COMPACT,
    JobKind.PRUNE: TASK_PRUNE,
    JobKind.BRANCH_SUMMARY: TASK_BRANCH_SUMMARY,
    JobKind.SUMMARIZE: TASK_SUMMARIZE,
}

QUEUE_URGENT = "compactor.urgent"     # overflow recovery: the agent is stuck until it is done
QUEUE_COMPACT = "compactor.compact"   # threshold and manual compaction
QUEUE_PRUNE = "compactor.prune"
QUEUE_BRANCH = "compactor.branch"
QUEUE_SPECULATIVE = "compactor.speculative"  # drafts: never ahead of a real compaction
QUEUES: tuple[str, ...] = (QUEUE_URGENT, QUEUE_COMPACT, QUEUE_BRANCH, QUEUE_PRUNE,
                           QUEUE_SPECULATIVE)

# Redis transport: 0 is served first. Values sit on BROKER_TRANSPORT_OPTIONS' steps.
PRIORITY_OVERFLOW = 0
PRIORITY_THRESHOLD = 3
PRIORITY_BRANCH = 3
PRIORITY_MANUAL = 6
PRIORITY_PRUNE = 6
PRIORITY_SPECULATIVE = 9

BROKER_TRANSPORT_OPTIONS: Mapping[str, Any] = {
    "priority_steps": [0, 3, 6, 9],
    "sep": ":",
    "queue_order_strategy": "priority",
}


def queue_list(queue: str, priority: int, prefix: str = "") -> str:
    """kombu's Redis list for ``queue`` at ``priority``: ``<queue>`` for step 0, else
    ``<queue><sep><step>``, the step the largest of ``priority_steps`` not above the priority
    (kombu's ``Channel._q_for_pri``); ``prefix``: the transport's ``global_keyprefix``."""
    steps: list[int] = list(BROKER_TRANSPORT_OPTIONS["priority_steps"])
    step = steps[bisect(steps, priority) - 1]
    sep: str = BROKER_TRANSPORT_OPTIONS["sep"]
    return f"{prefix}{queue}{sep}{step}" if step else prefix + queue


def redis_transport_options(key_prefix: str) -> dict[str, Any]:
    """:data:`BROKER_TRANSPORT_OPTIONS` and kombu's ``global_keyprefix``: every key and channel
    of the broker (queue lists, unacked index, bindings, events) under ``<key_prefix>:broker:``
    (:attr:`~api_client.contract.keys.KeyLayout.broker`), so one ACL pattern covers them."""
    return {**BROKER_TRANSPORT_OPTIONS, "global_keyprefix": KeyLayout(key_prefix).broker}

# RabbitMQ (``amqp://``): priority queues (``x-max-priority``) serve the *higher* number first,
# so the Redis-style priority above is sent as ``AMQP_MAX_PRIORITY - priority``. Client and
# worker declare the queues with the same arguments (RabbitMQ refuses a mismatch).
AMQP_MAX_PRIORITY = 9
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})


def is_amqp(broker_url: str) -> bool:
    return broker_url.partition("://")[0].lower() in AMQP_SCHEMES


def queue_arguments(broker_url: str) -> dict[str, Any]:
    """Arguments every Compactor queue is declared with on this broker."""
    return {"x-max-priority": AMQP_MAX_PRIORITY} if is_amqp(broker_url) else {}


def broker_priority(priority: int, broker_url: str) -> int:
    """The Celery message priority for a route's priority (lower = sooner) on this broker."""
    return AMQP_MAX_PRIORITY - priority if is_amqp(broker_url) else priority


@dataclass(frozen=True, slots=True)
class Route:
    task: str
    queue: str
    priority: int


_COMPACT_ROUTES = {
    CompactReason.OVERFLOW: Route(TASK_COMPACT, QUEUE_URGENT, PRIORITY_OVERFLOW),
    CompactReason.THRESHOLD: Route(TASK_COMPACT, QUEUE_COMPACT, PRIORITY_THRESHOLD),
    CompactReason.MANUAL: Route(TASK_COMPACT, QUEUE_COMPACT, PRIORITY_MANUAL),
    CompactReason.SPECULATIVE: Route(TASK_COMPACT, QUEUE_SPECULATIVE, PRIORITY_SPECULATIVE),
}
DRAFT_APPLIED_ROUTE = Route(TASK_DRAFT_APPLIED, QUEUE_COMPACT, PRIORITY_MANUAL)
_ROUTES = {
    JobKind.PRUNE: Route(TASK_PRUNE, QUEUE_PRUNE, PRIORITY_PRUNE),
    JobKind.BRANCH_SUMMARY: Route(TASK_BRANCH_SUMMARY, QUEUE_BRANCH, PRIORITY_BRANCH),
    # Its caller waits for the answer, as an agent waits for a threshold compaction.
    JobKind.SUMMARIZE: Route(TASK_SUMMARIZE, QUEUE_COMPACT, PRIORITY_THRESHOLD),
}


def route_for(kind: JobKind, reason: CompactReason | None = None) -> Route:
    """Where a job goes. ``reason`` only matters for ``compact`` (default ``manual``)."""
    if kind is JobKind.COMPACT:
        return _COMPACT_ROUTES[reason or CompactReason.MANUAL]
    return _ROUTES[kind]


def shown_kwargs(route: Route) -> str:
    """What Flower shows as a task's kwargs (``kwargsrepr``): a compaction's reason. The task
    itself takes only the job id; its name already says the kind."""
    reason = next((r for r, known in _COMPACT_ROUTES.items() if known == route), None)
    return "{}" if reason is None else repr({"reason": reason.value})


def all_routes() -> list[Route]:
    """Every route a job may take."""
    return [*_COMPACT_ROUTES.values(), *_ROUTES.values()]


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
