"""Session headers hold to the stored-bytes quota (issue 39 M1) and the model budget to its
tokens_per_day under parallel jobs (M5), over HTTP against a real Redis and a real worker.

Before: ``cwd`` and ``title`` had no length limit and counted as nothing; a ``PUT …/jsonl``
accepted a 15 MB header line: a tenant over a 100 kB quota stored ten such sessions (Redis
+176 MB) and at ``maxmemory`` every tenant got 507.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from llm.llm_fakes import FakeLLMServer
from server.server_support import ACME, tenant_http

from api_client import CompactionClient
from api_client.contract.stored_bytes import BYTES_TOTAL

pytestmark = pytest.mark.integration
KB = 1024


def sid() -> str:
    return f"h-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def acme(tenant_api: str) -> Iterator[httpx.Client]:
    with tenant_http(tenant_api, ACME) as client:
        yield client


@pytest.fixture
def raw(module_redis: str) -> Iterator[redis.Redis[str]]:
    client: redis.Redis[str] = redis.Redis.from_url(module_redis, decode_responses=True)
    yield client
    client.close()


def _refused(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text[:300]
    body: dict[str, object] = response.json()
    assert body["code"] == code
    return body


def test_a_long_cwd_or_title_is_refused_and_nothing_stored(acme: httpx.Client) -> None:
    for field in ("cwd", "title"):
        name = sid()
        body = _refused(acme.post("/v1/sessions", json={"sessionId": name, field: "x" * 20 * KB}),
                        413, "header_too_large")
        assert body["setting"] == "max_header_bytes" and body["limit"] == 16 * KB
        assert acme.get(f"/v1/sessions/{name}").status_code == 404


def test_a_huge_imported_header_line_is_refused_before_storing(
        acme: httpx.Client, raw: redis.Redis[str]) -> None:
    name = sid()
    header = {"type": "session", "version": 3, "id": name, "timestamp": "2025-01-01T00:00:00Z",
              "cwd": "/repo", "title": "t" * (15 << 20)}
    used = int(raw.info("memory")["used_memory"])
    refused = acme.put(f"/v1/sessions/{name}/jsonl", content=json.dumps(header) + "\n",
                       headers={"Content-Type": "application/x-ndjson"})
    body = _refused(refused, 413, "header_too_large")
    assert int(str(body["value"])) > 15 << 20
    assert acme.get(f"/v1/sessions/{name}").status_code == 404
    assert int(raw.info("memory")["used_memory"]) - used < 1 << 20  # nothing of it stored


def test_headers_count_toward_the_stored_bytes_quota(
        acme: httpx.Client, raw: redis.Redis[str], module_redis: str) -> None:
    layout = CompactionClient(module_redis, tenant="acme").layout
    held = int(raw.hget(layout.tenant_bytes("acme"), BYTES_TOTAL) or 0)
    raw.hset(layout.tenant_quota("acme"), "stored_bytes_max", held + 100 * KB)
    try:
        created = []
        for _ in range(20):  # 20 sessions of a 10 kB header each: 200 kB of headers
            name = sid()
            answer = acme.post("/v1/sessions", json={"sessionId": name, "cwd": "/" + "d" * 10 * KB})
            if answer.status_code != 201:
                _refused(answer, 429, "quota_exceeded")
                break
            created.append(name)
        assert 8 <= len(created) <= 10  # the quota held at 100 kB
        own = int(raw.hget(layout.tenant_bytes("acme"), created[0]) or 0)
        assert own > 10 * KB  # the header line is the session's count
        imported = sid()  # an import's header counts as well
        text = json.dumps({"type": "session", "version": 3, "id": imported,
                           "timestamp": "2025-01-01T00:00:00Z", "cwd": "/" + "i" * 12 * KB})
        _refused(acme.put(f"/v1/sessions/{imported}/jsonl", content=text + "\n",
                          headers={"Content-Type": "application/x-ndjson"}), 429,
                 "quota_exceeded")
    finally:
        raw.hdel(layout.tenant_quota("acme"), "stored_bytes_max")
        for name in created:
            acme.delete(f"/v1/sessions/{name}")


# --- M5: the model budget holds under parallel jobs ----------------------------------------------
def test_parallel_summaries_never_spend_past_the_tokens_per_day(
        acme: httpx.Client, raw: redis.Redis[str], module_redis: str) -> None:
    """Before: with 60 tokens left, 40 parallel summaries were admitted (each saw the budget
    unspent) and spent 600. Now each model call reserves its estimate (prompt / 4 + its output
    budget) against spent + reserved: whatever the timing, the day's spend stays within it."""
    layout = CompactionClient(module_redis, tenant="acme").layout
    day = time.strftime("%Y-%m-%d", time.gmtime())
    usage = layout.tenant_usage("acme", day)
    raw.delete(usage)
    raw.hset(layout.tenant_quota("acme"), "tokens_per_day", 500)
    answers: list[httpx.Response] = []
    try:
        def ask() -> None:  # each call: ~203 tokens reserved, 120 spent (the model's usage)
            answers.append(acme.post("/v1/summarize", json={
                "systemPrompt": "Summarize.", "prompt": "x" * 400, "maxTokens": 100}))

        askers = [threading.Thread(target=ask) for _ in range(10)]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join(120)
        served = [a for a in answers if a.status_code == 200]
        refused = [a for a in answers if a.status_code != 200]
        assert len(answers) == 10 and served and refused
        for answer in refused:
            assert answer.json()["code"] in ("quota_exceeded", "job_failed"), answer.text
        spent = raw.hmget(usage, "input_tokens", "output_tokens", "reserved_tokens")
        assert raw.hlen(layout.tenant_reserved("acme")) == 0  # every reservation given back
        print(f"served {len(served)}, refused {len(refused)} "
              f"({sorted({a.json()['code'] for a in refused})}), spent {spent[:2]} of 500")
        assert int(spent[0] or 0) + int(spent[1] or 0) <= 500
        assert int(spent[2] or 0) == 0  # every reservation was given back
    finally:
        raw.hdel(layout.tenant_quota("acme"), "tokens_per_day")
        raw.delete(usage)


