"""What a job's calls cost (``JobSummarizer.spend``, its tenant's usage): every answered HTTP
call of the job, over all its requests; failed attempts and the extractive summarizer cost
nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from llm.llm_fakes import EXTRACTIVE, FakeLLMServer, error, make_request, ok, openai

from worker.llm.router import Router
from worker.summary_requests import Usage

MakeRouter = Callable[..., Router]
PRICES = {"price_input_per_mtok": 2.0, "price_output_per_mtok": 10.0,
          "price_cache_read_per_mtok": 1.0}


def test_the_spend_sums_every_answered_call_of_the_job(llm_server: FakeLLMServer,
                                                       make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m", api_key="k", **PRICES)])
    llm_server.script("m", error(500), ok(input=100, output=20, cached=40), ok(input=50))
    job = router.for_job()
    job.summarize(make_request())  # a failed attempt, then an answer
    job.summarize(make_request())  # a second request of the same job
    assert job.spend.calls == 2
    assert job.spend.usage == Usage(input=60 + 50, output=20 + 20, cache_read=40)
    usd = (110 * 2.0 + 40 * 10.0 + 40 * 1.0) / 1e6
    assert job.spend.cost_usd == pytest.approx(usd)
    assert router.for_job().spend.calls == 0  # each job its own


def test_the_extractive_summarizer_costs_nothing(llm_server: FakeLLMServer,
                                                 make_router: MakeRouter) -> None:
    router = make_router([openai(llm_server, "m", api_key="k", **PRICES), EXTRACTIVE])
    llm_server.script("m", error(401, {"error": {"message": "bad key"}}))
    job = router.for_job()
    assert job.summarize(make_request()).model == "extractive"
    assert (job.spend.calls, job.spend.usage, job.spend.cost_usd) == (0, Usage(), 0.0)
