"""Providers over real HTTP against the loopback server: wire shapes, usage, typed errors,
cancellation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from llm.llm_fakes import (
    Act,
    FakeLLMServer,
    Flag,
    anthropic,
    error,
    hang,
    make_request,
    ok,
    openai,
    raw,
    remote,
    reset,
    trickle,
)

from worker.llm import errors as E
from worker.llm._http import make_client
from worker.llm.build import build_providers, build_summarizer
from worker.llm.providers import HttpContext, Provider
from worker.llm.settings import LlmSettings, ModelCandidate
from worker.summary_requests import Usage


@pytest.fixture
def http() -> Iterator[HttpContext]:
    client = make_client()
    yield HttpContext(client, connect_timeout_s=1.0)
    client.close()


def provider(http: HttpContext, spec: dict[str, Any], **settings: Any) -> Provider:
    config = LlmSettings(models=[ModelCandidate.model_validate(spec)], **settings)
    return build_providers(config, http, environ={"MY_KEY": "sk-from-env"})[0]


# --- request bodies (docs/compaction.md "Summary prompts") -----------------------------
def test_openai_body_is_system_plus_one_user_message(llm_server: FakeLLMServer,
                                                     http: HttpContext) -> None:
    p = provider(http, openai(llm_server, "gpt-x", reasoning=True, api_key_env="MY_KEY"))
    reply = p.complete(make_request(prompt="the prompt", max_tokens=777), 777, None)
    seen = llm_server.seen[-1]
    assert seen.path == "/v1/chat/completions"
    assert seen.body["messages"] == [
        {"role": "system", "content": "You summarise conversations."},
        {"role": "user", "content": "the prompt"},
    ]
    assert seen.body["max_tokens"] == 777
    assert seen.body["reasoning_effort"] == "high"
    assert seen.body["stream"] is False
    assert seen.headers["authorization"] == "Bearer sk-from-env"
    assert reply.text == "summary from gpt-x #1"
    assert reply.usage == Usage(input=100, output=20)


@pytest.mark.parametrize(
    ("candidate_reasoning", "request_reasoning", "expected"),
    [(True, True, "high"), (True, False, None), (False, True, None), (False, False, None)],
)
def test_openai_reasoning_only_when_both_want_it(llm_server: FakeLLMServer, http: HttpContext,
                                                 candidate_reasoning: bool, request_reasoning: bool,
                                                 expected: str | None) -> None:
    p = provider(http, openai(llm_server, "m", reasoning=candidate_reasoning))
    p.complete(make_request(reasoning=request_reasoning), 100, None)
    assert llm_server.seen[-1].body.get("reasoning_effort") == expected
    assert "authorization" not in llm_server.seen[-1].headers  # no key configured: none sent


def test_openai_token_param_and_cached_usage(llm_server: FakeLLMServer, http: HttpContext) -> None:
    p = provider(http, openai(llm_server, "m", token_param="max_completion_tokens"))
    llm_server.script("m", ok("s", input=1000, output=50, cached=600))
    reply = p.complete(make_request(), 321, None)
    body = llm_server.seen[-1].body
    assert body["max_completion_tokens"] == 321 and "max_tokens" not in body
    assert reply.usage == Usage(input=400, output=50, cache_read=600)


def test_anthropic_body_headers_thinking_and_usage(llm_server: FakeLLMServer,
                                                   http: HttpContext) -> None:
    p = provider(http, anthropic(llm_server, "claude-x", reasoning=True,
                                 thinking_budget_tokens=2048))
    llm_server.script("claude-x", ok("the summary", input=10, output=5, cache_read=7,
                                     cache_write=3))
    reply = p.complete(make_request(prompt="PROMPT"), 1000, None)
    seen = llm_server.seen[-1]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == "sk-ant-test"
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.body["system"] == "You summarise conversations."
    assert seen.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "PROMPT"}]}]
    assert seen.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert seen.body["max_tokens"] == 1000 + 2048  # the thinking budget comes on top of the answer
    assert reply.text == "the summary"  # thinking blocks are not part of the summary
    assert reply.usage == Usage(input=10, output=5, cache_read=7, cache_write=3)


def test_anthropic_without_reasoning_sends_no_thinking(llm_server: FakeLLMServer,
                                                       http: HttpContext) -> None:
    p = provider(http, anthropic(llm_server, "claude-x", reasoning=True))
    p.complete(make_request(purpose="branch", reasoning=False), 2048, None)
    assert "thinking" not in llm_server.seen[-1].body
    assert llm_server.seen[-1].body["max_tokens"] == 2048


def test_anthropic_without_key_is_refused_before_any_request(llm_server: FakeLLMServer,
                                                             http: HttpContext) -> None:
    spec = anthropic(llm_server, "claude-x")
    del spec["api_key"]
    p = provider(http, {**spec, "api_key_env": "UNSET_VARIABLE"})
    assert isinstance(p.problem(), E.MissingCredentials)


def test_remote_endpoint_shape_and_auth_header(llm_server: FakeLLMServer,
                                               http: HttpContext) -> None:
    p = provider(http, remote(llm_server), remote_auth_header="X-Token: s3cret")
    reply = p.complete(make_request(prompt="P"), 100, None)
    seen = llm_server.seen[-1]
    assert seen.body == {"systemPrompt": "You summarise conversations.", "prompt": "P"}
    assert seen.headers["x-token"] == "s3cret"
    assert reply.text == "summary from /summarize #1"


@pytest.mark.parametrize(
    ("act", "error_type", "text"),
    [
        (error(503, "busy"), E.ServerError, "Remote compaction failed (503 Service Unavailable)"),
        (error(200, {"shortSummary": "x"}), E.UnexpectedResponse,
         "Remote compaction response missing summary"),
        (error(200, {"summary": 3}), E.UnexpectedResponse,
         "Remote compaction response missing summary"),
        (error(200, {"summary": "  "}), E.EmptyOutput,
         "Remote compaction returned an empty summary"),
    ],
)
def test_remote_endpoint_failures(llm_server: FakeLLMServer, http: HttpContext, act: Act,
                                  error_type: type[Exception], text: str) -> None:
    p = provider(http, remote(llm_server))
    llm_server.script("/summarize", act)
    with pytest.raises(error_type) as caught:
        p.complete(make_request(), 100, None)
    assert str(caught.value) == text


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://summarizer.example.com/v1", True),
        ("http://127.0.0.1:9/x", True),
        ("http://localhost/x", True),
        ("http://[::1]:80/x", True),
        ("http://summarizer.example.com/v1", False),
        ("http://10.0.0.5/x", False),
    ],
)
def test_remote_endpoint_requires_https_off_loopback(url: str, allowed: bool) -> None:
    settings = LlmSettings(models=[ModelCandidate(provider="remote", base_url=url)])
    if allowed:
        build_summarizer(settings).close()
    else:
        with pytest.raises(E.InsecureEndpointError):
            build_summarizer(settings)


# --- error mapping --------------------------------------------------------------------------
OPENAI_ERR = {"error": {"message": "Rate limit reached", "type": "requests",
                        "code": "rate_limit_exceeded"}}
ERROR_TABLE = [
    # (openai|anthropic, act, error type, retry_after_ms)
    ("openai", error(429, OPENAI_ERR, headers={"retry-after": "2"}), E.RateLimited, 2000),
    ("openai", error(429, OPENAI_ERR, headers={"retry-after-ms": "150", "retry-after": "1"}),
     E.RateLimited, 150),
    ("openai", error(429, "slow down, retry-after: 3"), E.RateLimited, 3000),
    ("openai", error(429, {"error": {"message": "You exceeded your current quota",
                                     "type": "insufficient_quota", "code": "insufficient_quota"}}),
     E.QuotaExhausted, None),
    ("openai", error(400, {"error": {"message": "This model's maximum context length is 8192 "
                                     "tokens. However, your messages resulted in 9000 tokens.",
                                     "code": "context_length_exceeded"}}),
     E.ContextOverflow, None),
    ("openai", error(400, {"error": {"code": 400, "message": "the request exceeds the available "
                                     "context size, try increasing it",
                                     "type": "exceed_context_size_error"}}),
     E.ContextOverflow, None),  # llama.cpp server
    # Cerebras/Mistral: 400 with no body (docs/rules.md "Model errors")
    ("openai", error(400), E.ContextOverflow, None),
    ("openai", error(400, {"error": {"message": "Unknown parameter: foo",
                                     "type": "invalid_request_error"}}),
     E.BadRequest, None),
    ("openai", error(422, {"detail": "bad field"}), E.BadRequest, None),
    ("openai", error(401, {"error": {"message": "Incorrect API key"}}),
     E.AuthenticationFailed, None),
    ("openai", error(403, {"error": {"message": "forbidden"}}), E.PermissionDenied, None),
    ("openai", error(404, {"error": {"message": "model not found"}}), E.NotFound, None),
    ("openai", error(408, "timeout"), E.TransientHTTPError, None),
    ("openai", error(409, "conflict"), E.TransientHTTPError, None),
    ("openai", error(500, "oops"), E.ServerError, None),
    ("openai", error(502, "<html>bad gateway</html>"), E.ServerError, None),
    ("openai", error(503, "", headers={"retry-after": "Thu, 01 Jan 2099 00:00:00 GMT"}),
     E.ServerError, "future"),
    ("openai", raw(200, "{not json"), E.MalformedResponse, None),
    ("openai", error(200, {"choices": []}), E.UnexpectedResponse, None),
    ("openai", error(200, {"choices": [{"message": {"role": "assistant", "content": ""}}]}),
     E.EmptyOutput, None),
    ("openai", error(200, {"choices": [{"message": {"role": "assistant", "content": None}}]}),
     E.EmptyOutput, None),
    ("openai", error(200, {"error": {"message": "upstream failed", "code": 502}}),
     E.ServerError, None),
    ("anthropic", error(529, {"type": "error", "error": {"type": "overloaded_error",
                                                         "message": "Overloaded"}}),
     E.Overloaded, None),
    ("anthropic", error(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": "prompt is too long: 213462 "
                                                                    "tokens > 200000 maximum"}}),
     E.ContextOverflow, None),
    ("anthropic", error(413, {"type": "error", "error": {"type": "request_too_large",
                                                         "message": "Request exceeds the "
                                                                    "maximum size"}}),
     E.ContextOverflow, None),
    ("anthropic", error(400, {"type": "error", "error": {"type": "invalid_request_error", "message":
                                                         "Your credit balance is too low to access "
                                                         "the API"}}),
     E.QuotaExhausted, None),
    ("anthropic", error(429, {"type": "error", "error": {"type": "rate_limit_error",
                                                         "message": "slow"}},
                        headers={"retry-after": "7"}), E.RateLimited, 7000),
    ("anthropic", error(200, {"type": "message",
                              "content": [{"type": "thinking", "thinking": "only"}]}),
     E.EmptyOutput, None),
    ("anthropic", error(200, {"type": "message"}), E.UnexpectedResponse, None),
]


@pytest.mark.parametrize(("kind", "act", "error_type", "retry_after"), ERROR_TABLE)
def test_error_mapping(llm_server: FakeLLMServer, http: HttpContext, kind: str, act: Act,
                       error_type: type[E.ModelCallError], retry_after: int | str | None) -> None:
    spec = openai(llm_server, "m") if kind == "openai" else anthropic(llm_server, "m")
    llm_server.script("m", act)
    with pytest.raises(E.ModelCallError) as caught:
        provider(http, spec).complete(make_request(), 100, None)
    err = caught.value
    assert type(err) is error_type, str(err)
    assert (err.provider, err.model) == (kind, "m")
    assert err.status == (act.status if act.status >= 400 else err.status)
    if retry_after == "future":
        assert err.retry_after_ms is not None and err.retry_after_ms > 10**9
    else:
        assert err.retry_after_ms == retry_after


def test_reset_and_refused_connections_are_connection_failures(llm_server: FakeLLMServer,
                                                               http: HttpContext) -> None:
    llm_server.script("m", reset())
    with pytest.raises(E.ConnectionFailed):
        provider(http, openai(llm_server, "m")).complete(make_request(), 100, None)
    closed = openai(llm_server, "m", base_url="http://127.0.0.1:9/v1")  # nothing listens on port 9
    with pytest.raises(E.ConnectionFailed):
        provider(http, closed).complete(make_request(), 100, None)


def test_hung_server_times_out_at_the_attempt_deadline(llm_server: FakeLLMServer,
                                                       http: HttpContext) -> None:
    llm_server.script("m", hang())
    started = time.monotonic()
    with pytest.raises(E.ModelTimeout):
        provider(http, openai(llm_server, "m", timeout_s=0.5)).complete(make_request(), 100, None)
    assert 0.4 < time.monotonic() - started < 2.0


def test_slow_stream_is_bounded_by_the_deadline_not_per_read(llm_server: FakeLLMServer,
                                                             http: HttpContext) -> None:
    # Each piece arrives well within a read timeout, but the whole body would take ~3 s.
    llm_server.script("m", trickle("x" * 300, pieces=30, interval=0.1))
    started = time.monotonic()
    with pytest.raises(E.ModelTimeout):
        provider(http, openai(llm_server, "m", timeout_s=0.8)).complete(make_request(), 100, None)
    assert time.monotonic() - started < 2.0


def test_slow_stream_within_the_deadline_succeeds(llm_server: FakeLLMServer,
                                                  http: HttpContext) -> None:
    llm_server.script("m", trickle("slowly", pieces=5, interval=0.05))
    reply = provider(http, openai(llm_server, "m", timeout_s=2.0)).complete(
        make_request(), 100, None)
    assert reply.text == "slowly"


@pytest.mark.parametrize("act", [hang(), trickle("x" * 1000, pieces=100, interval=0.1)])
def test_cancellation_aborts_the_http_call(llm_server: FakeLLMServer, http: HttpContext,
                                           act: Act) -> None:
    llm_server.script("m", act)
    flag = Flag()
    flag.cancel_after(0.3)
    started = time.monotonic()
    with pytest.raises(E.ModelCancelledError):
        provider(http, openai(llm_server, "m", timeout_s=30)).complete(make_request(), 100, flag)
    assert time.monotonic() - started < 1.3
    deadline = time.monotonic() + 2
    while "m" not in llm_server.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert llm_server.closed == ["m"]  # the server saw the connection go away


def test_client_is_reused_after_a_cancelled_call(llm_server: FakeLLMServer,
                                                 http: HttpContext) -> None:
    llm_server.script("m", hang())
    flag = Flag()
    flag.cancel_after(0.1)
    p = provider(http, openai(llm_server, "m"))
    with pytest.raises(E.ModelCancelledError):
        p.complete(make_request(), 100, flag)
    assert p.complete(make_request(), 100, None).text == "summary from m #2"
