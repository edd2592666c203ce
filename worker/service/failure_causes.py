"""Why a job failed, as one of a few words: the ``cause`` label of the failure metric and the
worker's log line. Bounded on purpose: a label per error text would grow without end.

| cause               | what ended the job                                                |
|---------------------|-------------------------------------------------------------------|
| ``model_auth``      | a provider refused the key (401/403, no key, quota exhausted)     |
| ``model_overflow``  | the input did not fit any candidate's window (a summary's prompt) |
| ``model_request``   | a provider refused the request itself (400, 404, insecure URL)    |
| ``model_response``  | a reply Compactor could not use (malformed, empty, not smaller)   |
| ``model_unavailable`` | timeouts, 5xx, 429, connection failures, cooldowns, the budget  |
| ``deadline``        | the job deadline passed                                           |
| ``cancelled``       | the platform cancelled it                                         |
| ``loop_guard``      | the loop guard refused another automatic compaction               |
| ``quota``           | the tenant's model budget is spent (a draft stops before it is)   |
| ``nothing_to_do``   | nothing to compact, or already compacted                          |
| ``session``         | the session is missing or cannot be read                          |
| ``storage``         | Redis refused or could not take a write                           |
| ``hook``            | a hook failed or returned something invalid                       |
| ``other``           | any other typed error                                             |
| ``internal``        | a bug (an untyped exception): the worker log has the traceback    |
"""

from __future__ import annotations

import redis

from api_client.contract.errors import (
    BrokerUnavailableError,
    CompactionLoopError,
    CompactorError,
    ConfigurationError,
    HookError,
    ModelError,
    PlanError,
    PromptTooLargeError,
    QuotaExceededError,
    RedisAuthenticationError,
    SessionError,
    StorageReadOnlyError,
)
from worker.llm.errors import (
    AllCandidatesFailedError,
    AuthenticationFailed,
    BadRequest,
    ContextOverflow,
    EmptyOutput,
    InsecureEndpointError,
    MalformedResponse,
    MissingCredentials,
    NotFound,
    PermissionDenied,
    QuotaExhausted,
    SummaryNotSmaller,
    UnexpectedResponse,
)
from worker.service._job_stops import DeadlineExceededError, JobCancelled

__all__ = ["CAUSES", "failure_cause"]

# First match wins: more specific classes before their bases.
_TABLE: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    ((AuthenticationFailed, PermissionDenied, MissingCredentials, QuotaExhausted), "model_auth"),
    ((ContextOverflow, PromptTooLargeError), "model_overflow"),
    ((BadRequest, NotFound, InsecureEndpointError), "model_request"),
    ((MalformedResponse, EmptyOutput, SummaryNotSmaller, UnexpectedResponse), "model_response"),
    ((DeadlineExceededError,), "deadline"),
    ((JobCancelled,), "cancelled"),
    ((CompactionLoopError,), "loop_guard"),
    ((QuotaExceededError,), "quota"),
    ((PlanError,), "nothing_to_do"),
    ((SessionError,), "session"),
    # Redis's own errors and the typed ones redis_flows.replied makes of its refusals.
    ((BrokerUnavailableError, StorageReadOnlyError, RedisAuthenticationError, redis.RedisError),
     "storage"),
    ((HookError,), "hook"),
)
CAUSES: tuple[str, ...] = (*(cause for _, cause in _TABLE), "model_unavailable", "other",
                           "internal")


def failure_cause(err: BaseException) -> str:
    """The cause word of ``err`` (an aggregate model failure: its last candidate's error)."""
    if isinstance(err, AllCandidatesFailedError):
        return "model_unavailable" if err.last_error is None else _model_cause(err.last_error)
    for types, cause in _TABLE:
        if isinstance(err, types):
            return cause
    if isinstance(err, ConfigurationError) and isinstance(err.__cause__, redis.RedisError):
        return "storage"  # Redis refused the URL's user its keys (NOPERM): replied's type
    if isinstance(err, CompactorError):
        return _model_cause(err) if isinstance(err, ModelError) else "other"
    return "internal"


def _model_cause(err: BaseException) -> str:
    for types, cause in _TABLE[:4]:
        if isinstance(err, types):
            return cause
    return "model_unavailable"
