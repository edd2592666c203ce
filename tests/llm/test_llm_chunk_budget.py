"""The job's attempt budget follows the chunk plan: each answered chunk gives its attempt back,
so a session of any length can be summarised; failed attempts draw on the configured budget.
Over real HTTP to the loopback server."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from llm.llm_fakes import FakeLLMServer, conversation_of, error, make_request, openai

from worker.llm.errors import AllCandidatesFailedError
from worker.llm.router import Router

MakeRouter = Callable[..., Router]
CONVERSATION = conversation_of(60, 400)  # about 5 000 tokens: 5 chunks at a 1 500 window


def test_more_chunks_than_the_budget_still_summarise(llm_server: FakeLLMServer,
                                                      make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m", context_window=1500)], llm_attempt_budget=2)
    llm_server.script("m", error(503))  # one retry on top of the plan: from the budget
    job = router.for_job()
    result = job.summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    assert result.chunks >= 4 > 2
    assert result.attempts == len(llm_server.seen) == result.chunks + 1
    assert job.budget.spent == 1 and job.budget.granted == result.chunks


def test_retries_beyond_the_budget_still_end_the_job(llm_server: FakeLLMServer,
                                                     make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m", context_window=1500)], llm_attempt_budget=2)
    llm_server.script("m", error(503), error(503), error(503))
    with pytest.raises(AllCandidatesFailedError, match="503"):
        router.for_job().summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    # two failures spend the budget of two: the third 503 is never asked for
    assert len(llm_server.seen) == 2


def test_a_chunked_call_reports_each_answered_chunk(llm_server: FakeLLMServer,
                                                    make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m", context_window=1500)])
    job = router.for_job()
    seen: list[tuple[int, int, str]] = []
    job.progress = lambda call, calls, candidate: seen.append((call, calls, candidate))
    result = job.summarize(make_request(CONVERSATION, chunkable=True, max_tokens=200))
    assert [call for call, _, _ in seen] == list(range(1, result.chunks + 1))
    assert seen[-1][:2] == (result.chunks, result.chunks)  # the estimate ends exact
    assert all(call <= calls for call, calls, _ in seen) and {c for *_, c in seen} == {"openai/m"}
