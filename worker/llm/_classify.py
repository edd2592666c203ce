"""HTTP status + provider error body -> the typed error the router acts on
(docs/rules.md "Model errors")."""

from __future__ import annotations

import json
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from api_client.contract.overflow import (
    is_overflow_text,
    is_retryable_error_text,
    parse_retry_after_ms,
)
from worker.llm.errors import (
    AuthenticationFailed,
    BadRequest,
    ContextOverflow,
    ModelCallError,
    NotFound,
    Overloaded,
    PermissionDenied,
    QuotaExhausted,
    RateLimited,
    ServerError,
    TransientHTTPError,
)
from worker.outbound.bounded_json import loads_bounded

__all__ = ["caused_by_request", "classify_http_error", "error_text", "retry_after_from_headers"]

# Quota and spend limits are not rate limits: waiting does not help (OpenAI answers 429 here).
_QUOTA = re.compile(
    r"insufficient_quota|exceeded your current quota|quota exceeded|billing|credit balance"
    r"|spend(ing)? limit|out of credits|payment required",
    re.IGNORECASE,
)


# Statuses that refuse one request's parameters (a max_tokens over the model's limit, a prompt
# over its window, a field it does not know): the same candidate serves the next request.
_REQUEST_STATUSES = frozenset({400, 413, 422})


def caused_by_request(err: ModelCallError) -> bool:
    """Did this request's own parameters cause ``err``? Such an error says nothing of the
    candidate's health: it never counts toward the circuit breaker every tenant shares (one
    tenant's absurd ``maxTokens`` must not switch the model off for the others). A quota or
    billing refusal is the candidate's, whatever its status."""
    return err.status in _REQUEST_STATUSES and not isinstance(err, QuotaExhausted)


def error_text(status: int, body: bytes) -> str:
    """The provider's own words: ``type code: message`` from the usual JSON error shapes.

    An empty body reads ``<status> status code (no body)``, the shape docs/rules.md "Model errors"
    reads as overflow.
    """
    if not body.strip():
        return f"{status} status code (no body)"
    try:
        data: Any = loads_bounded(body)
    except ValueError:  # not JSON, or nested past the bound: the text itself
        return body.decode("utf-8", "replace").strip()[:1000]
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, str):
        return error
    if not isinstance(error, dict):
        return json.dumps(data)[:1000]
    parts = [str(error[key]) for key in ("type", "code", "status")
             if isinstance(error.get(key), str | int)]
    message = error.get("message") or error.get("detail") or ""
    head = " ".join(parts)
    text = f"{head}: {message}" if head and message else head or str(message)
    return text or json.dumps(data)[:1000]


def retry_after_from_headers(headers: httpx.Headers, now_ms: int) -> int | None:
    """``retry-after-ms`` (ms), else ``retry-after`` as seconds or an HTTP-date."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0, round(float(raw_ms)))
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0, round(float(raw) * 1000))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0, round(when.timestamp() * 1000) - now_ms)


def classify_http_error(status: int, reason: str, headers: httpx.Headers, body: bytes, *,
                        provider: str, model: str, message: str | None = None) -> ModelCallError:
    """A non-success answer as a typed error. ``message`` replaces the default error text."""
    text = error_text(status, body)
    now_ms = int(time.time() * 1000)
    hint = retry_after_from_headers(headers, now_ms)
    if hint is None:
        hint = parse_retry_after_ms(text, now_ms)
    shown = message or (text if not body.strip() else f"{f'{status} {reason}'.strip()}: {text}")
    kwargs: dict[str, Any] = {"status": status, "retry_after_ms": hint, "provider": provider,
                              "model": model}
    if status != 429 and (status == 413 or is_overflow_text(text)):
        return ContextOverflow(shown, **kwargs)
    if _QUOTA.search(text) or status == 402:
        return QuotaExhausted(shown, **kwargs)
    return _by_status(status, text, hint)(shown, **kwargs)


def _by_status(status: int, text: str, hint: int | None) -> type[ModelCallError]:
    fixed: dict[int, type[ModelCallError]] = {
        401: AuthenticationFailed, 403: PermissionDenied, 404: NotFound, 429: RateLimited,
        408: TransientHTTPError, 409: TransientHTTPError, 529: Overloaded,
    }
    if status in fixed:
        return fixed[status]
    if "overloaded" in text.lower():
        return Overloaded
    if 500 <= status < 600:
        return ServerError
    if is_retryable_error_text(text) or hint is not None:
        return TransientHTTPError
    return BadRequest
