"""Classifiers for model errors (docs/rules.md "Model errors"). Pure, stdlib only.

Shared by the client (a platform asks "is this assistant message an overflow?") and the
workers (the router decides whether a failed call is an overflow, transient or permanent).
Every pattern is case-insensitive and searched anywhere unless stated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

__all__ = [
    "is_context_overflow",
    "is_overflow_text",
    "is_retryable_error_text",
    "is_usage_limit_text",
    "parse_retry_after_ms",
]

_I = re.IGNORECASE

# The "too long" phrasings of docs/rules.md "Model errors" but one, which carries the Q19 guard.
_OVERFLOW = re.compile(
    "|".join(
        (
            r"prompt is too long",
            r"input is too long for requested model",
            r"exceeds the context window",
            r"input token count.*exceeds the maximum",
            r"maximum prompt length is \d+",
            r"reduce the length of the messages",
            r"maximum context length is \d+ tokens",
            r"exceeds the available context size",
            r"greater than the context length",
            r"context window exceeds limit",
            r"exceeded model token limit",
            r"context[_ ]length[_ ]exceeded",
            r"too many tokens",
            r"token limit exceeded",
            r"request_too_large",
            r"request exceeds the maximum size",
        )
    ),
    _I,
)
_EXCEEDS_LIMIT = re.compile(r"exceeds the limit of \d+", _I)
# Q19: "exceeds the limit of 5 requests per minute" is rate limiting, not overflow.
_RATE_WORDS = re.compile(r"\brequests\b|rate.?limit|\bper (second|minute|hour|day)\b", _I)
# Cerebras and Mistral answer an overflow with an empty 400/413; anchored at the start.
_NO_BODY = re.compile(r"^4(00|13)\s*(status code)?\s*\(no body\)", _I)

# Transient errors with Q18: the status codes only as whole numbers.
_RETRYABLE = re.compile(
    r"overloaded|rate.?limit|usage.?limit|too many requests|\b(429|500|502|503|504)\b"
    r"|service.?unavailable|server error|internal error|connection.?error|fetch failed|retry delay",
    _I,
)
_USAGE_LIMIT = re.compile(r"usage.?limit|usage_limit_reached|limit_reached", _I)

_RETRY_AFTER_MS = re.compile(r"retry-after-ms\s*[:=]\s*(\d+)", _I)
_RETRY_AFTER = re.compile(r"retry-after\s*[:=]\s*([^\s,;]+)", _I)
_RESET_MS = re.compile(r"x-ratelimit-reset-ms\s*[:=]\s*(\d+)", _I)
_RESET_S = re.compile(r"x-ratelimit-reset\s*[:=]\s*(\d+)", _I)
# What JavaScript's Number() accepts for a token without whitespace (decimal, exponent, hex).
_JS_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?|0x[0-9a-f]+|0o[0-7]+|0b[01]+", _I)


def is_overflow_text(text: str) -> bool:
    """The error-text case of an overflow alone (no stop reason, no usage)."""
    if not text:
        return False
    if _OVERFLOW.search(text):
        return True
    if _EXCEEDS_LIMIT.search(text) and not _RATE_WORDS.search(text):
        return True
    return _NO_BODY.match(text) is not None


def is_context_overflow(message: Mapping[str, Any], context_window: int | None = None) -> bool:
    """Does this assistant message report a context overflow?

    Case A needs ``stopReason == "error"`` and a matching ``errorMessage``; case B (silent
    overflow) needs ``stopReason == "stop"``, a truthy window and input + cacheRead above it.
    """
    stop = message.get("stopReason")
    if stop == "error":
        error = message.get("errorMessage")
        return isinstance(error, str) and is_overflow_text(error)
    if stop != "stop" or not context_window:
        return False
    usage = message.get("usage")
    if not isinstance(usage, Mapping):
        return False
    return _number(usage.get("input")) + _number(usage.get("cacheRead")) > context_window


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return float(value)


def is_retryable_error_text(text: str) -> bool:
    """Q18 applied: does this error text describe a transient failure?"""
    return bool(text) and _RETRYABLE.search(text) is not None


def is_usage_limit_text(text: str) -> bool:
    """An account usage limit (another credential may help)."""
    return bool(text) and _USAGE_LIMIT.search(text) is not None


def parse_retry_after_ms(text: str, now_ms: int) -> int | None:
    """The retry hint inside an error text, in ms (clamped at 0), or None.

    ``now_ms`` is the current epoch time in ms; it is a parameter so the function stays pure.
    """
    if not text:
        return None
    found = _RETRY_AFTER_MS.search(text)
    if found:
        return int(found.group(1))
    found = _RETRY_AFTER.search(text)
    if found:
        value = _retry_after_token(found.group(1), now_ms)
        if value is not None:
            return value
    found = _RESET_MS.search(text)
    if found:
        number = int(found.group(1))
        return max(0, number - now_ms) if number > 10**12 else number
    found = _RESET_S.search(text)
    if found:
        number = int(found.group(1))
        return max(0, number * 1000 - now_ms) if number > 10**9 else number * 1000
    return None


def _retry_after_token(token: str, now_ms: int) -> int | None:
    if _JS_NUMBER.fullmatch(token):
        seconds = float(int(token, 0)) if token[:2].lower() in ("0x", "0o", "0b") else float(token)
        if math.isfinite(seconds):
            return max(0, round(seconds * 1000))
        return None
    try:
        when = datetime.fromisoformat(token)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None  # JavaScript would read it as local time; we do not guess a zone
    return max(0, round(when.timestamp() * 1000) - now_ms)
