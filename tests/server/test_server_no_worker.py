"""The synchronous summary routes with no worker alive (docs/oh-my-pi.md "What falls back, and
when"): nothing would run the job, so the caller is answered 424 ``no_worker`` at once instead
of being held until its timeout (oh-my-pi's 300 s) or the server's (330 s), and its agent
compacts by itself. At admission no job is made; a job whose worker went away while the caller
waited is cancelled, so a worker that starts later does not run it on the tenant's bill.

This module's Redis has no worker of its own: "alive" is a heartbeat the test writes (a ghost
that stops beating) or a real worker it starts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import redis
from llm.llm_fakes import FAST, FakeLLMServer, ok, openai
from runtime.runtime_support import running_worker, runtime_settings
from server.server_support import ACME, TOKEN, running_api, server_settings, wait_alive

from api_client import ClientSettings
from api_client.contract.job_enums import JobState
from api_client.contract.keys import KeyLayout
from api_client.server.summarize_url import summarize_url
from helpers.waits import wait_until
from worker.llm import ModelCandidate
from worker.store.job_lifecycle import JobStore

MODEL = "loop"
ASK = {"systemPrompt": "You summarize.", "prompt": "[User]: fix the importer", "maxTokens": 300}
CHAT = {"messages": [{"role": "system", "content": "You summarize."},
                     {"role": "user", "content": "[User]: fix the importer"}]}
# Hang guard only: the server would hold a request this long, the test's client longer.
HOLD_S, CLIENT_S = 30.0, 60.0
GHOST = "ghost-worker"


@pytest.fixture(scope="module")
def api(module_redis: str) -> Iterator[str]:
    tokens = {TOKEN: "default", ACME: "acme"}
    with running_api(module_redis, server_settings(
            tokens, api_summarize_timeout_s=HOLD_S)) as url:
        yield url


@pytest.fixture(scope="module")
def raw(module_redis: str) -> Iterator[redis.Redis[str]]:
    client: redis.Redis[str] = redis.Redis.from_url(module_redis, decode_responses=True)
    yield client
    client.close()


LAYOUT = KeyLayout()


def queued_messages(raw: redis.Redis[str]) -> int:
    """Task messages in the broker's queue lists or taken and not yet acknowledged."""
    lists = [k for k in raw.scan_iter(LAYOUT.broker + "compactor*") if raw.type(k) == "list"]
    return sum(raw.llen(k) for k in lists) + raw.hlen(LAYOUT.broker + "unacked")


def redis_ms(raw: redis.Redis[str]) -> int:
    seconds, micros = raw.time()
    return int(seconds) * 1000 + int(micros) // 1000


def beat(raw: redis.Redis[str], worker_id: str, for_s: float) -> None:
    """A heartbeat as a worker writes it: counted until now + ``for_s`` (Redis's clock)."""
    raw.zadd(LAYOUT.workers, {worker_id: redis_ms(raw) + int(for_s * 1000)})


def post(url: str, body: dict[str, Any], token: str | None = None) -> tuple[httpx.Response, float]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    started = time.monotonic()
    answer = httpx.post(url, json=body, headers=headers, timeout=CLIENT_S)
    return answer, time.monotonic() - started


