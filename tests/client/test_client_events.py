"""Event streams: publish, tail, consumer groups (sync and asyncio)."""

from __future__ import annotations

import asyncio
import threading

import redis

from api_client import (
    AsyncCompactionClient,
    ClientSettings,
    CompactionClient,
    EventType,
    JobEvent,
    JobKind,
)
from helpers.jobs import worker_jobs


def event(n: int, sid: str = "s1", type: EventType = EventType.COMPACTION_START) -> JobEvent:
    return JobEvent(type=type, job_id=f"{sid}:{n:016x}", session_id=sid, kind=JobKind.COMPACT,
                    attempt=1, model="p/m", tokens_before=1000 + n, duration_ms=n)


def test_publish_goes_to_the_session_and_the_global_stream(client: CompactionClient,
                                                           raw: redis.Redis[str]) -> None:
    worker_jobs(client).publish(event(1, "a"))
    worker_jobs(client).publish(event(2, "b"))
    assert [e.job_id for e in client.events("a", follow=False)] == ["a:0000000000000001"]
    everything = list(client.events(follow=False))
    assert [e.session_id for e in everything] == ["a", "b"]
    first = everything[0]
    assert (first.type, first.attempt, first.model, first.tokens_before, first.duration_ms) == (
        EventType.COMPACTION_START, 1, "p/m", 1001, 1)
    assert first.stream_id == raw.xrange("compactor:events")[0][0]
    fields = raw.xrange("compactor:session:{a}:events")[0][1]
    assert (fields["type"], fields["job"]) == ("compaction_start", "a:0000000000000001")


def test_streams_are_capped(redis_url: str, raw: redis.Redis[str]) -> None:
    settings = ClientSettings(redis_url=redis_url, event_stream_maxlen=10, session_event_maxlen=5)
    with CompactionClient(settings) as client:
        for n in range(300):
            worker_jobs(client).publish(event(n))
    # MAXLEN ~ trims whole nodes: the bound is approximate but far below what was written.
    assert raw.xlen("compactor:events") < 300 and raw.xlen("compactor:session:{s1}:events") < 300


def test_tailing_sees_only_new_events_and_blocks_until_one_comes(client: CompactionClient) -> None:
    worker_jobs(client).publish(event(1))
    reader = client.events("s1", block_ms=100)
    timer = threading.Timer(0.3, lambda: worker_jobs(client).publish(event(2)))
    timer.start()
    got = next(reader)  # blocks in XREAD until the timer publishes
    assert got.job_id == "s1:0000000000000002"
    timer.join()
    reader.close()


def test_start_replays_from_a_stream_id(client: CompactionClient) -> None:
    for n in range(3):
        worker_jobs(client).publish(event(n))
    first = next(iter(client.events("s1", follow=False)))
    rest = [e.job_id for e in client.events("s1", follow=False, start=first.stream_id)]
    assert rest == ["s1:0000000000000001", "s1:0000000000000002"]


def test_consumer_group_shares_events_and_redelivers_unacked(client: CompactionClient) -> None:
    a = client.events(group="platform", consumer="a", follow=False, start="0")
    b = client.events(group="platform", consumer="b", follow=False, start="0")
    worker_jobs(client).publish(event(0))
    worker_jobs(client).publish(event(1))
    got_a = next(a)  # a's read claims both events; it has processed none yet
    worker_jobs(client).publish(event(2))
    worker_jobs(client).publish(event(3))
    got_b = [e.job_id for e in b]  # b gets only what nobody in the group has claimed
    assert got_a.job_id == "s1:0000000000000000"
    assert got_b == ["s1:0000000000000002", "s1:0000000000000003"]
    assert client.redis.xpending("compactor:events", "platform")["pending"] == 2
    # Consumer a "crashes" before acking: a new reader with its name gets both again.
    again = client.events(group="platform", consumer="a", follow=False)
    assert [e.job_id for e in again] == ["s1:0000000000000000", "s1:0000000000000001"]
    assert client.redis.xpending("compactor:events", "platform")["pending"] == 0


def test_manual_ack(client: CompactionClient) -> None:
    worker_jobs(client).publish(event(1))
    reader = client.events(group="g", consumer="c", follow=False, start="0", auto_ack=False)
    got = list(reader)
    assert client.redis.xpending("compactor:events", "g")["pending"] == 1
    reader.ack(got[0])
    assert client.redis.xpending("compactor:events", "g")["pending"] == 0


def test_async_readers(redis_url: str) -> None:
    async def scenario() -> tuple[list[str], list[str], str]:
        async with AsyncCompactionClient(redis_url) as ac:
            sync = CompactionClient(redis_url)
            for n in range(3):
                worker_jobs(sync).publish(event(n))
            history = [e.job_id async for e in ac.events("s1", follow=False)]
            grouped_reader = ac.events(group="g", consumer="c", follow=False, start="0")
            grouped = [e.job_id async for e in grouped_reader]
            tail = ac.events(block_ms=50)
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, worker_jobs(sync).publish, event(9))
            latest = await anext(tail)
            await tail.aclose()
            pending = await ac.redis.xpending("compactor:events", "g")
            sync.close()
            assert pending["pending"] == 0
            return history, grouped, latest.job_id

    history, grouped, latest = asyncio.run(scenario())
    assert history == grouped == [f"s1:{n:016x}" for n in range(3)]
    assert latest == "s1:0000000000000009"