def test_a_prompt_larger_than_the_budget_left_is_not_sent(
        acme: httpx.Client, raw: redis.Redis[str], module_redis: str,
        model_server: FakeLLMServer) -> None:
    """Before: a 15 MB prompt went to the model as one request. Now its estimate (~500 000
    tokens for 2 MB) is over what the day has left: refused, and the model sees nothing."""
    layout = CompactionClient(module_redis, tenant="acme").layout
    raw.hset(layout.tenant_quota("acme"), "tokens_per_day", 100_000)
    seen = len(model_server.seen)
    try:
        refused = acme.post("/v1/summarize", json={"prompt": "word " * 400_000})
        assert refused.status_code in (429, 502), refused.text[:300]
        assert "tokens_per_day" in refused.json()["detail"]
        assert len(model_server.seen) == seen
    finally:
        raw.hdel(layout.tenant_quota("acme"), "tokens_per_day")


def test_admission_counts_what_calls_under_way_have_reserved(
        acme: httpx.Client, raw: redis.Redis[str], module_redis: str,
        model_server: FakeLLMServer) -> None:
    """With the day's budget held by calls under way (their reservations), a new summary is
    429 at admission, before a job is made (before: admitted, it ran and spent past it)."""
    layout = CompactionClient(module_redis, tenant="acme").layout
    usage = layout.tenant_usage("acme", time.strftime("%Y-%m-%d", time.gmtime()))
    raw.hset(layout.tenant_quota("acme"), "tokens_per_day", 500)
    held = layout.tenant_reserved("acme")  # another job's, until an hour from now
    raw.hset(held, "acme~other:1", f"500 {int(time.time() * 1000) + 3_600_000} -")
    seen = len(model_server.seen)
    try:
        refused = acme.post("/v1/summarize", json={"prompt": "a short one", "maxTokens": 10})
        body = _refused(refused, 429, "quota_exceeded")
        assert body["quota"] == "tokens_per_day" and len(model_server.seen) == seen
    finally:
        raw.hdel(layout.tenant_quota("acme"), "tokens_per_day")
        raw.delete(usage, held)


