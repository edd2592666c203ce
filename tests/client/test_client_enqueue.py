"""CompactionClient / AsyncCompactionClient: enqueue, Celery messages, waiting, outages.

No worker here: a thread (or task) plays the worker through JobStore, which is what wakes the
waiting handle. The end-to-end runs through real workers live with the worker tests.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from client.conftest import seed_sessions

from api_client import (
    AsyncCompactionClient,
    BrokerUnavailableError,
    ClientSettings,
    CompactionClient,
    JobCancelledError,
    JobFailedError,
    JobState,
    JobTimeoutError,
    PruneResult,
)
from api_client.contract.keys import KeyLayout
from helpers.jobs import worker_jobs
from helpers.sessions import user


@pytest.fixture(autouse=True)
def _sessions(redis_url: str) -> None:
    seed_sessions(redis_url, "s1")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ENTRY = {"type": "compaction", "id": "c0ffee00", "parentId": None, "summary": "S",
         "firstKeptEntryId": "x", "tokensBefore": 5}


def later(delay: float, fn: Callable[[], Any]) -> threading.Timer:
    timer = threading.Timer(delay, fn)
    timer.start()
    return timer


def work(client: CompactionClient, job_id: str, state: str = "succeeded", **result: Any) -> None:
    """What a worker does with the job store: lease, run, finish."""
    jobs = worker_jobs(client)
    jobs.acquire_lease(job_id, "w", 30)
    jobs.mark_running(job_id)
    jobs.finish(job_id, state, **result)


def queued_messages(raw: redis.Redis[str], queue: str) -> list[dict[str, Any]]:
    """The messages of kombu's list ``queue`` (under the broker's key prefix)."""
    return [json.loads(m) for m in raw.lrange(KeyLayout().broker + queue, 0, -1)]


def test_compact_sends_the_task_by_name_with_the_job_id_only(client: CompactionClient,
                                                             raw: redis.Redis[str]) -> None:
    sid = "s1"
    client.sessions.append(sid, user("secret content"))
    handle = client.compact(sid, reason="manual", instructions="private instructions")
    (message,) = queued_messages(raw, "compactor.compact:6")  # manual: priority 6
    assert message["content-type"] == "application/json"
    assert message["headers"]["task"] == "compactor.compact"
    assert message["headers"]["id"] == handle.id
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([handle.id], {})
    assert "secret" not in json.dumps(message) and "private" not in json.dumps(message)
    assert message["properties"]["priority"] == 6
    assert not handle.coalesced and handle.record().state is JobState.QUEUED


@pytest.mark.parametrize(
    ("call", "queue", "task"),
    [
        (lambda c: c.compact("s1", "overflow"), "compactor.urgent", "compactor.compact"),
        (lambda c: c.compact("s1", "threshold"), "compactor.compact:3", "compactor.compact"),
        (lambda c: c.prune("s1"), "compactor.prune:6", "compactor.prune"),
        (lambda c: c.branch_summary("s1", "t1"), "compactor.branch:3", "compactor.branch_summary"),
    ],
)
def test_routing(client: CompactionClient, raw: redis.Redis[str], call: Any, queue: str,
                 task: str) -> None:
    handle = call(client)
    (message,) = queued_messages(raw, queue)
    assert message["headers"]["task"] == task
    assert json.loads(base64.b64decode(message["body"]))[0] == [handle.id]


def test_coalesced_request_sends_nothing_and_an_upgrade_resends(client: CompactionClient,
                                                                raw: redis.Redis[str]) -> None:
    first = client.compact("s1", "threshold")
    second = client.compact("s1", "manual")
    urgent = client.compact("s1", "overflow")
    assert second.id == urgent.id == first.id
    assert (second.coalesced, second.upgraded, urgent.upgraded) == (True, False, True)
    assert len(queued_messages(raw, "compactor.compact:3")) == 1
    (resent,) = queued_messages(raw, "compactor.urgent")
    assert json.loads(base64.b64decode(resent["body"]))[0] == [first.id]


def test_wait_is_woken_by_the_completion_event(client: CompactionClient) -> None:
    handle = client.compact("s1")
    timer = later(0.3, lambda: work(client, handle.id, entry=ENTRY, model="p/m"))
    assert handle.wait(timeout=10) == ENTRY
    timer.join()
    assert handle.record().state is JobState.SUCCEEDED


def test_wait_after_the_job_finished_returns_at_once(client: CompactionClient) -> None:
    handle = client.compact("s1")
    work(client, handle.id, entry=ENTRY)
    assert handle.wait(timeout=0.5) == ENTRY
    assert client.job(handle.id).wait(timeout=0.5) == ENTRY  # a handle from the id alone


def test_wait_ignores_other_jobs_of_the_session(client: CompactionClient) -> None:
    compaction = client.compact("s1")
    prune = client.prune("s1")
    work(client, prune.id, result=PruneResult(pruned_entry_ids=["a"], tokens_saved=7).to_wire())
    timer = later(0.2, lambda: work(client, compaction.id, entry=ENTRY))
    assert compaction.wait(timeout=10) == ENTRY
    assert prune.wait(timeout=1) == PruneResult(pruned_entry_ids=["a"], tokens_saved=7)
    timer.join()


@pytest.mark.parametrize(
    ("state", "error", "raised"),
    [
        ("failed", "Auto-compaction failed: model down", JobFailedError),
        ("cancelled", "Compaction cancelled", JobCancelledError),
    ],
)
def test_wait_raises_the_jobs_error(client: CompactionClient, state: str, error: str,
                                    raised: type[Exception]) -> None:
    handle = client.compact("s1", "threshold")
    timer = later(0.1, lambda: work(client, handle.id, state, error=error))
    with pytest.raises(raised, match=error) as info:
        handle.wait(timeout=10)
    assert info.value.job_id == handle.id  # type: ignore[attr-defined]
    timer.join()


def test_wait_times_out_and_the_job_stays_queued(client: CompactionClient) -> None:
    handle = client.compact("s1")
    with pytest.raises(JobTimeoutError):
        handle.wait(timeout=0.2)
    assert handle.record().state is JobState.QUEUED


def test_cancel_through_the_handle(client: CompactionClient) -> None:
    handle = client.prune("s1")
    assert handle.cancel() is JobState.CANCELLED
    with pytest.raises(JobCancelledError):
        handle.wait(timeout=1)


def test_async_client_enqueues_and_waits(redis_url: str, raw: redis.Redis[str]) -> None:
    async def scenario() -> tuple[Any, ...]:
        async with AsyncCompactionClient(ClientSettings(redis_url=redis_url)) as ac:
            sync = CompactionClient(redis_url)
            sid = "s1"
            handle = await ac.compact(sid, "overflow")
            again = await ac.compact(sid, "manual")
            asyncio.get_running_loop().call_later(
                0.2, lambda: threading.Thread(target=work, args=(sync, handle.id),
                                              kwargs={"entry": ENTRY}).start())
            entry = await handle.wait(timeout=10)
            branch = await ac.branch_summary(sid, "t1")
            await branch.cancel()
            with pytest.raises(JobCancelledError):
                await branch.wait(timeout=1)
            failing = await ac.prune(sid)
            work(sync, failing.id, "failed", error="bad")
            with pytest.raises(JobFailedError, match="bad"):
                await (await ac.job(failing.id)).wait(timeout=1)
            sync.close()
            return entry, again.coalesced, again.id == handle.id

    assert asyncio.run(scenario()) == (ENTRY, True, True)
    assert len(queued_messages(raw, "compactor.urgent")) == 1


def test_redis_down_at_enqueue_fails_fast(own_redis: Any) -> None:
    client = CompactionClient(own_redis.url)
    sid = client.sessions.create("s1")
    client.compact(sid)  # pools are warm: the outage hits established connections
    own_redis.stop()
    for call in (lambda: client.compact(sid, "overflow"), lambda: client.prune(sid)):
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            call()
        assert time.monotonic() - started <= 2.0
    with pytest.raises(BrokerUnavailableError):
        client.sessions.append(sid, user("x"))
    client.close()


def test_cold_client_with_redis_down_fails_fast() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for make in (lambda: CompactionClient(url).compact("s1"),
                 lambda: asyncio.run(_async_compact(url))):
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            make()
        assert time.monotonic() - started <= 2.0


async def _async_compact(url: str) -> None:
    async with AsyncCompactionClient(url) as ac:
        await ac.compact("s1")


def test_broker_down_fails_the_job_record(redis_url: str) -> None:
    settings = ClientSettings(redis_url=redis_url, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    with CompactionClient(settings) as client:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match="broker unavailable"):
            client.compact("s1")
        assert time.monotonic() - started <= 2.0
        (key,) = client.redis.keys("compactor:session:{s1}:job:*")
        record = client.redis.hgetall(key)
        assert record["state"] == "failed" and "broker unavailable" in record["error"]
        # The failed job does not hold the single-flight slot.
        assert client.redis.get("compactor:session:{s1}:inflight:compact") is None


@pytest.mark.parametrize("hung", ["redis", "broker"])
def test_a_server_that_never_answers_fails_fast(redis_url: str, hung: str) -> None:
    with socket.socket() as silent:  # accepts connections (kernel backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        settings = (ClientSettings(redis_url=url) if hung == "redis"
                    else ClientSettings(redis_url=redis_url, broker_url=url))
        with CompactionClient(settings) as client:
            started = time.monotonic()
            with pytest.raises(BrokerUnavailableError):
                client.compact("s1")
            assert time.monotonic() - started <= 2.0
