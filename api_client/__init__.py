"""Compactor's thin client: sessions in Redis, compaction jobs for Celery workers.

The names here are the platform's API. The contract the workers share lives in the public
modules (``api_client.wire``, ``.keys``, ``.jobs``, ``.events``, ``.settings``, ``.redis_conn``).

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
    CompactionLoopError,
    CompactorError,
    ConfigurationError,
    DanglingParentError,
    EntryExistsError,
    EntryNotFoundError,
    HookError,
    InvalidEntryError,
    InvalidIdError,
    InvalidRequestError,
    InvalidTextError,
    JobCancelledError,
    JobConflictError,
    JobError,
    JobFailedError,
    JobNotFoundError,
    JobTimeoutError,
    MessageSchemaError,
    ModelError,
    NestingTooDeepError,
    NonFiniteNumberError,
    NothingToCompactError,
    PlanError,
    SessionCycleError,
    SessionError,
    SessionExistsError,
    SessionFormatError,
    SessionNotFoundError,
    StaleSnapshotError,
    UnsafeEntryIdError,
    UnserializableValueError,
)

if TYPE_CHECKING:
    from api_client._aclient import AsyncCompactionClient
    from api_client._client import CompactionClient
    from api_client._decide import should_compact, should_precompute
    from api_client._handle import AsyncJobHandle, JobHandle, JobResult
    from api_client._instant import ObserveResult
    from api_client.events import AsyncEventReader, EventReader
    from api_client.overflow import is_context_overflow
    from api_client.session.context import LlmContext
    from api_client.session_store import AsyncSessionStore, SessionStore, Snapshot
    from api_client.settings import ClientSettings
    from api_client.wire import (
        CompactReason,
        EventType,
        JobEvent,
        JobKind,
        JobRecord,
        JobState,
        PruneResult,
    )

_LAZY: dict[str, str] = {
    "AsyncCompactionClient": "_aclient",
    "CompactionClient": "_client",
    "AsyncJobHandle": "_handle",
    "JobHandle": "_handle",
    "JobResult": "_handle",
    "should_compact": "_decide",
    "should_precompute": "_decide",
    "ObserveResult": "_instant",
    "AsyncEventReader": "events",
    "EventReader": "events",
    "is_context_overflow": "overflow",
    "LlmContext": "session.context",
    "AsyncSessionStore": "session_store",
    "SessionStore": "session_store",
    "Snapshot": "session_store",
    "ClientSettings": "settings",
    "CompactReason": "wire",
    "EventType": "wire",
    "JobEvent": "wire",
    "JobKind": "wire",
    "JobRecord": "wire",
    "JobState": "wire",
    "PruneResult": "wire",
}

__all__ = [
    "AlreadyCompactedError",
    "AsyncCompactionClient",
    "AsyncEventReader",
    "AsyncJobHandle",
    "AsyncSessionStore",
    "BrokerUnavailableError",
    "ClientError",
    "ClientSettings",
    "CompactReason",
    "CompactionClient",
    "CompactionLoopError",
    "CompactorError",
    "ConfigurationError",
    "DanglingParentError",
    "EntryExistsError",
    "EntryNotFoundError",
    "EventReader",
    "EventType",
    "HookError",
    "InvalidEntryError",
    "InvalidIdError",
    "InvalidRequestError",
    "InvalidTextError",
    "JobCancelledError",
    "JobConflictError",
    "JobError",
    "JobEvent",
    "JobFailedError",
    "JobHandle",
    "JobKind",
    "JobNotFoundError",
    "JobRecord",
    "JobResult",
    "JobState",
    "JobTimeoutError",
    "LlmContext",
    "MessageSchemaError",
    "ModelError",
    "NestingTooDeepError",
    "NonFiniteNumberError",
    "NothingToCompactError",
    "ObserveResult",
    "PlanError",
    "PruneResult",
    "SessionCycleError",
    "SessionError",
    "SessionExistsError",
    "SessionFormatError",
    "SessionNotFoundError",
    "SessionStore",
    "Snapshot",
    "StaleSnapshotError",
    "UnsafeEntryIdError",
    "UnserializableValueError",
    "is_context_overflow",
    "should_compact",
    "should_precompute",
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