# --- M5: a prompt over the model's window is refused, not sent -----------------------------------
def test_a_prompt_over_max_prompt_tokens_is_refused_at_admission(
        acme: httpx.Client, model_server: FakeLLMServer) -> None:
    """Before: with no day budget set, a prompt of any size went to the model as one request
    (15 MB in the review). Now one whose estimate (characters / 4) is over max_prompt_tokens
    (1 000 000) is 413 prompt_too_large before any job is made, on both summary routes."""
    seen = len(model_server.seen)
    prompt = "word " * 1_000_000  # 5 MB: ~1 250 000 tokens by the estimate
    body = _refused(acme.post("/v1/summarize", json={"prompt": prompt}), 413, "prompt_too_large")
    assert body["setting"] == "max_prompt_tokens" and body["limit"] == 1_000_000
    assert body["value"] == 1_250_000
    chat = acme.post("/v1/chat/completions", json={"messages": [
        {"role": "user", "content": prompt}]})
    _refused(chat, 413, "prompt_too_large")
    assert len(model_server.seen) == seen


def test_a_prompt_over_the_models_window_is_refused_by_its_worker(
        acme: httpx.Client, model_server: FakeLLMServer) -> None:
    """Under max_prompt_tokens but over the model's window (the worker's context_window,
    128 000, for a candidate that names none): the worker counts it (~160 000 tokens) and
    refuses the job before any model call; 413 prompt_too_large (before: sent, 200)."""
    seen = len(model_server.seen)
    answer = acme.post("/v1/summarize", json={"prompt": "word " * 160_000}, timeout=60)
    body = _refused(answer, 413, "prompt_too_large")
    assert body["setting"] == "context_window" and body["limit"] == 128_000
    assert int(str(body["value"])) > 128_000
    assert len(model_server.seen) == seen
    fits = acme.post("/v1/summarize", json={"prompt": "word " * 1_000}, timeout=60)
    assert fits.status_code == 200, fits.text[:300]


# --- every 429 says when to come back (Retry-After) ----------------------------------------------
def test_a_quota_429_carries_retry_after(
        acme: httpx.Client, raw: redis.Redis[str], module_redis: str) -> None:
    """Before: 429 quota_exceeded came without Retry-After (the rate and stream limits' 429s
    had it). Now a per-day quota's says the seconds until resetsAt (the next UTC midnight); a
    queued-jobs or stored-bytes quota's, which frees when jobs start or sessions go, a short
    while."""
    layout = CompactionClient(module_redis, tenant="acme").layout
    quota, held = layout.tenant_quota("acme"), layout.tenant_reserved("acme")
    raw.hset(quota, "tokens_per_day", 500)
    raw.hset(held, "acme~other:1", f"500 {int(time.time() * 1000) + 3_600_000} -")
    try:
        refused = acme.post("/v1/summarize", json={"prompt": "a short one", "maxTokens": 10})
        body = _refused(refused, 429, "quota_exceeded")
        midnight = (int(time.time()) // 86_400 + 1) * 86_400
        wait = int(refused.headers["Retry-After"])
        assert abs(wait - (midnight - time.time())) < 5, (wait, body["resetsAt"])
        raw.hset(quota, "stored_bytes_max", 1)
        stored = acme.post("/v1/sessions", json={"sessionId": sid(), "cwd": "/x"})
        _refused(stored, 429, "quota_exceeded")
        assert int(stored.headers["Retry-After"]) >= 1
    finally:
        raw.delete(quota, held)
