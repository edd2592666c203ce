"""The one exception tree of Compactor. Both the client and the workers raise these.

::

    CompactorError
    ├── SessionError                  a session cannot be read or changed as asked
    │   ├── SessionFormatError        malformed JSONL / entry (carries source, line, problem)
    │   │   ├── SessionCycleError     a parentId walk loops
    │   │   ├── DanglingParentError   a parentId names no entry
    │   │   └── InvalidEntryError     an entry the store refuses (session/validate.py)
    │   │       ├── UnserializableValueError  not a JSON value (datetime, bytes, set, ...)
    │   │       ├── NonFiniteNumberError      NaN or ±Infinity
    │   │       ├── InvalidTextError          a lone surrogate (text that is not UTF-8)
    │   │       ├── NestingTooDeepError       objects/arrays nested past MAX_NESTING
    │   │       ├── MessageSchemaError        breaks the reference agent's message schema
    │   │       └── UnsafeEntryIdError        an entry id outside the safe charset
    │   ├── SessionNotFoundError      no such session in the store
    │   ├── SessionExistsError        create/import over an existing session
    │   ├── EntryNotFoundError        no such entry in the session
    │   └── EntryExistsError          append with an id the session already has
    ├── PlanError                     nothing to do for this job, or more than it may do
    │   ├── AlreadyCompactedError
    │   ├── NothingToCompactError
    │   └── JobTooLargeError          more tokens to summarize than ``max_job_tokens``
    ├── StaleSnapshotError            the session moved on; commit refused (internal, retried)
    ├── ModelError                    the summarisation model failed (worker.llm refines it)
    ├── HookError                     a hook returned something invalid
    ├── ConfigurationError            settings that cannot work
    │   └── RedisAuthenticationError  Redis refused the URL's credentials (retrying cannot help)
    ├── StorageReadOnlyError          Redis refused a write: a read-only replica
    ├── StorageFullError              Redis refused a write: out of memory (``maxmemory`` with
    │                                 ``noeviction``); that write changed nothing
    ├── LimitExceededError            an input over a configured bound; names the setting, the
    │   │                             limit and the value; nothing was stored (also ValueError)
    │   ├── EntryTooLargeError        one entry's JSON over ``max_entry_bytes``
    │   ├── AppendTooLargeError       one append over ``max_append_bytes`` / ``max_append_entries``
    │   ├── InstructionsTooLongError  compaction instructions over ``max_instructions_chars``
    │   ├── SessionTooLargeError      a session over ``max_session_bytes``: no job loads it
    │   ├── HeaderTooLargeError       a session header over ``max_header_bytes``
    │   ├── ReadTooLargeError         a session over ``api_max_read_bytes`` read as JSON
    │   └── PromptTooLargeError       a summary's prompt over ``max_prompt_tokens`` or the
    │                                 model's window: nothing was sent to a model
    ├── InvalidIdError                a session or job id that cannot name Redis keys (also
    │                                 ValueError)
    └── ClientError                   the request path could not do its work
        ├── BrokerUnavailableError    Redis / broker unreachable at enqueue
        │   └── AppendUnconfirmedError  an append whose reply never came: it may be stored;
        │                               repeating it with its ``idempotency_key`` cannot
        │                               store it twice
        ├── InvalidRequestError       a job request with bad parameters (also ValueError)
        ├── JobNotFoundError          no such job record (never existed or expired)
        ├── JobConflictError          an in-flight job of that kind has other parameters
        ├── QuotaExceededError        the tenant is over a quota (names it, the limit, the
        │                             value and when it resets); nothing was stored
        ├── NoWorkerError             no worker is alive to run a job a caller waits for (its
        │                             job, if one was made, is cancelled)
        └── JobError                  a job ended without a result
            ├── JobFailedError
            │   └── CompactionLoopError  too many automatic compactions in a window (loop guard)
            ├── JobCancelledError
            └── JobTimeoutError       wait() ran out of time (the job may still finish)
"""

from __future__ import annotations

