"""Compactor's thin client: sessions in Redis, compaction jobs for Celery workers.

Importing this package is cheap: only the error tree loads eagerly. Everything else (redis,
pydantic, celery) loads on first use of a name, through ``__getattr__``.

    >>> from api_client import CompactionClient
    >>> client = CompactionClient("redis://127.0.0.1:6379/0")
    >>> sid = client.sessions.create(cwd="/repo")
    >>> client.sessions.append(sid, {"role": "user", "content": "hi", "timestamp": 0})
    >>> entry = client.compact(sid, reason="manual").wait(timeout=60)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from api_client.errors import (
    AlreadyCompactedError,
    BrokerUnavailableError,
    ClientError,
    CompactorError,
    ConfigurationError,
    DanglingParentError,
    EntryExistsError,
    EntryNotFoundError,
    HookError,
    InvalidIdError,
    InvalidRequestError,
    JobCancelledError,
    JobConflictError,
    JobError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    ModelError,
    NothingToCompactError,
    PlanError,
    SessionCycleError,
    SessionError,
    SessionExistsError,
    SessionFormatError,
    SessionNotFoundError,
    StaleSnapshotError,
)

if TYPE_CHECKING:
    from api_client._async_store import AsyncSessionStore
    from api_client._client import AsyncCompactionClient, CompactionClient
    from api_client._decide import should_compact
    from api_client._handle import AsyncJobHandle, JobHandle
    from api_client.events import AsyncEventReader, EventPublisher, EventReader
    from api_client.jobs import AsyncJobStore, EnqueueResult, JobStore, LeaseOutcome
    from api_client.keys import KeyLayout
    from api_client.overflow import is_context_overflow
    from api_client.session_store import SessionStore, Snapshot
    from api_client.settings import ClientSettings
    from api_client.wire import (
        BROKER_TRANSPORT_OPTIONS,
        PRIORITY_BRANCH,
        PRIORITY_MANUAL,
        PRIORITY_OVERFLOW,
        PRIORITY_PRUNE,
        PRIORITY_THRESHOLD,
        QUEUE_BRANCH,
        QUEUE_COMPACT,
        QUEUE_PRUNE,
        QUEUE_URGENT,
        QUEUES,
        TASK_BRANCH_SUMMARY,
        TASK_COMPACT,
        TASK_NAMES,
        TASK_PRUNE,
        CompactReason,
        EventType,
        JobEvent,
        JobKind,
        JobRecord,
        JobState,
        PruneResult,
        Route,
        TokenUsage,
        failure_message,
        route_for,
        terminal_event_type,
    )

_LAZY: dict[str, str] = {
    "AsyncCompactionClient": "_client",
    "CompactionClient": "_client",
    "AsyncJobHandle": "_handle",
    "JobHandle": "_handle",
    "AsyncSessionStore": "_async_store",
    "SessionStore": "session_store",
    "Snapshot": "session_store",
    "AsyncJobStore": "jobs",
    "EnqueueResult": "jobs",
    "JobStore": "jobs",
    "LeaseOutcome": "jobs",
    "AsyncEventReader": "events",
    "EventPublisher": "events",
    "EventReader": "events",
    "ClientSettings": "settings",
    "KeyLayout": "keys",
    "should_compact": "_decide",
    "is_context_overflow": "overflow",
    **{
        name: "wire"
        for name in (
            "BROKER_TRANSPORT_OPTIONS", "PRIORITY_BRANCH", "PRIORITY_MANUAL", "PRIORITY_OVERFLOW",
            "PRIORITY_PRUNE", "PRIORITY_THRESHOLD", "QUEUES", "QUEUE_BRANCH", "QUEUE_COMPACT",
            "QUEUE_PRUNE", "QUEUE_URGENT", "TASK_BRANCH_SUMMARY", "TASK_COMPACT", "TASK_NAMES",
            "TASK_PRUNE", "CompactReason", "EventType", "JobEvent", "JobKind", "JobRecord",
            "JobState", "PruneResult", "Route", "TokenUsage", "failure_message", "route_for",
            "terminal_event_type",
        )
    },
}

__all__ = [
    "BROKER_TRANSPORT_OPTIONS",
    "PRIORITY_BRANCH",
    "PRIORITY_MANUAL",
    "PRIORITY_OVERFLOW",
    "PRIORITY_PRUNE",
    "PRIORITY_THRESHOLD",
    "QUEUES",
    "QUEUE_BRANCH",
    "QUEUE_COMPACT",
    "QUEUE_PRUNE",
    "QUEUE_URGENT",
    "TASK_BRANCH_SUMMARY",
    "TASK_COMPACT",
    "TASK_NAMES",
    "TASK_PRUNE",
    "AlreadyCompactedError",
    "AsyncCompactionClient",
    "AsyncEventReader",
    "AsyncJobHandle",
    "AsyncJobStore",
    "AsyncSessionStore",
    "BrokerUnavailableError",
    "ClientError",
    "ClientSettings",
    "CompactReason",
    "CompactionClient",
    "CompactorError",
    "ConfigurationError",
    "DanglingParentError",
    "EnqueueResult",
    "EntryExistsError",
    "EntryNotFoundError",
    "EventPublisher",
    "EventReader",
    "EventType",
    "HookError",
    "InvalidIdError",
    "InvalidRequestError",
    "JobCancelledError",
    "JobConflictError",
    "JobError",
    "JobEvent",
    "JobFailedError",
    "JobHandle",
    "JobKind",
    "JobNotFoundError",
    "JobRecord",
    "JobState",
    "JobStore",
    "JobTimeoutError",
    "KeyLayout",
    "LeaseOutcome",
    "ModelError",
    "NothingToCompactError",
    "PlanError",
    "PruneResult",
    "Route",
    "SessionCycleError",
    "SessionError",
    "SessionExistsError",
    "SessionFormatError",
    "SessionNotFoundError",
    "SessionStore",
    "Snapshot",
    "StaleSnapshotError",
    "TokenUsage",
    "failure_message",
    "is_context_overflow",
    "route_for",
    "should_compact",
    "terminal_event_type",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'api_client' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"api_client.{module}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
