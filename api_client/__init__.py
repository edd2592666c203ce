"""Compactor's thin client: sessions in Redis, compaction jobs for Celery workers.

The names here are the platform's API (implemented in ``api_client.client``). The contract the
workers share is ``api_client.contract`` (session model, wire models, keys, errors, scripts).

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

from api_client.contract.errors import (
    AlreadyCompactedError,
    AppendTooLargeError,
    AppendUnconfirmedError,
    BrokerUnavailableError,
    ClientError,
    CompactionLoopError,
    CompactorError,
    ConfigurationError,
    DanglingParentError,
    EntryExistsError,
    EntryNotFoundError,
    EntryTooLargeError,
    HookError,
    InstructionsTooLongError,
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
    LimitExceededError,
    MessageSchemaError,
    ModelError,
    NestingTooDeepError,
    NonFiniteNumberError,
    NothingToCompactError,
    NoWorkerError,
    PlanError,
    QuotaExceededError,
    RedisAuthenticationError,
    SessionCycleError,
    SessionError,
    SessionExistsError,
    SessionFormatError,
    SessionNotFoundError,
    SessionTooLargeError,
    StaleSnapshotError,
    StorageFullError,
    StorageReadOnlyError,
    UnsafeEntryIdError,
    UnserializableValueError,
)

if TYPE_CHECKING:
    from api_client.client.async_client import AsyncCompactionClient
    from api_client.client.event_readers import AsyncEventReader, EventReader
    from api_client.client.handles import AsyncJobHandle, JobHandle, JobResult, ObserveResult
    from api_client.client.session_listing import SessionPage
    from api_client.client.sessions import AsyncSessionStore, SessionStore, Snapshot
    from api_client.client.sync_client import CompactionClient
    from api_client.client.thresholds import should_compact, should_precompute
    from api_client.contract.job_enums import CompactReason, EventType, JobKind, JobState
    from api_client.contract.overflow import is_context_overflow
    from api_client.contract.session.context import LlmContext
    from api_client.contract.settings import ClientSettings
    from api_client.contract.usage import DayUsage
    from api_client.contract.wire import AgentSettings, JobEvent, JobRecord, PruneResult

_LAZY: dict[str, str] = {
    "AsyncCompactionClient": "client.async_client",
    "CompactionClient": "client.sync_client",
    "AsyncJobHandle": "client.handles",
    "JobHandle": "client.handles",
    "JobResult": "client.handles",
    "should_compact": "client.thresholds",
    "should_precompute": "client.thresholds",
    "ObserveResult": "client.handles",
    "AsyncEventReader": "client.event_readers",
    "EventReader": "client.event_readers",
    "is_context_overflow": "contract.overflow",
    "LlmContext": "contract.session.context",
    "AsyncSessionStore": "client.sessions",
    "SessionStore": "client.sessions",
    "Snapshot": "client.sessions",
    "SessionPage": "client.session_listing",
    "ClientSettings": "contract.settings",
    "DayUsage": "contract.usage",
    "AgentSettings": "contract.wire",
    "CompactReason": "contract.job_enums",
    "EventType": "contract.job_enums",
    "JobEvent": "contract.wire",
    "JobKind": "contract.job_enums",
    "JobRecord": "contract.wire",
    "JobState": "contract.job_enums",
    "PruneResult": "contract.wire",
}

__all__ = [
    "AgentSettings",
    "AlreadyCompactedError",
    "AppendTooLargeError",
    "AppendUnconfirmedError",
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
    "DayUsage",
    "EntryExistsError",
    "EntryNotFoundError",
    "EntryTooLargeError",
    "EventReader",
    "EventType",
    "HookError",
    "InstructionsTooLongError",
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
    "LimitExceededError",
    "LlmContext",
    "MessageSchemaError",
    "ModelError",
    "NestingTooDeepError",
    "NoWorkerError",
    "NonFiniteNumberError",
    "NothingToCompactError",
    "ObserveResult",
    "PlanError",
    "PruneResult",
    "QuotaExceededError",
    "RedisAuthenticationError",
    "SessionCycleError",
    "SessionError",
    "SessionExistsError",
    "SessionFormatError",
    "SessionNotFoundError",
    "SessionPage",
    "SessionStore",
    "SessionTooLargeError",
    "Snapshot",
    "StaleSnapshotError",
    "StorageFullError",
    "StorageReadOnlyError",
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
