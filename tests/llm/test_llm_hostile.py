"""A hostile model over real loopback HTTP (tests/helpers/hostile_http.py): whatever it answers,
the worker reads a bounded body, keeps a bounded summary, parses with a bounded depth, never
fails with an untyped error, moves on to the next candidate, and quotes no credential.

Before these bounds (issue 33): a 100 MB body became a 104,857,531-character summary (345 MB
RSS), an endless stream grew the process to 5.4 GB until ``timeout_s``, JSON nested 100 000
deep raised ``RecursionError`` out of the router, and an echoed ``Bearer sk-…`` went into the
log lines and the trail.
"""

from __future__ import annotations

import logging
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from llm.llm_fakes import EXTRACTIVE, FAST, make_request, user

from api_client.contract.errors import ConfigurationError
from helpers.hostile_http import (
    MB,
    HostileServer,
    chat,
    deep_json,
    echo,
    endless,
    gzip_bomb,
    huge,
    json_answer,
)
from worker.llm import errors as E
from worker.llm.build import build_summarizer
from worker.llm.router import Router
from worker.llm.settings import LlmSettings, ModelCandidate
from worker.summary_requests import SummaryResult

KEY = "sk-proj-HOSTILE0123456789abcdef"
PLAIN_KEY = "local-model-key-42"  # no known shape: masked because it is configured
REQUEST = make_request([user("fix the importer")], max_tokens=1000)


@pytest.fixture
def server() -> Iterator[HostileServer]:
    srv = HostileServer()
    yield srv
    srv.close()


@pytest.fixture
def router_for(server: HostileServer) -> Iterator[Callable[..., Router]]:
    routers: list[Router] = []

    def make(provider: str = "openai", *, fallback: bool = True,
             price_input_per_mtok: float | None = None, **overrides: Any) -> Router:
        path = {"openai": "/v1", "anthropic": "", "remote": "/summarize"}[provider]
        key = PLAIN_KEY if provider == "anthropic" else KEY
        hostile = {"provider": provider, "model": "" if provider == "remote" else "hostile",
                   "base_url": server.url + path, "api_key": key, "timeout_s": 20.0,
                   "price_input_per_mtok": price_input_per_mtok}
        models = [hostile, EXTRACTIVE] if fallback else [hostile]
        settings = LlmSettings(models=[ModelCandidate.model_validate(m) for m in models],
                               **{**FAST, **overrides})
        routers.append(build_summarizer(settings))
        return routers[-1]

    yield make
    for router in routers:
        router.close()


def _fell_back(result: SummaryResult, error: type[E.ModelCallError]) -> str:
    assert result.provider == "extractive", result.trail
    trail = "\n".join(result.trail)
    assert error.__name__ in trail, trail
    return trail