__all__ = [
    "AlreadyCompactedError",
    "AppendTooLargeError",
    "AppendUnconfirmedError",
    "BrokerUnavailableError",
    "ClientError",
    "CompactionLoopError",
    "CompactorError",
    "ConfigurationError",
    "DanglingParentError",
    "EntryExistsError",
    "EntryNotFoundError",
    "EntryTooLargeError",
    "HeaderTooLargeError",
    "HookError",
    "InstructionsTooLongError",
    "InvalidEntryError",
    "InvalidIdError",
    "InvalidRequestError",
    "InvalidTextError",
    "JobCancelledError",
    "JobConflictError",
    "JobError",
    "JobFailedError",
    "JobNotFoundError",
    "JobTimeoutError",
    "JobTooLargeError",
    "LimitExceededError",
    "MessageSchemaError",
    "ModelError",
    "NestingTooDeepError",
    "NoWorkerError",
    "NonFiniteNumberError",
    "NothingToCompactError",
    "PlanError",
    "PromptTooLargeError",
    "QuotaExceededError",
    "ReadTooLargeError",
    "SessionCycleError",
    "SessionError",
    "SessionExistsError",
    "SessionFormatError",
    "SessionNotFoundError",
    "SessionTooLargeError",
    "StaleSnapshotError",
    "StorageFullError",
    "UnsafeEntryIdError",
    "UnserializableValueError",
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


class InvalidEntryError(SessionFormatError):
    """An entry (or message) the store refuses to write; nothing was stored."""


class UnserializableValueError(InvalidEntryError):
    pass


class NonFiniteNumberError(InvalidEntryError):
    pass


class InvalidTextError(InvalidEntryError):
    pass


class NestingTooDeepError(InvalidEntryError):
    pass


class MessageSchemaError(InvalidEntryError):
    pass


class UnsafeEntryIdError(InvalidEntryError):
    pass


class SessionNotFoundError(SessionError):
    pass


class SessionExistsError(SessionError):
    pass


class EntryExistsError(SessionError):
    def __init__(self, entry_id: str) -> None:
        self.entry_id = entry_id
        super().__init__(f"Entry {entry_id} already exists")


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


class JobTooLargeError(PlanError):
    """A compaction would send the model more tokens than ``max_job_tokens`` allows; the job
    fails before any hook or model call (the session is unchanged)."""

    def __init__(self, tokens: int, limit: int) -> None:
        self.tokens = tokens
        self.limit = limit
        super().__init__(f"the compaction would summarize {tokens:,} tokens, over the limit "
                         f"max_job_tokens = {limit:,} (COMPACTOR_MAX_JOB_TOKENS); no model was "
                         "called")


class StaleSnapshotError(CompactorError):
    pass


class ModelError(CompactorError):
    pass


class HookError(CompactorError):
    pass


class ConfigurationError(CompactorError):
    pass


class RedisAuthenticationError(ConfigurationError):
    """Redis refused the credentials of the URL (wrong password, unknown ACL user): not an
    outage, so a caller that retries on :class:`BrokerUnavailableError` does not retry it."""


class StorageReadOnlyError(CompactorError):
    """Redis refused a write because it is a read-only replica (after a failover, the URL still
    names the old primary): nothing was written; point the URL at the primary."""


class StorageFullError(CompactorError):
    """Redis refused a write because it is out of memory (``maxmemory`` reached, policy
    ``noeviction``). The refused command or script changed nothing; once memory is freed the
    same call succeeds."""


class LimitExceededError(CompactorError, ValueError):
    """An input over one of the configured bounds (docs/configuration.md, Limits). Nothing was
    stored. ``setting`` names the setting (``max_append_bytes``), ``limit`` its value and
    ``value`` what the input measured, in the setting's unit."""

    unit = "bytes"
    outcome = "nothing was stored"

    def __init__(self, what: str, *, setting: str, limit: int, value: int) -> None:
        self.setting = setting
        self.limit = limit
        self.value = value
        super().__init__(f"{what} is {value:,} {self.unit}, over the limit {setting} = "
                         f"{limit:,} (COMPACTOR_{setting.upper()}); {self.outcome}")


class EntryTooLargeError(LimitExceededError):
    pass


class AppendTooLargeError(LimitExceededError):
    """Too many bytes (``max_append_bytes``) or entries (``max_append_entries``: ``unit`` is
    then ``entries``) in one append."""

    def __init__(self, what: str, *, setting: str, limit: int, value: int) -> None:
        self.unit = "entries" if setting == "max_append_entries" else "bytes"
        super().__init__(what, setting=setting, limit=limit, value=value)


class InstructionsTooLongError(LimitExceededError):
    unit = "characters"


class SessionTooLargeError(LimitExceededError):
    outcome = "the job does not load it"


class HeaderTooLargeError(LimitExceededError):
    """A session header (``cwd``, ``title`` and the rest of its line) over
    ``max_header_bytes``, created or imported."""


class ReadTooLargeError(LimitExceededError):
    """A session too large to be sent as one JSON document (``api_max_read_bytes``): its JSONL
    export streams it."""

    outcome = "read it as JSONL (GET /v1/sessions/{id}/jsonl streams any size)"


class PromptTooLargeError(LimitExceededError):
    """A summary's prompt over what a model may be sent (docs/security.md): at admission its
    estimate (characters / 4) over ``max_prompt_tokens``, in the worker its count over the
    model's window (``context_window``). No job was made, or its model was never called."""

    unit = "tokens"
    outcome = "nothing was sent to a model"


class InvalidIdError(CompactorError, ValueError):
    pass


class ClientError(CompactorError):
    pass


class BrokerUnavailableError(ClientError):
    pass


class AppendUnconfirmedError(BrokerUnavailableError):
    """An append was sent but its reply never came (twice): it may or may not be stored. The
    same append with ``idempotency_key`` returns the ids it stored, or stores it once."""

    def __init__(self, message: str, *, idempotency_key: str) -> None:
        self.idempotency_key = idempotency_key
        super().__init__(message)


class InvalidRequestError(ClientError, ValueError):
    pass


class JobNotFoundError(ClientError):
    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"Job {job_id} not found (never created, or its record expired)")


