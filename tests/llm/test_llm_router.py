"""The router over real HTTP: retries, waits, fallback order, overflow, budget, cooldown,
cancellation."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from llm.llm_fakes import (
    EXTRACTIVE,
    Act,
    FakeLLMServer,
    Flag,
    anthropic,
    cl100k,
    conversation_of,
    error,
    hang,
    make_request,
    ok,
    openai,
    raw,
    reset,
)

from worker.llm import errors as E
from worker.llm.cooldown import RedisCooldownStore
from worker.llm.router import Router
from worker.summary_requests import Usage

MakeRouter = Callable[..., Router]
RATE = {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}
OVERFLOW = {"error": {"message": "maximum context length is 8192 tokens",
                      "code": "context_length_exceeded"}}


def elapsed_since(started: float) -> float:
    return time.monotonic() - started


@pytest.mark.parametrize(
    ("faults", "min_wait"),
    [
        # the hint beats the 20/40 ms backoff
        ([error(429, RATE, headers={"retry-after-ms": "150"})] * 2, 0.3),
        ([error(429, RATE)] * 2, 0.06),  # backoff 20 + 40 ms
        ([error(500), error(502, "bad gateway")], 0.06),
        ([error(503, "", headers={"retry-after": "0.2"}),
          error(529, {"error": {"type": "overloaded_error"}})], 0.24),
        # malformed, empty
        ([raw(200, "{oops"), error(200, {"choices": [{"message": {"content": ""}}]})], 0.06),
        ([reset(), error(408, "")], 0.06),
    ],
)
def test_transient_failures_are_retried_with_backoff(llm_server: FakeLLMServer,
                                                     make_router: MakeRouter,
                                                     faults: list[Act], min_wait: float) -> None:
    router = make_router([openai(llm_server, "primary"), openai(llm_server, "secondary")])
    llm_server.script("primary", *faults)
    started = time.monotonic()
    result = router.summarize(make_request())
    assert elapsed_since(started) >= min_wait
    assert (result.model, result.provider, result.attempts) == ("primary", "openai", 3)
    assert result.text == "summary from primary #3"
    assert llm_server.keys() == ["primary"] * 3
    assert len(result.trail) == 2 and "retry in" in result.trail[0]


def test_a_retry_after_beyond_the_cap_moves_on_at_once(llm_server: FakeLLMServer,
                                                       make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "primary"), openai(llm_server, "secondary")])
    llm_server.script("primary", error(429, RATE, headers={"retry-after": "60"}))
    started = time.monotonic()
    result = router.summarize(make_request())
    assert elapsed_since(started) < 1.0
    assert llm_server.keys() == ["primary", "secondary"]
    assert result.model == "secondary" and result.attempts == 2
    assert "exceeds the 1000 ms cap" in result.trail[0]


def test_attempts_per_candidate_then_fallback(llm_server: FakeLLMServer,
                                              make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "primary"), anthropic(llm_server, "secondary")])
    llm_server.script("primary", *[error(503)] * 3)
    result = router.summarize(make_request())
    assert llm_server.keys() == ["primary"] * 3 + ["secondary"]
    assert (result.model, result.provider, result.attempts) == ("secondary", "anthropic", 4)
    assert "3 attempts failed" in result.trail[2]


@pytest.mark.parametrize(
    "fault",
    [
        error(401, {"error": {"message": "bad key"}}),
        error(403, {"error": {"message": "forbidden"}}),
        error(404, {"error": {"message": "no such model"}}),
        error(429, {"error": {"type": "insufficient_quota",
                              "message": "You exceeded your current quota"}}),
        error(400, {"error": {"type": "invalid_request_error", "message": "bad parameter"}}),
    ],
)
def test_permanent_errors_move_to_the_next_candidate_without_waiting(llm_server: FakeLLMServer,
                                                                     make_router: MakeRouter,
                                                                     fault: Act) -> None:
    router = make_router([openai(llm_server, "primary"), openai(llm_server, "secondary")],
                         llm_backoff_base_ms=2000)
    llm_server.script("primary", fault)
    started = time.monotonic()
    result = router.summarize(make_request())
    assert elapsed_since(started) < 1.0
    assert llm_server.keys() == ["primary", "secondary"]
    assert result.model == "secondary"


def test_a_hung_primary_costs_one_timeout(llm_server: FakeLLMServer,
                                          make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "primary", timeout_s=0.5),
                          openai(llm_server, "secondary")])
    llm_server.script("primary", hang(), hang(), hang())
    started = time.monotonic()
    result = router.summarize(make_request())
    assert 0.4 < elapsed_since(started) < 2.0
    assert llm_server.keys() == ["primary", "secondary"]
    assert result.model == "secondary" and result.attempts == 2
    assert "ModelTimeout" in result.trail[0]


def test_the_last_candidate_retries_after_a_timeout(llm_server: FakeLLMServer,
                                                    make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "only", timeout_s=0.3)])
    llm_server.script("only", hang())
    result = router.summarize(make_request())
    assert llm_server.keys() == ["only", "only"] and result.attempts == 2


def test_all_candidates_failing_raises_with_the_last_error(llm_server: FakeLLMServer,
                                                           make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a"), openai(llm_server, "b")],
                         llm_attempts_per_candidate=1)
    llm_server.script("a", error(503, "down"))
    llm_server.script("b", error(401, {"error": {"message": "Incorrect API key provided"}}))
    with pytest.raises(E.AllCandidatesFailedError) as caught:
        router.summarize(make_request())
    assert str(caught.value) == "401 Unauthorized: Incorrect API key provided"
    assert caught.value.attempts == 2
    assert [type(e) for e in caught.value.errors] == [E.ServerError, E.AuthenticationFailed]


def test_the_extractive_floor_catches_everything(llm_server: FakeLLMServer,
                                                 make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a"), EXTRACTIVE], llm_attempts_per_candidate=2)
    llm_server.script("a", error(500), error(500))
    conversation = [{"role": "user", "content": "Fix the parser in src/parse.py", "timestamp": 0}]
    result = router.summarize(make_request(conversation))
    assert (result.provider, result.model, result.attempts) == ("extractive", "extractive", 2)
    assert "Fix the parser in src/parse.py" in result.text


# --- overflow -------------------------------------------------------------------------------
def test_overflow_is_never_retried_and_goes_to_a_larger_window(llm_server: FakeLLMServer,
                                                               make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "small"),
                          openai(llm_server, "medium", context_window=100),
                          openai(llm_server, "large", context_window=200_000)])
    llm_server.script("small", error(400, OVERFLOW))
    result = router.summarize(make_request(prompt="x" * 4000))
    # "medium" is skipped without a request: the input does not fit its known window
    assert llm_server.keys() == ["small", "large"]
    assert result.model == "large"


def test_a_request_that_does_not_fit_skips_to_a_larger_window(llm_server: FakeLLMServer,
                                                              make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "small", context_window=1000),
                          openai(llm_server, "large", context_window=100_000)])
    result = router.summarize(make_request(prompt="x" * 20_000, chunkable=True))
    assert llm_server.keys() == ["large"] and result.chunks == 0


def test_chunked_path_when_nothing_larger_fits(llm_server: FakeLLMServer,
                                               make_router: MakeRouter) -> None:
    window, max_tokens = 2000, 200
    router = make_router([openai(llm_server, "small", context_window=window)])
    conversation = conversation_of(40, 400)  # about 4 000 tokens: twice the window
    request = make_request(conversation, chunkable=True, max_tokens=max_tokens,
                           previous="EARLIER SUMMARY")
    result = router.summarize(request)
    seen = llm_server.seen
    assert len(seen) >= 3 and result.chunks == len(seen) and result.attempts == len(seen)
    for i, request_seen in enumerate(seen):
        tokens = sum(cl100k(m["content"]) for m in request_seen.body["messages"])
        assert tokens + request_seen.body["max_tokens"] <= window * 0.9  # every chunk fits
        previous = "EARLIER SUMMARY" if i == 0 else f"summary from small #{i}"
        assert (f"<previous-summary>\n{previous}\n</previous-summary>"
                in request_seen.body["messages"][1]["content"])
    prompts = "".join(s.body["messages"][1]["content"] for s in seen)
    # every message went to some chunk, in order
    assert all(f"message {i}:" in prompts for i in range(40))
    assert result.text == f"summary from small #{len(seen)}"  # the last chunk's summary
    # summed over the chunks
    assert result.usage == Usage(input=100 * len(seen), output=20 * len(seen))


def test_overflow_with_an_unknown_window_shrinks_the_input(llm_server: FakeLLMServer,
                                                           make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m")])
    llm_server.script("m", error(400, {"error": {"message": "the request exceeds the available "
                                                             "context size"}}))
    result = router.summarize(make_request(conversation_of(20, 400), chunkable=True,
                                           max_tokens=100))
    sizes = [len(s.body["messages"][1]["content"]) for s in llm_server.seen]
    assert len(sizes) >= 3 and all(size < sizes[0] * 0.75 for size in sizes[1:])
    assert result.chunks == len(sizes) - 1


def test_a_chunk_summary_not_smaller_than_its_input_is_rejected(llm_server: FakeLLMServer,
                                                                make_router: MakeRouter) -> None:
    # slack: a summary this long is otherwise refused first, as over its budget (SummaryTooLong)
    router = make_router([openai(llm_server, "small", context_window=2000), EXTRACTIVE],
                         llm_summary_slack=100.0)
    llm_server.script("small", ok("blah " * 2000))
    result = router.summarize(make_request(conversation_of(40, 400), chunkable=True,
                                           max_tokens=200))
    assert result.provider == "extractive"
    assert llm_server.count("small") == 1  # the first chunk's summary was already too large
    assert any("SummaryNotSmaller" in line for line in result.trail)


def test_an_unsplittable_request_that_fits_nowhere_fails_over(llm_server: FakeLLMServer,
                                                              make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "small", context_window=500), EXTRACTIVE])
    result = router.summarize(make_request(prompt="y" * 10_000, purpose="short"))
    assert llm_server.seen == [] and result.provider == "extractive"


def test_max_tokens_respect_the_candidate_limits(llm_server: FakeLLMServer,
                                                 make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a", max_output_tokens=300)])
    router.summarize(make_request(max_tokens=13107))
    router2 = make_router([openai(llm_server, "b", context_window=8000)])
    router2.summarize(make_request(max_tokens=13107))
    assert [s.body["max_tokens"] for s in llm_server.seen] == [300, 2000]


# --- budget, cooldown -----------------------------------------------------------------------
def test_the_job_budget_caps_http_attempts_and_leaves_the_floor(llm_server: FakeLLMServer,
                                                                make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a"), openai(llm_server, "b"), EXTRACTIVE],
                         llm_attempt_budget=4)
    llm_server.script("a", *[error(503)] * 3)
    llm_server.script("b", *[error(503)] * 3)
    job = router.for_job()
    result = job.summarize(make_request())
    assert llm_server.keys() == ["a", "a", "a", "b"]
    assert result.provider == "extractive" and result.attempts == 4
    second = job.summarize(make_request())  # the budget is per job: nothing left for HTTP
    assert len(llm_server.seen) == 4 and second.provider == "extractive"
    # a fresh call outside the job has its own budget
    assert router.summarize(make_request()).model == "a"


def test_cooldown_is_shared_between_routers_through_redis(llm_server: FakeLLMServer,
                                                          make_router: MakeRouter,
                                                          redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    models = [openai(llm_server, "flaky"), openai(llm_server, "steady")]
    first = make_router(models, client, llm_failure_threshold=2, llm_cooldown_s=30)
    second = make_router(models, redis.Redis.from_url(redis_url), llm_failure_threshold=2,
                         llm_cooldown_s=30)
    llm_server.script("flaky", error(503), error(503), error(503))
    result = first.summarize(make_request())
    assert llm_server.keys() == ["flaky", "flaky", "steady"]  # the 2nd failure opened the breaker
    assert "circuit breaker opened" in result.trail[1]
    label = "openai|flaky|" + llm_server.url + "/v1"
    _, cool = RedisCooldownStore(client, prefix="compactor:llm:")._keys(label)
    ttl = client.pttl(cool)
    assert 25_000 < ttl <= 30_000
    result = second.summarize(make_request())
    # skipped by the other router
    assert llm_server.keys() == ["flaky", "flaky", "steady", "steady"]
    assert result.trail[0].startswith("openai/flaky: skipped (cooling down")
    client.close()


def test_success_resets_the_failure_count(llm_server: FakeLLMServer,
                                          make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a"), openai(llm_server, "b")],
                         llm_failure_threshold=2)
    llm_server.script("a", error(503), ok(), error(503), ok())
    router.summarize(make_request())
    router.summarize(make_request())
    assert llm_server.keys() == ["a"] * 4


# --- cancellation ---------------------------------------------------------------------------
def test_cancel_during_a_hung_call(llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a", timeout_s=30), openai(llm_server, "b")])
    llm_server.script("a", hang())
    flag = Flag()
    flag.cancel_after(0.3)
    started = time.monotonic()
    with pytest.raises(E.ModelCancelledError):
        router.summarize(make_request(), flag)
    assert elapsed_since(started) < 1.3
    assert llm_server.keys() == ["a"]  # no fallback after a cancel
    deadline = time.monotonic() + 2
    while not llm_server.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert llm_server.closed == ["a"]


def test_cancel_during_a_backoff_wait(llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a")], llm_max_wait_ms=60_000)
    llm_server.script("a", error(429, RATE, headers={"retry-after": "30"}))
    flag = Flag()
    flag.cancel_after(0.3)
    started = time.monotonic()
    with pytest.raises(E.ModelCancelledError):
        router.summarize(make_request(), flag)
    assert elapsed_since(started) < 1.3 and llm_server.keys() == ["a"]


def test_an_already_cancelled_job_makes_no_request(llm_server: FakeLLMServer,
                                                   make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "a")])
    flag = Flag()
    flag.event.set()
    with pytest.raises(E.ModelCancelledError):
        router.summarize(make_request(), flag)
    assert llm_server.seen == []


def test_a_single_message_larger_than_the_window_is_clipped(llm_server: FakeLLMServer,
                                                            make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "small", context_window=2000)])
    giant = {"role": "user", "content": "HEAD " + "z" * 60_000 + " TAIL", "timestamp": 0}
    conversation = [*conversation_of(4, 400), giant, *conversation_of(4, 400)]
    result = router.summarize(make_request(conversation, chunkable=True, max_tokens=200))
    prompts = [s.body["messages"][1]["content"] for s in llm_server.seen]
    assert all(cl100k(p) + 200 <= 2000 * 0.9 for p in prompts)
    clipped = [p for p in prompts if "chars omitted to fit the summarizer" in p]
    # head and tail kept
    assert len(clipped) == 1 and "HEAD " in clipped[0] and " TAIL" in clipped[0]
    assert result.chunks == len(prompts) >= 3
