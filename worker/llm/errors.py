"""Typed model errors. Every one is an ``api_client.contract.errors.ModelError``.

Each class carries the router's classification in ``kind`` (see ``worker.llm.retry_policy``):

* ``transient``  — worth another try on the same candidate after a backoff;
* ``timeout``    — the candidate did not answer in time: move on unless it is the last one;
* ``permanent``  — retrying the same candidate cannot help: next candidate at once;
* ``overflow``   — the input does not fit this model: a larger window or a smaller input;
* ``cancelled``  — the job was cancelled: stop everything.

Every message is passed through ``redact_secrets`` when the error is made: provider texts
quote requests (keys, bearer tokens, URLs with credentials), and these messages reach the logs,
the job record and the events every client reads.

Stdlib only (plus ``api_client.contract``'s errors and redaction), so the pure core can import it.
"""

from __future__ import annotations

from typing import ClassVar, Literal, TypedDict

from api_client.contract.errors import ConfigurationError, ModelError
from api_client.contract.redaction import redact_secrets

__all__ = [
    "AllCandidatesFailedError",
    "AttemptBudgetExhausted",
    "AuthenticationFailed",
    "BadRequest",
    "CandidateCoolingDown",
    "ConnectionFailed",
    "ContextOverflow",
    "EmptyOutput",
    "ErrorKind",
    "InsecureEndpointError",
    "MalformedResponse",
    "MissingCredentials",
    "ModelCallError",
    "ModelCancelledError",
    "ModelTimeout",
    "NotFound",
    "Overloaded",
    "PermissionDenied",
    "QuotaExhausted",
    "RateLimited",
    "ResponseTooLarge",
    "ServerError",
    "SummaryNotSmaller",
    "SummaryTooLong",
    "TransientHTTPError",
    "UnexpectedResponse",
    "Who",
]

ErrorKind = Literal["transient", "timeout", "permanent", "overflow", "cancelled"]


class Who(TypedDict):
    """The candidate an error is about (keyword arguments of every ``ModelCallError``)."""

    provider: str
    model: str


class ModelCallError(ModelError):
    """One failed model call (or a refusal to make it). ``str()`` is the provider's error text."""

    kind: ClassVar[ErrorKind] = "permanent"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after_ms: int | None = None,
        provider: str = "",
        model: str = "",
    ) -> None:
        message = redact_secrets(message)
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after_ms = retry_after_ms
        self.provider = provider
        self.model = model

    @property
    def candidate(self) -> str:
        return f"{self.provider}/{self.model}" if self.model else self.provider


# --- transient ------------------------------------------------------------------------------
class RateLimited(ModelCallError):
    kind = "transient"  # 429


class Overloaded(ModelCallError):
    kind = "transient"  # 529, overloaded_error


class ServerError(ModelCallError):
    kind = "transient"  # 5xx


class TransientHTTPError(ModelCallError):
    kind = "transient"  # 408, 409, and other statuses whose text reads as transient


class ConnectionFailed(ModelCallError):
    kind = "transient"  # refused, reset, closed mid-response


class EmptyOutput(ModelCallError):
    kind = "transient"


class MalformedResponse(ModelCallError):
    # A body we cannot read (proxies answer HTML pages under load, JSON nested past the bound,
    # fields of the wrong type): any failure to parse an answer.
    kind: ClassVar[ErrorKind] = "transient"


class ResponseTooLarge(MalformedResponse):
    # a body over COMPACTOR_LLM_MAX_RESPONSE_BYTES: a model that ignored its max_tokens this
    # far does it again, so the next candidate is tried at once
    kind = "permanent"


class SummaryTooLong(MalformedResponse):
    kind = "permanent"  # a summary over its token budget × COMPACTOR_LLM_SUMMARY_SLACK


# --- timeout --------------------------------------------------------------------------------
class ModelTimeout(ModelCallError):
    kind = "timeout"  # connect/read timeout or the per-attempt deadline


# --- permanent ------------------------------------------------------------------------------
class AuthenticationFailed(ModelCallError):
    kind = "permanent"  # 401


class PermissionDenied(ModelCallError):
    kind = "permanent"  # 403


class NotFound(ModelCallError):
    kind = "permanent"  # 404 (unknown model or wrong base_url)


class QuotaExhausted(ModelCallError):
    kind = "permanent"  # insufficient_quota, spend limit, credit balance


class BadRequest(ModelCallError):
    kind = "permanent"  # 400 and other 4xx that are not overflows


class UnexpectedResponse(ModelCallError):
    kind = "permanent"  # valid JSON without the fields the API promises (a wrong endpoint)


class MissingCredentials(ModelCallError):
    kind = "permanent"  # the candidate needs an API key and none is configured


class SummaryNotSmaller(ModelCallError):
    kind = "permanent"  # the chunked path produced a summary not smaller than its input


class CandidateCoolingDown(ModelCallError):
    kind = "permanent"  # skipped: the circuit breaker has this candidate cooling down


class AttemptBudgetExhausted(ModelCallError):
    kind = "permanent"  # the job's HTTP attempt budget is spent


# --- overflow / cancelled -------------------------------------------------------------------
class ContextOverflow(ModelCallError):
    kind = "overflow"


class ModelCancelledError(ModelCallError):
    kind = "cancelled"

    def __init__(self, message: str = "Compaction cancelled", *, provider: str = "",
                 model: str = "") -> None:
        super().__init__(message, provider=provider, model=model)


# --- configuration / final ------------------------------------------------------------------
class InsecureEndpointError(ModelError, ConfigurationError):
    """A remote summarization endpoint over plain http on a host that is not loopback."""


class AllCandidatesFailedError(ModelError):
    """No candidate produced a summary. ``str()`` is the last error's text (what the job
    reports)."""

    def __init__(self, errors: list[ModelCallError], *, attempts: int = 0) -> None:
        self.errors = list(errors)
        self.attempts = attempts
        self.last_error = self.errors[-1] if self.errors else None
        text = str(self.last_error) if self.last_error else "Compaction failed: no available model"
        super().__init__(text)