class JobConflictError(ClientError):
    """Raised when a different request of the same kind is in flight (e.g. another branch
    target)."""

    def __init__(self, message: str, *, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(message)


class QuotaExceededError(ClientError):
    """The tenant is over one of its quotas (docs/tenants.md): ``quota`` names it
    (``queued_jobs``, ``stored_bytes``, ``tokens_per_day``, ``usd_per_day``), ``limit`` and
    ``value`` are in its unit, ``resets_at`` (ISO 8601, UTC) is when a per-day quota starts
    afresh (None: when the tenant's queued jobs or stored sessions shrink). Nothing was stored
    and no job was created."""

    def __init__(self, tenant: str, *, quota: str, limit: float, value: float,
                 resets_at: str | None = None) -> None:
        self.tenant = tenant
        self.quota = quota
        self.limit = limit
        self.value = value
        self.resets_at = resets_at
        when = f"; it resets at {resets_at}" if resets_at else ""
        super().__init__(f"tenant {tenant!r} is over its {quota} quota: {value:,} of "
                         f"{limit:,}{when}; nothing was stored")


class NoWorkerError(ClientError):
    """No worker is alive (no fresh heartbeat, docs/recovery.md "Worker liveness") to run the job
    a caller would wait for: at admission (no job is made), or while it waits, the job queued or
    its worker lost (``job_id``: that job, cancelled, so no worker runs it later). Waiting could
    only end at a timeout; a caller that can do the work itself does it now."""

    def __init__(self, message: str, *, job_id: str = "") -> None:
        self.job_id = job_id
        super().__init__(message)


class JobError(ClientError):
    def __init__(self, message: str, *, job_id: str = "") -> None:
        self.job_id = job_id
        super().__init__(message)


class JobFailedError(JobError):
    pass


class CompactionLoopError(JobFailedError):
    """A session needed more automatic compactions within the loop-guard window than allowed;
    the job failed before calling a model (docs/instant-compaction.md, loop guard). A worker
    raises it with the counts; the client raises it from a record whose result has
    ``loopGuard``."""

    def __init__(self, message: str, *, job_id: str = "", count: int = 0, limit: int = 0,
                 window_s: float = 0.0) -> None:
        self.count = count
        self.limit = limit
        self.window_s = window_s
        super().__init__(message, job_id=job_id)

    @classmethod
    def tripped(cls, session_id: str, count: int, limit: int,
                window_s: float) -> CompactionLoopError:
        return cls(f"compaction loop: session {session_id} had {count} automatic compactions "
                   f"within {window_s:g} s (limit {limit}); not calling the model again",
                   count=count, limit=limit, window_s=window_s)

    def to_result(self) -> dict[str, float | int]:
        """The ``loopGuard`` object of the failed job's record and event."""
        return {"count": self.count, "limit": self.limit, "windowS": self.window_s}


class JobCancelledError(JobError):
    pass


class JobTimeoutError(JobError):
    pass
