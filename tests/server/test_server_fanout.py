"""Many waiters on one `compactor serve` process (docs/http-api.md "Many waiters"): long polls
and following event streams share the process's one reader, so hundreds of them hold a handful
of Redis connections and all answer when their job ends; past COMPACTOR_API_WAITERS_MAX a new
one is 429 with Retry-After, never 503.

A real server process (tests/helpers/serve_process.py), a Redis of the module's own, and a real
worker started only once every waiter is in: until then no job can end."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from llm.llm_fakes import FAST, FakeLLMServer, openai
from runtime.runtime_support import running_worker, runtime_settings

from helpers.serve_process import TOKEN, ServeProcess
from worker.llm import ModelCandidate

REPO = Path(__file__).resolve().parents[2]
DEMO = (REPO / "worker" / "data" / "demo-session.jsonl").read_bytes()
# `make waiters` runs the first test with WAITERS (10 000) split between long polls and streams.
WAITERS = int(os.environ.get("COMPACTOR_TEST_WAITERS", "600"))
POLLS, STREAMS, JOBS = WAITERS // 2, WAITERS - WAITERS // 2, 20
POOL = 8  # COMPACTOR_REDIS_POOL_SIZE of the server under test
# The server's connections: its pool, the reader's one and its four for reads; the test's own.
CONNECTIONS_MAX = POOL + 1 + 4 + 2
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def served(module_redis: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = ServeProcess(module_redis, tmp_path_factory.mktemp("fanout") / "serve.log",
                          COMPACTOR_REDIS_POOL_SIZE=str(POOL), COMPACTOR_API_RATE_PER_S="0",
                          COMPACTOR_API_SSE_STREAMS_MAX="0", COMPACTOR_API_WAITERS_MAX="0")
    server.start()
    yield server.url
    server.stop()


def _queued_jobs(http: httpx.Client, count: int) -> list[tuple[str, str]]:
    """(session, job id) of ``count`` compactions queued while no worker runs."""
    jobs = []
    for _ in range(count):
        name = f"s-{uuid.uuid4().hex[:10]}"
        assert http.put(f"/v1/sessions/{name}/jsonl", content=DEMO).status_code == 201
        accepted = http.post(f"/v1/sessions/{name}/compact", json={"reason": "manual"})
        assert accepted.status_code == 202, accepted.text
        jobs.append((name, accepted.json()["jobId"]))
    return jobs


async def _poll(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    answer = await client.get(f"/v1/jobs/{job_id}", params={"wait": 120})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _follow(client: httpx.AsyncClient, session: str, job_id: str,
                  connected: asyncio.Queue[None]) -> list[str]:
    """The event types of ``job_id`` a stream of ``session`` sends, up to the job's end."""
    types = []
    async with client.stream("GET", f"/v1/sessions/{session}/events",
                             params={"since": "start"}) as stream:
        assert stream.status_code == 200
        event_type, job = "", ""
        async for line in stream.aiter_lines():
            if line.startswith(": connected"):
                connected.put_nowait(None)
            elif line.startswith("event: "):
                event_type = line[7:]
            elif line.startswith("data: ") and f'"jobId":"{job_id}"' in line:
                types.append(event_type)
                job = event_type
            if job in ("compaction_end", "failed", "cancelled"):
                return types
    return types


def _connections(url: str) -> int:
    with redis.Redis.from_url(url) as client:
        return len(client.client_list())


@pytest.mark.timeout(max(120, WAITERS // 20))  # the test's one client process is the bottleneck
def test_hundreds_of_waiters_share_a_few_connections_and_all_answer(
        served: str, module_redis: str, model_server: FakeLLMServer) -> None:
    with httpx.Client(base_url=served, headers=AUTH, timeout=30) as http:
        jobs = _queued_jobs(http, JOBS)
    before = _connections(module_redis)
    peak = asyncio.run(_wait_all(served, module_redis, model_server, jobs))
    assert peak <= max(before, CONNECTIONS_MAX), (peak, before)


async def _wait_all(url: str, redis_url: str, model_server: FakeLLMServer,
                    jobs: list[tuple[str, str]]) -> int:
    limits = httpx.Limits(max_connections=POLLS + STREAMS + 10)
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=180,
                                 limits=limits) as client:
        polls = [asyncio.create_task(_poll(client, jobs[i % JOBS][1])) for i in range(POLLS)]
        connected: asyncio.Queue[None] = asyncio.Queue()
        streams = [asyncio.create_task(_follow(client, *jobs[i % JOBS], connected))
                   for i in range(STREAMS)]
        for _ in range(STREAMS):  # every stream is a follower now; the polls came before them
            await asyncio.wait_for(connected.get(), 120)
        assert not any(task.done() for task in polls + streams)  # no job can end yet
        peak = await asyncio.to_thread(_connections, redis_url)
        print(f"{POLLS} long polls and {STREAMS} streams connected: {peak} Redis connections")
        assert peak <= CONNECTIONS_MAX, f"{peak} Redis connections under {POLLS + STREAMS} waits"
        candidate = ModelCandidate.model_validate(openai(model_server, "loop", api_key="sk-t"))
        with running_worker(runtime_settings(redis_url, models=[candidate], **FAST)):
            started = time.monotonic()
            records = await asyncio.gather(*polls)
            seen = await asyncio.gather(*streams)
            print(f"all {POLLS + STREAMS} answered {time.monotonic() - started:.1f} s after the "
                  f"worker's start ({JOBS} jobs)")
    ends = {job_id: "succeeded" for _, job_id in jobs}
    assert [r["state"] for r in records] == [ends[r["id"]] for r in records]
    assert {r["id"] for r in records} == set(ends)
    assert all(types and types[-1] == "compaction_end" for types in seen), seen[:3]
    return peak


@pytest.fixture(scope="module")
def capped(module_redis: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = ServeProcess(module_redis, tmp_path_factory.mktemp("capped") / "serve.log",
                          COMPACTOR_API_RATE_PER_S="0", COMPACTOR_API_SSE_STREAMS_MAX="0",
                          COMPACTOR_API_WAITERS_MAX="3")
    server.start()
    yield server.url
    server.stop()


def test_past_the_waiters_cap_a_wait_is_429_with_retry_after_never_503(capped: str) -> None:
    with httpx.Client(base_url=capped, headers=AUTH, timeout=30) as http:
        (session, job_id), = _queued_jobs(http, 1)
        asyncio.run(_over_the_cap(capped, session, job_id))


async def _over_the_cap(url: str, session: str, job_id: str) -> None:
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as client:
        held = []
        for _ in range(3):  # three followers: the cap
            stream = await client.send(client.build_request(
                "GET", f"/v1/sessions/{session}/events"), stream=True)
            assert stream.status_code == 200
            held.append(stream)
        poll = await client.get(f"/v1/jobs/{job_id}", params={"wait": 30})
        follow = await client.get("/v1/events")
        for refused in (poll, follow):
            assert refused.status_code == 429, refused.text
            assert refused.json()["code"] == "too_many_waiters"
            assert int(refused.headers["retry-after"]) >= 1
        assert (await client.get(f"/v1/jobs/{job_id}")).status_code == 200  # no wait: no cap
        for stream in held:
            await stream.aclose()
        while (again := await client.get(f"/v1/jobs/{job_id}", params={"wait": 0.05})
               ).status_code != 200:  # the hung-up streams give their places back
            assert again.status_code == 429
