"""oh-my-pi's remote endpoint over HTTP: /v1/summarize and /v1/chat/completions run as summarize
jobs on a real worker, through its model router, against a loopback OpenAI-compatible model."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from llm.llm_fakes import FakeLLMServer, error, hang, ok

from api_client import CompactionClient, JobFailedError

MODEL = "loop"
PROMPT = "<conversation>\n[User]: fix the importer\n</conversation>"


def asked(model_server: FakeLLMServer) -> dict[str, Any]:
    body: dict[str, Any] = model_server.seen[-1].body
    return body


def test_summarize_answers_with_the_models_summary(http: httpx.Client,
                                                   model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, ok("## Goal\nfix the importer"))
    answer = http.post("/v1/summarize", json={"systemPrompt": "You summarize.",
                                              "prompt": PROMPT, "maxTokens": 777})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"summary": "## Goal\nfix the importer"}
    body = asked(model_server)
    assert body["messages"] == [{"role": "system", "content": "You summarize."},
                                {"role": "user", "content": PROMPT}]
    assert body["max_tokens"] == 777


def test_the_router_retries_a_transient_failure(http: httpx.Client,
                                               model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, error(503), ok("after a retry"))
    before = model_server.count(MODEL)
    answer = http.post("/v1/summarize", json={"systemPrompt": "s", "prompt": PROMPT})
    assert answer.json() == {"summary": "after a retry"}
    assert model_server.count(MODEL) - before == 2
    assert asked(model_server)["max_tokens"] == 13_107  # 0.8 × reserve_tokens


def test_a_model_that_refuses_is_a_502_problem(http: httpx.Client,
                                               model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, error(401, {"error": {"message": "bad key"}}))
    answer = http.post("/v1/summarize", json={"prompt": PROMPT})
    assert answer.status_code == 502
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "job_failed" and answer.json()["jobId"].startswith("summ")


def test_chat_completions_is_a_non_streaming_chat_completion(http: httpx.Client,
                                                             model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, ok("the summary", input=1200, output=80))
    answer = http.post("/v1/chat/completions", json={
        "model": "compactor", "max_tokens": 500,
        "messages": [{"role": "system", "content": "You summarize."},
                     {"role": "user", "content": PROMPT}]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["object"] == "chat.completion" and body["model"] == f"openai/{MODEL}"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "the summary"}
    assert body["usage"] == {"prompt_tokens": 1200, "completion_tokens": 80,
                             "total_tokens": 1280}
    assert asked(model_server)["max_tokens"] == 500
    streaming = http.post("/v1/chat/completions", json={
        "stream": True, "messages": [{"role": "user", "content": "x"}]})
    assert streaming.status_code == 400 and streaming.json()["code"] == "invalid_request"
    empty = http.post("/v1/chat/completions", json={"messages": []})
    assert empty.status_code == 422


def test_a_caller_that_hangs_up_cancels_its_job(api: str, http: httpx.Client,
                                                model_server: FakeLLMServer,
                                                module_redis: str) -> None:
    # Every attempt hangs (each times out after 2 s and is retried): the job can only end by
    # the cancel the hang-up causes, never by a retry that happens to answer first.
    model_server.script(MODEL, *[hang() for _ in range(6)])
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/summarize", json={"prompt": PROMPT}, timeout=1.5)
    client = CompactionClient(module_redis)
    try:
        deadline = time.monotonic() + 15
        while True:
            jobs = [e for e in client.events(since="start", follow=False)
                    if e.kind.value == "summarize" and e.terminal]
            if jobs and jobs[-1].state is not None and jobs[-1].state.value == "cancelled":
                break
            assert time.monotonic() < deadline, [j.state for j in jobs]
            time.sleep(0.2)
    finally:
        client.close()
        model_server.scripts.clear()  # the hangs the cancelled job left are not the next test's


def test_the_python_client_summarizes_too(module_redis: str, worker: object,
                                          model_server: FakeLLMServer) -> None:
    model_server.script(MODEL, ok("from Python"), error(400, {"error": {"message": "no"}}))
    client = CompactionClient(module_redis)
    try:
        handle = client.summarize("sys", "text to summarize", max_tokens=64)
        result = handle.wait(timeout=20)
        assert isinstance(result, dict) and result["summary"] == "from Python"
        record = handle.record()
        assert record.kind.value == "summarize" and record.queue == "compactor.compact"
        assert record.input == {"systemPrompt": "sys", "prompt": "text to summarize",
                                "maxTokens": 64}
        with pytest.raises(JobFailedError):
            client.summarize("sys", "again").wait(timeout=20)
    finally:
        client.close()
