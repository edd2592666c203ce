"""The one exception tree of Compactor. Both the client and the workers raise these.

::

    CompactorError
    ├── SessionError                  a session cannot be read or changed as asked
    │   ├── SessionFormatError        malformed JSONL / entry (carries source, line, problem)
    │   │   ├── SessionCycleError     a parentId walk loops
    │   │   └── DanglingParentError   a parentId names no entry
    │   ├── SessionNotFoundError      no such session in the store
    │   └── EntryNotFoundError        no such entry in the session
    ├── PlanError                     nothing to do for this job
    │   ├── AlreadyCompactedError
    │   └── NothingToCompactError
    ├── StaleSnapshotError            the session moved on; commit refused (internal, retried)
    ├── ModelError                    the summarisation model failed (worker.llm refines it)
    ├── HookError                     a hook returned something invalid
    ├── ConfigurationError            settings that cannot work
    └── ClientError                   the request path could not do its work
        ├── BrokerUnavailableError    Redis / broker unreachable at enqueue
        └── JobError                  a job ended without a result
            ├── JobFailedError
            ├── JobCancelledError
            └── JobTimeoutError       wait() ran out of time (the job may still finish)
"""

from __future__ import annotations

__all__ = [
    "AlreadyCompactedError",
    "BrokerUnavailableError",
    "ClientError",
    "CompactorError",
    "ConfigurationError",
    "DanglingParentError",
    "EntryNotFoundError",
    "HookError",
    "JobCancelledError",
    "JobError",
    "JobFailedError",
    "JobTimeoutError",
    "ModelError",
    "NothingToCompactError",
    "PlanError",
    "SessionCycleError",
    "SessionError",
    "SessionFormatError",
    "SessionNotFoundError",
    "StaleSnapshotError",
]


class CompactorError(Exception):
    """Root of every error Compactor raises on purpose."""


class SessionError(CompactorError):
    pass


class SessionFormatError(SessionError):
    """A session that cannot be read. ``str()`` is one line: ``source:line: problem``."""

    def __init__(self, problem: str, *, source: str = "<session>", line: int | None = None) -> None:
        self.problem = problem
        self.source = source
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


class SessionCycleError(SessionFormatError):
    pass


class DanglingParentError(SessionFormatError):
    pass


class SessionNotFoundError(SessionError):
    pass


class EntryNotFoundError(SessionError):
    def __init__(self, entry_id: str) -> None:
        self.entry_id = entry_id
        super().__init__(f"Entry {entry_id} not found")


class PlanError(CompactorError):
    pass


class AlreadyCompactedError(PlanError):
    def __init__(self) -> None:
        super().__init__("Already compacted")


class NothingToCompactError(PlanError):
    def __init__(self) -> None:
        super().__init__("Nothing to compact (session too small)")


class StaleSnapshotError(CompactorError):
    pass


class ModelError(CompactorError):
    pass


class HookError(CompactorError):
    pass


class ConfigurationError(CompactorError):
    pass


class ClientError(CompactorError):
    pass


class BrokerUnavailableError(ClientError):
    pass


class JobError(ClientError):
    def __init__(self, message: str, *, job_id: str = "") -> None:
        self.job_id = job_id
        super().__init__(message)


class JobFailedError(JobError):
    pass


class JobCancelledError(JobError):
    pass


class JobTimeoutError(JobError):
    pass