def no_worker(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 424, answer.text
    assert answer.reason_phrase == "Failed Dependency"  # what oh-my-pi's error message quotes
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert body["code"] == "no_worker"
    return body


@contextmanager
def ghost_beating(raw: redis.Redis[str]) -> Iterator[threading.Event]:
    """A worker that beats (every 0.2 s, counted 1 s) until the event is set: then it is gone,
    as a killed worker is, without taking its heartbeat out."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            beat(raw, GHOST, 1.0)
            stop.wait(0.2)

    thread = threading.Thread(target=loop, name="ghost-heartbeat", daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(5)


def in_background(call: Callable[[], tuple[httpx.Response, float]]
                  ) -> tuple[ThreadPoolExecutor, Future[tuple[httpx.Response, float]]]:
    pool = ThreadPoolExecutor(1)
    return pool, pool.submit(call)


def queued_job(raw: redis.Redis[str], tenant: str) -> str:
    """The one job of ``tenant`` waiting in its queued set (a request's job, once admitted)."""
    jobs = wait_until(lambda: raw.zrange(LAYOUT.tenant_queued(tenant), 0, -1), 10,
                      "the request's job")
    assert len(jobs) == 1, jobs
    return str(jobs[0])


def test_no_worker_at_admission_is_answered_at_once_and_makes_no_job(
        api: str, raw: redis.Redis[str]) -> None:
    assert raw.zcard(LAYOUT.workers) == 0  # this module's Redis: no worker ever beat
    answers = [post(summarize_url(api, ACME), ASK), post(api + "/v1/summarize", ASK, TOKEN),
               post(api + "/v1/chat/completions", CHAT, TOKEN)]
    for answer, seconds in answers:
        body = no_worker(answer)
        assert "jobId" not in body
        assert seconds < 2.0, seconds  # one liveness read, no wait for anything
    assert queued_messages(raw) == 0
    assert raw.zcard(LAYOUT.tenant_queued("acme")) == 0


def test_a_queued_job_whose_last_worker_goes_is_cancelled_and_answered(
        api: str, raw: redis.Redis[str], module_redis: str) -> None:
    model = FakeLLMServer()
    try:
        with ghost_beating(raw) as stop:  # admitted: a worker is alive
            pool, waiting = in_background(lambda: post(summarize_url(api, ACME), ASK))
            job_id = queued_job(raw, "acme")
            gone = time.monotonic()
            stop.set()  # the worker dies; its heartbeat counts for up to 1 s more
        answer, _ = waiting.result(CLIENT_S)
        answered_after_s = time.monotonic() - gone
        pool.shutdown()
        body = no_worker(answer)
        assert body["jobId"] == job_id
        # Within 1 s of the heartbeat going stale plus a liveness poll (1 s), not at 30 s.
        assert answered_after_s < 4.0, answered_after_s
        store = JobStore(raw, ClientSettings(redis_url=module_redis))
        assert store.get(job_id).state is JobState.CANCELLED
        # A worker that starts now takes the job's message and drops it: no model call, and
        # the job stays cancelled (nothing billed).
        model.script(MODEL, ok("## Goal\nfix it"))
        candidate = ModelCandidate.model_validate(openai(model, MODEL, api_key="sk-test"))
        with running_worker(runtime_settings(module_redis, models=[candidate], **FAST)):
            wait_until(lambda: queued_messages(raw) == 0, 30, "the worker to take the message")
        assert model.count(MODEL) == 0
        record = store.get(job_id)
        assert record.state is JobState.CANCELLED and record.usage is None
    finally:
        model.close()
        raw.zrem(LAYOUT.workers, GHOST)


def test_a_running_job_whose_worker_is_lost_is_cancelled_and_answered(
        api: str, raw: redis.Redis[str], module_redis: str) -> None:
    store = JobStore(raw, ClientSettings(redis_url=module_redis))
    try:
        with ghost_beating(raw) as stop:
            pool, waiting = in_background(lambda: post(api + "/v1/chat/completions", CHAT,
                                                       TOKEN))
            job_id = queued_job(raw, "default")
            # The ghost starts the job as a worker does: the record running, its lease held.
            assert store.acquire_lease(job_id, f"{GHOST}/t0", 3.0).name == "ACQUIRED"
            running = store.start(job_id)
            assert running is not None and running.state is JobState.RUNNING
            gone = time.monotonic()
            stop.set()  # killed mid-job: heartbeat and lease lapse, no other worker is alive
        answer, _ = waiting.result(CLIENT_S)
        answered_after_s = time.monotonic() - gone
        pool.shutdown()
        assert no_worker(answer)["jobId"] == job_id
        assert answered_after_s < 4.0, answered_after_s
        assert store.get(job_id).state in (JobState.CANCELLED, JobState.RUNNING)
        assert store.is_cancel_requested(job_id)  # a redelivery stops before its model call
    finally:
        raw.zrem(LAYOUT.workers, GHOST)
        raw.delete(*raw.scan_iter(LAYOUT.broker + "compactor*"))  # no worker ever takes it


def test_with_a_worker_alive_a_summary_is_made_as_before(
        api: str, raw: redis.Redis[str], module_redis: str) -> None:
    model = FakeLLMServer()
    try:
        model.script(MODEL, ok("## Goal\nfix it"))
        candidate = ModelCandidate.model_validate(openai(model, MODEL, api_key="sk-test"))
        with running_worker(runtime_settings(module_redis, models=[candidate], **FAST)):
            wait_alive(module_redis)  # its first heartbeat
            answer, _ = post(summarize_url(api, ACME), ASK)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"summary": "## Goal\nfix it"}
        assert model.count(MODEL) == 1
    finally:
        model.close()