# --- bytes ------------------------------------------------------------------------------------
def test_a_100_mb_answer_is_abandoned_at_the_byte_cap(server: HostileServer,
                                                      router_for: Callable[..., Router]) -> None:
    server.script(huge(100 * MB))
    tracemalloc.start()
    try:
        result = router_for().summarize(REQUEST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    trail = _fell_back(result, E.ResponseTooLarge)
    assert "over 4194304 bytes (COMPACTOR_LLM_MAX_RESPONSE_BYTES)" in trail
    assert peak < 16 * MB  # the whole body was 100 MB (and 345 MB of RSS)
    server.wait_answered(1)
    assert server.hung_up == [True] and server.sent[0] < 30 * MB


def test_an_endless_stream_stops_at_the_cap_not_at_the_timeout(
        server: HostileServer, router_for: Callable[..., Router]) -> None:
    server.script(endless())
    started = time.monotonic()
    result = router_for(llm_max_response_bytes=256 * 1024).summarize(REQUEST)
    assert time.monotonic() - started < 5  # timeout_s is 20 s
    assert "over 262144 bytes" in _fell_back(result, E.ResponseTooLarge)


def test_a_gzip_bomb_inflates_no_further_than_the_cap(server: HostileServer,
                                                      router_for: Callable[..., Router]) -> None:
    server.script(gzip_bomb(200 * MB))  # ~200 kB on the wire
    tracemalloc.start()
    try:
        result = router_for().summarize(REQUEST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _fell_back(result, E.ResponseTooLarge)
    assert peak < 16 * MB


def test_a_gzip_answer_within_the_cap_is_read(server: HostileServer,
                                              router_for: Callable[..., Router]) -> None:
    server.script(gzip_bomb(1000))
    result = router_for().summarize(REQUEST)
    assert result.provider == "openai" and result.text == "a" * 1000


# --- tokens -----------------------------------------------------------------------------------
def test_a_summary_over_its_budget_goes_to_the_next_candidate(
        server: HostileServer, router_for: Callable[..., Router]) -> None:
    server.script(json_answer(chat("word " * 200_000)))  # 1 MB: under the byte cap
    result = router_for().summarize(REQUEST)
    trail = _fell_back(result, E.SummaryTooLong)
    assert "over its budget of 1000 tokens × 1.5 (COMPACTOR_LLM_SUMMARY_SLACK)" in trail
    assert server.sent and len(server.requests) == 1  # permanent: not retried on that model


def test_a_summary_within_the_slack_is_kept(server: HostileServer,
                                            router_for: Callable[..., Router]) -> None:
    server.script(json_answer(chat("word " * 1400)))  # 1400 tokens: budget 1000 × 1.5
    assert router_for().summarize(REQUEST).provider == "openai"


# --- depth and shapes -------------------------------------------------------------------------
@pytest.mark.parametrize("provider", ["openai", "anthropic", "remote"])
def test_json_nested_100k_deep_is_a_transient_malformed_response(
        server: HostileServer, router_for: Callable[..., Router], provider: str) -> None:
    server.script(*[deep_json(100_000)] * 3)
    result = router_for(provider).summarize(REQUEST)
    trail = _fell_back(result, E.MalformedResponse)
    assert "nested 65+ levels deep; the limit is 64" in trail
    assert len(server.requests) == 3  # transient: retried on the same candidate first


def test_an_error_body_nested_100k_deep_is_still_classified(
        server: HostileServer, router_for: Callable[..., Router]) -> None:
    server.script(*[deep_json(100_000, status=500)] * 3)
    _fell_back(router_for().summarize(REQUEST), E.ServerError)


@pytest.mark.parametrize("body", [
    {"choices": [{"message": {"content": [{"type": "text", "text": 5}]}}]},
    {"choices": [{"message": {"content": [{"type": "text", "text": ["a"]}]}}]},
    {"choices": "none"},
    [1, 2, 3],
])
def test_answers_of_the_wrong_shape_are_typed(server: HostileServer,
                                              router_for: Callable[..., Router],
                                              body: Any) -> None:
    server.default = json_answer(body)
    result = router_for().summarize(REQUEST)
    assert result.provider == "extractive"
    assert result.trail and all("ModelCallError" not in line for line in result.trail)


def test_absurd_usage_counts_are_not_counted(server: HostileServer,
                                              router_for: Callable[..., Router]) -> None:
    body = {**chat("a summary"), "usage": {"prompt_tokens": 10**30, "completion_tokens": 7}}
    server.script(json_answer(body))
    result = router_for(price_input_per_mtok=3.0).summarize(REQUEST)
    assert (result.usage.input, result.usage.output) == (0, 7) and result.cost_usd == 0.0


class _Choking:
    """A provider whose parser chokes: what a bug in answer parsing raises."""

    uses_http = True

    def __init__(self, error: BaseException) -> None:
        self.candidate = ModelCandidate(provider="openai", model="choking")
        self.error = error

    def problem(self) -> None:
        return None

    def output_reserve(self, max_tokens: int, request: Any) -> int:
        return max_tokens

    def complete(self, request: Any, max_tokens: int, cancel: Any) -> Any:
        raise self.error


@pytest.mark.parametrize("error", [RecursionError("deep"), TypeError("x"), KeyError("k"),
                                   AttributeError("a"), ValueError("v")])
def test_any_parse_failure_is_a_malformed_response_never_an_internal_error(
        error: BaseException) -> None:
    from worker.llm.providers import ExtractiveProvider
    from worker.llm.retry_policy import RetryPolicy

    router = Router([_Choking(error), ExtractiveProvider(ModelCandidate(provider="extractive"))],
                    policy=RetryPolicy(base_delay_ms=1, max_backoff_ms=1, jitter=0.0))
    result = router.summarize(REQUEST)
    assert result.provider == "extractive"
    assert sum("MalformedResponse" in line for line in result.trail) == 4  # 3 attempts, gave up


# --- secrets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_echoed_credential_reaches_no_log_trail_or_error(
        server: HostileServer, router_for: Callable[..., Router], provider: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.default = echo(401)
    with pytest.raises(E.AllCandidatesFailedError) as failed:
        router_for(provider, fallback=False).summarize(REQUEST)
    seen = server.requests[0].headers
    assert KEY in seen.get("authorization", "") or PLAIN_KEY in seen.get("x-api-key", "")
    texts = [str(failed.value), caplog.text, *(str(e) for e in failed.value.errors)]
    assert "invalid request" in texts[0]  # the provider's words are kept ...
    for text in texts:
        assert KEY not in text and PLAIN_KEY not in text  # ... its echo of the key is not


# --- plain http -------------------------------------------------------------------------------
@pytest.mark.parametrize(("provider", "url", "allowed"), [
    ("openai", "http://10.1.2.3/v1", False),
    ("anthropic", "http://llm.internal:8080", False),
    ("openai", "http://127.0.0.1:8080/v1", True),
    ("anthropic", "http://localhost:8080", True),
    ("openai", "https://10.1.2.3/v1", True),
])
def test_plain_http_off_loopback_is_refused_unless_allowed(provider: str, url: str,
                                                           allowed: bool) -> None:
    def settings(**extra: Any) -> LlmSettings:
        return LlmSettings(models=[ModelCandidate(provider=provider, model="m",  # type: ignore[arg-type]
                                                  base_url=url, api_key="k", **extra)])

    if allowed:
        build_summarizer(settings()).close()
    else:
        with pytest.raises(E.InsecureEndpointError, match='"allow_http": true') as refused:
            build_summarizer(settings())
        assert isinstance(refused.value, ConfigurationError)
    build_summarizer(settings(allow_http=True)).close()  # the explicit opt-in
