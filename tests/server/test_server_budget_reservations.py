"""The model budget is reserved at admission and settled at the job's end (issue 39 M5), over
HTTP against a real Redis, a real worker and a loopback model whose latency the test sets.

Before: admission refused a job only once the day's spend (and the calls under way) reached the
budget; 40 parallel summaries against 60 tokens with a slow model were all admitted, those past
the budget failing at their worker as 502 ``job_failed``. Now admission reserves each job's
estimate (a summary: its prompt's characters / 4 plus ``maxTokens``) in the step that checks
it, so the jobs past the budget are 429 ``quota_exceeded`` and never made; a summary its worker
refuses for the budget is 429 ``quota_exceeded`` with ``resetsAt`` too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from llm.llm_fakes import FAST, FakeLLMServer, meet, ok, openai
from runtime.runtime_support import running_worker, runtime_settings
from server.conftest import MODEL
from server.server_support import ACME, tenant_http, wait_alive

from api_client import CompactionClient
from api_client.contract.keys import KeyLayout
from worker.celery_app import CompactorCelery
from worker.llm import ModelCandidate

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(module_redis: str, model_server: FakeLLMServer) -> Iterator[CompactorCelery]:
    """The module's worker, with a model deadline past the slow model's latency."""
    candidate = ModelCandidate.model_validate(openai(model_server, MODEL, api_key="sk-test",
                                                     timeout_s=60.0))
    with running_worker(runtime_settings(module_redis, models=[candidate], **FAST)) as app:
        wait_alive(module_redis)  # else a summary asked at once is answered 424 no_worker
        yield app


@pytest.fixture
def acme(tenant_api: str) -> Iterator[httpx.Client]:
    with tenant_http(tenant_api, ACME) as client:
        yield client


@pytest.fixture
def raw(module_redis: str) -> Iterator[redis.Redis[str]]:
    client: redis.Redis[str] = redis.Redis.from_url(module_redis, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def layout(module_redis: str, raw: redis.Redis[str]) -> Iterator[KeyLayout]:
    """acme's keys; its day's spend, reservations and quota overrides cleared after."""
    keys = CompactionClient(module_redis, tenant="acme").layout
    usage = keys.tenant_usage("acme", time.strftime("%Y-%m-%d", time.gmtime()))
    raw.delete(usage, keys.tenant_reserved("acme"), keys.tenant_quota("acme"))
    yield keys
    raw.delete(usage, keys.tenant_reserved("acme"), keys.tenant_quota("acme"))


def _wait_for(check: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_parallel_summaries_past_the_budget_are_refused_at_admission(
        acme: httpx.Client, raw: redis.Redis[str], layout: KeyLayout,
        model_server: FakeLLMServer) -> None:
    """40 parallel summaries of ~20 tokens each (10 of prompt, maxTokens 10) against a budget of
    60 and a model of 3 s: 3 run, 37 are 429 at admission; the model sees 3 calls."""
    raw.hset(layout.tenant_quota("acme"), "tokens_per_day", 60)
    # Each call spends what it reserved: 15 in, 5 out.
    model_server.script(MODEL, *(ok(delay=3.0, input=15, output=5) for _ in range(3)))
    seen = len(model_server.seen)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def ask() -> None:
        answer = acme.post("/v1/summarize", json={
            "systemPrompt": "S.", "prompt": "x" * 38, "maxTokens": 10}, timeout=120)
        with lock:
            answers.append(answer)

    askers = [threading.Thread(target=ask) for _ in range(40)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join(180)
    codes = sorted((a.status_code, a.json().get("code", "")) for a in answers)
    print(f"answers: {[(c, codes.count(c)) for c in sorted(set(codes))]}, model calls "
          f"{len(model_server.seen) - seen}")
    assert len(answers) == 40
    served = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code != 200]
    assert len(served) == 3, codes
    for answer in refused:
        body = answer.json()
        assert answer.status_code == 429 and body["code"] == "quota_exceeded", answer.text
        assert body["quota"] == "tokens_per_day" and body["resetsAt"]
    assert len(model_server.seen) - seen == 3  # the refused ones never reached a worker
    usage = layout.tenant_usage("acme", time.strftime("%Y-%m-%d", time.gmtime()))
    spent = raw.hmget(usage, "input_tokens", "output_tokens")
    assert sum(int(x or 0) for x in spent) == 60
    _wait_for(lambda: raw.hlen(layout.tenant_reserved("acme")) == 0, "the reservations to go")


def test_a_summary_its_worker_refuses_for_the_budget_is_429(
        acme: httpx.Client, raw: redis.Redis[str], layout: KeyLayout,
        model_server: FakeLLMServer) -> None:
    """A summary admitted within the budget, whose day is spent before its worker starts it
    (one job of acme runs at a time: the first holds the model), is refused by the worker:
    429 quota_exceeded with resetsAt, as admission answers (before: 502 job_failed)."""
    quota = layout.tenant_quota("acme")
    raw.hset(quota, mapping={"tokens_per_day": 10_000, "max_running": 1})
    with model_server.lock:
        model_server.most_in_flight = model_server.in_flight
    # The first summary's call is answered once a second request is in flight (the test's).
    model_server.script(MODEL, meet(model_server.in_flight + 2, 120.0))
    answers: dict[str, httpx.Response] = {}

    def ask(name: str) -> None:
        answers[name] = acme.post("/v1/summarize", json={
            "systemPrompt": "S.", "prompt": f"{name} " * 10, "maxTokens": 10}, timeout=120)

    first = threading.Thread(target=ask, args=("first",))
    first.start()
    _wait_for(lambda: model_server.in_flight >= 1, "the first summary's model call")
    seen = len(model_server.seen)
    second = threading.Thread(target=ask, args=("second",))
    second.start()
    _wait_for(lambda: raw.hlen(layout.tenant_reserved("acme")) == 2, "the second admitted")
    usage = layout.tenant_usage("acme", time.strftime("%Y-%m-%d", time.gmtime()))
    raw.hset(usage, "input_tokens", 10_000)  # the day is spent (by other work)
    httpx.post(f"{model_server.url}/v1/chat/completions", json={"model": "other"}, timeout=30)
    first.join(120)
    second.join(120)
    assert answers["first"].status_code == 200, answers["first"].text
    refused = answers["second"]
    print(f"second: {refused.status_code} {refused.text[:300]}")
    assert refused.status_code == 429, refused.text
    body = refused.json()
    assert body["code"] == "quota_exceeded" and body["quota"] == "tokens_per_day"
    assert body["resetsAt"] and body["limit"] == 10_000
    assert len(model_server.seen) - seen == 1  # the test's own request: no second call
    _wait_for(lambda: raw.hlen(layout.tenant_reserved("acme")) == 0, "the reservations to go")
