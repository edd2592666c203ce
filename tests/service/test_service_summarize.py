"""A summarize job's request, read off its record's ``input`` (worker.service._summarize_job)."""

from __future__ import annotations

from typing import Any

import pytest

from api_client.contract.errors import InvalidRequestError
from worker.llm import ModelCandidate
from worker.llm.providers import ExtractiveProvider
from worker.llm.router import Router
from worker.service._summarize_job import summary_request


def test_the_record_input_is_the_request() -> None:
    request = summary_request({"systemPrompt": "You summarize.", "prompt": "p", "maxTokens": 99},
                              16_384)
    assert (request.system_prompt, request.prompt, request.max_tokens) == ("You summarize.",
                                                                           "p", 99)
    assert request.purpose == "history" and request.reasoning and request.rechunk is None
    assert summary_request({"prompt": "p"}, 2_000).max_tokens == 1_600  # 0.8 × reserve
    assert summary_request({"prompt": "p"}, 2_000).system_prompt == ""


@pytest.mark.parametrize("data", [None, {}, {"prompt": 3}, {"prompt": "p", "maxTokens": "9"},
                                  {"prompt": "p", "systemPrompt": 1}])
def test_a_malformed_input_is_refused(data: Any) -> None:
    with pytest.raises(InvalidRequestError):
        summary_request(data, 16_384)


def test_the_deterministic_summarizer_reads_the_prompt_as_the_conversation() -> None:
    router = Router([ExtractiveProvider(ModelCandidate(provider="extractive"))])
    request = summary_request({"prompt": "please fix the importer in src/importer.py"}, 16_384)
    summary = router.summarize(request).text
    assert "fix the importer" in summary and summary.startswith("## Goal")
