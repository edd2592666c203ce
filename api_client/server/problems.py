"""Errors as ``application/problem+json`` (RFC 9457): each typed error of
:mod:`api_client.contract.errors` has a status and a stable ``code``, looked up along its class's
MRO so a subclass gets its own row and, until it has one, its parent's.

A body: ``{"type": "urn:compactor:problem:<code>", "title", "status", "detail", "code"}`` plus
what the error carries (``jobId``, ``line``, ``setting``/``limit``/``value``, ...).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any

from api_client.contract import errors as e

__all__ = ["MEDIA_TYPE", "PROBLEMS", "Problem", "error_body", "problem_body", "problem_for",
           "retry_after_s"]

MEDIA_TYPE = "application/problem+json"


@dataclass(frozen=True, slots=True)
class Problem:
    status: int
    code: str


_P = Problem
# Every class of the error tree, by name: tests/server/test_server_problems.py checks none is
# missing, so a new error gets its own stable code here before it can reach a caller.
PROBLEMS: dict[type[BaseException], Problem] = {
    e.CompactorError: _P(500, "compactor_error"),
    e.SessionError: _P(400, "session_error"),
    e.SessionFormatError: _P(422, "session_format"),
    e.SessionCycleError: _P(422, "session_cycle"),
    e.DanglingParentError: _P(422, "dangling_parent"),
    e.InvalidEntryError: _P(422, "invalid_entry"),
    e.UnserializableValueError: _P(422, "unserializable_value"),
    e.NonFiniteNumberError: _P(422, "non_finite_number"),
    e.InvalidTextError: _P(422, "invalid_text"),
    e.NestingTooDeepError: _P(422, "nesting_too_deep"),
    e.MessageSchemaError: _P(422, "message_schema"),
    e.UnsafeEntryIdError: _P(422, "unsafe_entry_id"),
    e.SessionNotFoundError: _P(404, "session_not_found"),
    e.SessionExistsError: _P(409, "session_exists"),
    e.EntryNotFoundError: _P(404, "entry_not_found"),
    e.EntryExistsError: _P(409, "entry_exists"),
    e.PlanError: _P(409, "plan_error"),
    e.AlreadyCompactedError: _P(409, "already_compacted"),
    e.NothingToCompactError: _P(409, "nothing_to_compact"),
    e.JobTooLargeError: _P(413, "job_too_large"),
    e.StaleSnapshotError: _P(409, "stale_snapshot"),
    e.ModelError: _P(502, "model_error"),
    e.HookError: _P(502, "hook_error"),
    e.ConfigurationError: _P(500, "configuration_error"),
    e.StorageFullError: _P(507, "storage_full"),
    e.StorageReadOnlyError: _P(503, "storage_read_only"),
    e.RedisAuthenticationError: _P(500, "redis_authentication"),
    e.LimitExceededError: _P(413, "limit_exceeded"),
    e.EntryTooLargeError: _P(413, "entry_too_large"),
    e.AppendTooLargeError: _P(413, "append_too_large"),
    e.InstructionsTooLongError: _P(413, "instructions_too_long"),
    e.SessionTooLargeError: _P(413, "session_too_large"),
    e.HeaderTooLargeError: _P(413, "header_too_large"),
    e.ReadTooLargeError: _P(413, "read_too_large"),
    e.PromptTooLargeError: _P(413, "prompt_too_large"),
    e.InvalidIdError: _P(400, "invalid_id"),
    e.ClientError: _P(500, "client_error"),
    e.BrokerUnavailableError: _P(503, "broker_unavailable"),
    e.AppendUnconfirmedError: _P(503, "append_unconfirmed"),
    e.InvalidRequestError: _P(400, "invalid_request"),
    e.JobNotFoundError: _P(404, "job_not_found"),
    e.JobConflictError: _P(409, "job_conflict"),
    e.JobError: _P(500, "job_error"),
    e.JobFailedError: _P(502, "job_failed"),
    e.CompactionLoopError: _P(429, "compaction_loop"),
    e.QuotaExceededError: _P(429, "quota_exceeded"),
    # 424, not 503: a caller that retries a 5xx (oh-my-pi: 10 times over ~512 s) would wait
    # for a worker it could do without (docs/oh-my-pi.md "What falls back, and when").
    e.NoWorkerError: _P(424, "no_worker"),
    e.JobCancelledError: _P(409, "job_cancelled"),
    e.JobTimeoutError: _P(504, "job_timeout"),
}
INTERNAL = Problem(500, "internal_error")

# What an error carries beyond its text: attribute -> problem member.
_MEMBERS = (("job_id", "jobId"), ("line", "line"), ("setting", "setting"), ("limit", "limit"),
            ("value", "value"), ("entry_id", "entryId"), ("idempotency_key", "idempotencyKey"),
            ("unit", "unit"), ("tokens", "tokens"), ("count", "count"), ("window_s", "windowS"),
            ("quota", "quota"), ("resets_at", "resetsAt"))


def problem_for(err: BaseException) -> Problem:
    """The row of the nearest class of ``err`` in :data:`PROBLEMS` (500 for a foreign error)."""
    for cls in type(err).__mro__:
        found = PROBLEMS.get(cls)
        if found is not None:
            return found
    return INTERNAL


def problem_body(status: int, code: str, detail: str, **members: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"urn:compactor:problem:{code}", "title": HTTPStatus(status).phrase,
        "status": status, "detail": detail, "code": code,
    }
    body.update({k: v for k, v in members.items() if v not in (None, "")})
    return body


def error_body(err: BaseException) -> tuple[int, dict[str, Any]]:
    """(status, body) of a typed error; a foreign one says no more than its type."""
    problem = problem_for(err)
    if problem is INTERNAL:
        return 500, problem_body(500, INTERNAL.code, f"internal error ({type(err).__name__})")
    members = {wire: getattr(err, attr, None) for attr, wire in _MEMBERS}
    return problem.status, problem_body(problem.status, problem.code, str(err), **members)


# Retry-After of a quota that has no reset time: it frees when a queued job starts, or when
# the tenant's stored sessions shrink (a delete, an expiry), which no retry brings about.
QUOTA_RETRY_AFTER_S = {"queued_jobs": 5, "stored_bytes": 60}


def retry_after_s(err: BaseException, now: float | None = None) -> int | None:
    """The ``Retry-After`` (whole seconds, at least 1) of a 429 a typed error is answered with:
    a per-day quota's until its ``resets_at``, the loop guard's its window; None: not a 429."""
    if isinstance(err, e.QuotaExceededError):
        if err.resets_at:
            try:
                at = datetime.fromisoformat(err.resets_at.replace("Z", "+00:00")).timestamp()
            except ValueError:
                at = None
            if at is not None:
                return max(1, math.ceil(at - (time.time() if now is None else now)))
        return QUOTA_RETRY_AFTER_S.get(err.quota, 1)
    if isinstance(err, e.CompactionLoopError):
        return max(1, math.ceil(err.window_s))
    return None
