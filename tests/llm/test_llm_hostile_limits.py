"""One tenant's request parameters never switch a model off for the others (issue 39 M2), over
real loopback HTTP with the breaker shared through a real Redis.

Before: ``maxTokens`` had no upper bound (``1e23`` went to the model as it was) and the model's
400 for it counted as a failure of the candidate: six such summaries cooled the shared candidate
for 60 s and another tenant's compaction came back from the extractive fallback.
"""

from __future__ import annotations

import pytest
import redis
from llm.llm_fakes import EXTRACTIVE, FakeLLMServer, error, make_request, ok, openai
from llm.test_llm_router import MakeRouter

from worker.llm._classify import caused_by_request
from worker.llm.errors import (
    AllCandidatesFailedError,
    BadRequest,
    ContextOverflow,
    NotFound,
    ServerError,
)
from worker.llm.settings import DEFAULT_MAX_OUTPUT_TOKENS

TOO_LARGE = {"error": {"message": "max_tokens is too large: 100000000000000000000000. This "
                                  "model supports at most 16384 completion tokens",
                       "type": "invalid_request_error", "param": "max_tokens"}}


def _sent_max_tokens(body: dict[str, object]) -> int:
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    assert isinstance(value, int)
    return value


def test_a_request_caused_4xx_never_opens_the_shared_breaker(
        llm_server: FakeLLMServer, make_router: MakeRouter, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    models = [openai(llm_server, "shared"), EXTRACTIVE]
    hostile = make_router(models, client, llm_failure_threshold=2, llm_cooldown_s=60)
    other = make_router(models, redis.Redis.from_url(redis_url), llm_failure_threshold=2,
                        llm_cooldown_s=60)
    llm_server.script("shared", *[error(400, TOO_LARGE)] * 6, ok("the other tenant's summary"))
    for _ in range(6):  # six hostile summaries: each the model's 400, then the floor
        assert hostile.summarize(make_request(max_tokens=1000)).provider == "extractive"
    assert not hostile.cooldown.is_cooling("openai|shared|" + llm_server.url + "/v1")
    served = other.summarize(make_request())
    assert served.provider == "openai" and served.text == "the other tenant's summary"
    client.close()


def test_the_breaker_still_counts_what_the_candidate_causes(
        llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "gone"), EXTRACTIVE], llm_failure_threshold=2)
    llm_server.script("gone", error(404, {"error": {"message": "no such model"}}),
                      error(404, {"error": {"message": "no such model"}}))
    router.summarize(make_request())
    router.summarize(make_request())
    assert router.cooldown.is_cooling("openai|gone|" + llm_server.url + "/v1")


@pytest.mark.parametrize(("err", "by_request"), [
    (BadRequest("x", status=400), True), (BadRequest("x", status=422), True),
    (BadRequest("x", status=413), True), (NotFound("x", status=404), False),
    (ServerError("x", status=500), False), (BadRequest("x", status=405), False)])
def test_caused_by_request(err: BadRequest, by_request: bool) -> None:
    assert caused_by_request(err) is by_request


def test_max_tokens_is_clamped_to_the_candidates_output_limit(
        llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    """Clamped, not refused: the API cannot know which candidate answers (each has its own
    limit, a fallback may have a smaller one); a summary that asked for more than a model can
    write gets what that model can write."""
    configured = make_router([openai(llm_server, "small", max_output_tokens=4096)])
    unconfigured = make_router([openai(llm_server, "big")])
    configured.summarize(make_request(max_tokens=10**23))
    unconfigured.summarize(make_request(max_tokens=10**23))
    small, big = llm_server.seen
    assert _sent_max_tokens(small.body) == 4096
    assert _sent_max_tokens(big.body) == DEFAULT_MAX_OUTPUT_TOKENS


def test_a_prompt_over_the_window_is_refused_not_sent(
        llm_server: FakeLLMServer, make_router: MakeRouter) -> None:
    """A summarize job's request cannot be split: over a candidate's configured window it is
    refused with a typed error before any byte goes out (the tenant's budget bounds a prompt
    to a candidate without a configured window: tests/server/test_server_hostile_quota.py)."""
    router = make_router([openai(llm_server, "small", context_window=8_192)])
    request = make_request(prompt="word " * 400_000, max_tokens=1000)
    with pytest.raises(AllCandidatesFailedError) as failed:
        router.summarize(request)
    assert isinstance(failed.value.errors[0], ContextOverflow)
    assert llm_server.seen == []
