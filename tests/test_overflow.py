"""docs/rules.md "Model errors": every must-match / must-not-match example, as tables."""

from __future__ import annotations

from typing import Any

import pytest

from api_client.contract.overflow import (
    is_context_overflow,
    is_overflow_text,
    is_retryable_error_text,
    is_usage_limit_text,
    parse_retry_after_ms,
)

NOW = 1767225600000


def error(text: str) -> dict[str, Any]:
    return {"role": "assistant", "stopReason": "error", "errorMessage": text, "content": []}


def stop(input_: int, cache_read: int = 0, cache_write: int = 0,
         reason: str = "stop") -> dict[str, Any]:
    usage = {"input": input_, "output": 10, "cacheRead": cache_read, "cacheWrite": cache_write}
    return {"role": "assistant", "stopReason": reason, "usage": usage, "content": []}


OVERFLOW_TEXTS = [
    # one example per overflow pattern
    "prompt is too long: 213462 tokens > 200000 maximum",
    "input is too long for requested model",
    "Your input exceeds the context window of this model",
    "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)",
    "This model's maximum prompt length is 131072 but the request contains 537812 tokens",
    "Please reduce the length of the messages or completion",
    "This endpoint's maximum context length is 128000 tokens. "
    "However, you requested about 200000 tokens",
    "prompt token count of 140000 exceeds the limit of 128000",
    "the request exceeds the available context size, try increasing it",
    "tokens to keep from the initial prompt is greater than the context length",
    "invalid params, context window exceeds limit",
    "Your request exceeded model token limit: 262144 (requested: 300000)",
    "context_length_exceeded",
    "Context length exceeded",
    "Too many tokens in request",
    "token limit exceeded",
    "request_too_large",
    "Request exceeds the maximum size",  # pattern 17, Compactor only
    # further texts that must count as overflow
    "PROMPT IS TOO LONG",
    "400 status code (no body)",
    "413 (no body)",
    "413 status code (no body)",
    "400(no body)",
]

NOT_OVERFLOW_TEXTS = [
    "exceeds the limit of 5 requests per minute",  # Q19 (reference: true)
    "exceeds the limit of 100 per minute",
    "rate limit: exceeds the limit of 60",
    "429 status code (no body)",
    "Request failed: 400 status code (no body)",
    "overloaded_error",
    "Rate limit exceeded",
    "The maximum context length is unknown",
    "maximum context length is 8k tokens",
    "Your message exceeds the limit",
    "context-length-exceeded",
    "",
]


@pytest.mark.parametrize("text", OVERFLOW_TEXTS)
def test_overflow_texts_match(text: str) -> None:
    assert is_overflow_text(text)
    assert is_context_overflow(error(text))


@pytest.mark.parametrize("text", NOT_OVERFLOW_TEXTS)
def test_non_overflow_texts_do_not_match(text: str) -> None:
    assert not is_overflow_text(text)
    assert not is_context_overflow(error(text))


@pytest.mark.parametrize(
    ("message", "window", "expected"),
    [
        (stop(150_000, 60_000), 200_000, True),  # silent overflow, case B
        (stop(150_000, 50_000), 200_000, False),  # exactly equal is not above
        (stop(250_000, reason="toolUse"), 200_000, False),
        (stop(250_000, reason="length"), 200_000, False),
        (stop(250_000), 0, False),
        (stop(250_000), None, False),
        (stop(100, cache_write=250_000), 200_000, False),  # cacheWrite is ignored
        ({"stopReason": "error", "errorMessage": "", "usage": {"input": 10**9}}, 200_000, False),
        ({"stopReason": "aborted", "errorMessage": "prompt is too long"}, 200_000, False),
        ({"stopReason": "error"}, None, False),
        ({"stopReason": "stop", "usage": {"input": "many"}}, 10, False),
        ({"stopReason": "stop"}, 10, False),
    ],
)
def test_context_overflow_messages(message: dict[str, Any], window: int | None,
                                   expected: bool) -> None:
    assert is_context_overflow(message, window) is expected


RETRYABLE = [
    "overloaded_error",
    "Rate limit exceeded",
    "rate_limit_error",
    "usage limit reached",
    "Too Many Requests",
    "429 status code (no body)",
    "500 Internal Server Error",
    "502 Bad Gateway",
    "503 Service Unavailable",
    "504 Gateway Timeout",
    "service_unavailable",
    "Internal error encountered",
    "upstream server error",
    "Connection error.",
    "fetch failed",
    "retry delay exceeded",
    "Remote compaction failed (503 Service Unavailable)",
]

NOT_RETRYABLE = [
    "invalid_request_error: model not found",
    "401 Unauthorized",
    "400 Bad Request",
    "Summarization failed: Unknown error",
    "Remote compaction response missing summary",
    "socket hang up",
    "ECONNRESET",
    "timeout",
    "request id req_4291",  # Q18 (reference: true)
    "Summarization failed: 1500 tokens",  # Q18
    "prompt is too long: 215000 tokens > 200000 maximum",  # Q18
    "",
]


@pytest.mark.parametrize("text", RETRYABLE)
def test_retryable_texts(text: str) -> None:
    assert is_retryable_error_text(text)


@pytest.mark.parametrize("text", NOT_RETRYABLE)
def test_not_retryable_texts(text: str) -> None:
    assert not is_retryable_error_text(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("usage limit reached", True),
        ("usage_limit_reached", True),
        ("Usage-Limit hit", True),
        ("monthly limit_reached", True),
        ("Rate limit exceeded", False),
        ("", False),
    ],
)
def test_usage_limit_texts(text: str, expected: bool) -> None:
    assert is_usage_limit_text(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("429 retry-after-ms: 1500", 1500),
        ("Retry-After: 120", 120000),
        ("retry-after=2.5", 2500),
        ("Retry-After: 120, retry-after-ms: 5", 5),
        ("x-ratelimit-reset-ms: 800", 800),
        ("x-ratelimit-reset-ms: 1767225605000", 5000),
        ("x-ratelimit-reset: 30", 30000),
        ("x-ratelimit-reset: 1767225660", 60000),
        ("retry-after: Thu, 01 Jan 2026 00:01:00 GMT", None),
        ("retry-after: soon", None),
        ("no hint", None),
        # beyond the documented examples
        ("retry-after: 2026-01-01T00:00:10Z", 10000),
        ("retry-after: 2025-12-31T23:59:00Z", 0),  # a past date clamps at 0
        ("x-ratelimit-reset-ms: 1767225500000", 0),
        ("retry-after: soon; x-ratelimit-reset: 7", 7000),  # an unusable token falls through
        ("retry-after: 0x10", 16000),
        ("", None),
    ],
)
def test_parse_retry_after(text: str, expected: int | None) -> None:
    assert parse_retry_after_ms(text, NOW) == expected
