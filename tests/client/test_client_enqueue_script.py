"""Enqueue in one round trip: the script checks the session and target, writes the record and
pushes kombu's message and the task-sent event; instructions are never dropped."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import threading
import time
import uuid
from typing import Any

import pytest
import redis
from client.conftest import seed_sessions

from api_client import AsyncCompactionClient, ClientSettings, CompactionClient
from api_client.contract.errors import EntryNotFoundError, JobConflictError, SessionNotFoundError
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.keys import KeyLayout
from api_client.contract.redis_conn import redis_db, same_redis
from api_client.contract.routing import queue_list, redis_transport_options, route_for
from api_client.contract.task_messages import event_channel, task_push
from helpers.jobs import worker_jobs

BROKER = KeyLayout().broker  # kombu's global_keyprefix: every broker list starts with it


class Monitor:
    """The commands clients send (not those scripts run), seen through MONITOR."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.raw: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
        self.marker: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
        self.marker.ping()  # its connection handshake happens before the monitoring starts
        self._monitor = self.raw.monitor().__enter__()

    def until_marker(self) -> list[str]:
        """Every client command since the last call (the marker is an ECHO sent now)."""
        self.marker.echo("end-of-test-marker")
        seen = []
        while True:
            info = self._monitor.next_command()
            if info["command"] == "ECHO end-of-test-marker":
                return seen
            if info.get("client_type") != "lua" and info["command"] != "PING":
                seen.append(info["command"].split()[0].upper())


@pytest.mark.parametrize(
    ("queue", "priority", "key"),
    [("q", 0, "q"), ("q", 2, "q"), ("q", 3, "q:3"), ("q", 6, "q:6"), ("q", 9, "q:9"),
     ("q", 12, "q:9")],
)
def test_queue_list_names_as_kombu(queue: str, priority: int, key: str) -> None:
    from kombu.transport.redis import Channel

    assert queue_list(queue, priority) == key
    channel = Channel.__new__(Channel)
    channel.priority_steps, channel.sep = [0, 3, 6, 9], ":"
    assert Channel._q_for_pri(channel, queue, priority) == key


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [("redis://h:6379/0", "redis://h:6379/0", True), ("redis://h/0", "redis://h:6379", True),
     ("redis://h:6379/0", "redis://h:6379/1", False), ("redis://h:6379/0", "redis://g:6379/0",
                                                       False),
     ("redis://h:6379/0", "amqp://h:5672//", False), ("redis://h/2", "redis://h?db=2", True)],
)
def test_same_redis(a: str, b: str, same: bool) -> None:
    assert same_redis(a, b) is same
    assert redis_db("redis://h:1/5") == 5 and event_channel(5) == "/5.celeryev/task.sent"
    assert event_channel(5, "p:broker:") == "p:broker:/5.celeryev/task.sent"


def test_message_decodes_as_kombu_and_celery_read_it() -> None:
    from kombu.transport.virtual import Channel, Message

    push = task_push("compactor.compact", "s:0123456789abcdef", "compactor.compact", 3)
    envelope = json.loads(push.message)
    message = Message(envelope, channel=Channel.__new__(Channel))
    assert message.decode() == [["s:0123456789abcdef"], {},
                                {"callbacks": None, "errbacks": None, "chain": None,
                                 "chord": None}]
    assert message.headers["task"] == "compactor.compact"
    assert message.headers["id"] == "s:0123456789abcdef"
    assert message.properties["priority"] == 3
    event = json.loads(base64.b64decode(json.loads(push.event)["body"]))
    assert (event["type"], event["uuid"], event["queue"]) == (
        "task-sent", "s:0123456789abcdef", "compactor.compact")
    assert abs(event["timestamp"] - time.time()) < 60 and event["pid"] == os.getpid()
    tags = {json.loads(task_push("t", "s:1", "q", 0).message)["properties"]["delivery_tag"]
            for _ in range(200)} | {message.properties["delivery_tag"]}
    assert len(tags) == 201
    assert {uuid.UUID(tag).version for tag in tags} == {4}
    assert all(str(uuid.UUID(tag)) == tag for tag in tags)


def test_one_round_trip_for_a_new_job(client: CompactionClient, raw: redis.Redis[str]) -> None:
    seed_sessions(client.settings.redis_url, "s1")
    client.warm()
    monitor = Monitor(client.settings.redis_url)
    handle = client.compact("s1", "threshold")
    # A threshold compaction tries the session's draft and, with none, enqueues in the same
    # script (compact_auto.lua, docs/instant-compaction.md): one round trip too.
    assert monitor.until_marker() == ["EVALSHA"]
    assert client.transport.broker.name == "inline"
    (message,) = [json.loads(m) for m in raw.lrange(BROKER + "compactor.compact:3", 0, -1)]
    assert message["headers"]["id"] == handle.id
    monitor.until_marker()  # drop the test's own reads
    assert client.compact("s1", "manual").coalesced
    assert monitor.until_marker() == ["EVALSHA"]


def _connected_clients(raw: redis.Redis[str]) -> int:
    return int(raw.info("clients")["connected_clients"])


def test_warm_loads_every_script_and_writes_nothing(
        client: CompactionClient, raw: redis.Redis[str]) -> None:
    # warm() loads the scripts (one pipeline), so no first EVALSHA meets NOSCRIPT.
    from api_client.contract.lua_scripts import lua, script_names

    raw.script_flush()
    before = raw.dbsize()
    raw.config_resetstat()
    client.warm()
    assert raw.dbsize() == before
    texts = [lua(n) for n in script_names()]
    shas = [hashlib.sha1(text.encode()).hexdigest() for text in texts]
    assert len(shas) >= 7 and all(raw.script_exists(*shas))
    assert not any(name in raw.info("commandstats") for name in (
        "cmdstat_hset", "cmdstat_zadd", "cmdstat_lpush", "cmdstat_evalsha"))


def test_warm_writes_nothing_async_or_with_the_broker_elsewhere(
        settings: ClientSettings, own_redis: Any, raw: redis.Redis[str]) -> None:
    # warm() on the asyncio client and with the broker on another Redis writes nothing either.
    broker: redis.Redis[str] = redis.Redis.from_url(own_redis.url, decode_responses=True)
    before = raw.dbsize(), broker.dbsize()

    async def run() -> None:
        async with AsyncCompactionClient(settings) as ac:
            await ac.warm()

    asyncio.run(run())
    with CompactionClient(settings.model_copy(update={"broker_url": own_redis.url})) as client:
        assert client.transport.broker.name == "redis"
        client.warm()
    assert (raw.dbsize(), broker.dbsize()) == before
    broker.close()


def test_async_one_round_trip(settings: ClientSettings, raw: redis.Redis[str]) -> None:
    seed_sessions(settings.redis_url, "s1")

    async def run() -> tuple[str, list[str], str, list[str]]:
        async with AsyncCompactionClient(settings) as ac:
            await ac.warm()
            monitor = Monitor(settings.redis_url)
            job_id = (await ac.prune("s1")).id
            sent = monitor.until_marker()
            overflow = (await ac.compact("s1", "overflow")).id
            return job_id, sent, overflow, monitor.until_marker()

    job_id, sent, overflow, sent_overflow = asyncio.run(run())
    assert sent == ["EVALSHA"] and sent_overflow == ["EVALSHA"]
    (message,) = [json.loads(m) for m in raw.lrange(BROKER + "compactor.prune:6", 0, -1)]
    assert message["headers"]["id"] == job_id
    (urgent,) = [json.loads(m) for m in raw.lrange(BROKER + "compactor.urgent", 0, -1)]
    assert urgent["headers"]["id"] == overflow


def test_missing_session_and_target_write_nothing(client: CompactionClient,
                                                  raw: redis.Redis[str]) -> None:
    with pytest.raises(SessionNotFoundError, match="Session nope not found"):
        client.compact("nope")
    seed_sessions(client.settings.redis_url, "s1")
    with pytest.raises(EntryNotFoundError, match="Entry t9 not found"):
        client.branch_summary("s1", "t9")
    # The seeded session's keys and its count of stored bytes, nothing else.
    seeded = [*raw.keys("compactor:session:{s1}:*"), client.layout.tenant_bytes("default")]
    assert sorted(raw.keys("*")) == sorted(seeded)
    assert not raw.keys("*inflight*") and not raw.keys("*:job:*") and not raw.keys("*events*")


def test_instructions_join_a_queued_job_or_are_refused(client: CompactionClient) -> None:
    seed_sessions(client.settings.redis_url, "s1")
    queued = client.compact("s1", "threshold")
    joined = client.compact("s1", "manual", instructions="keep the parser decisions")
    assert (joined.id, joined.coalesced) == (queued.id, True)
    record = queued.record()
    assert record.instructions == "keep the parser decisions"
    assert record.reason == "threshold"  # the more urgent reason and its queue stay
    with pytest.raises(JobConflictError, match="other instructions"):
        client.compact("s1", "manual", instructions="something else")
    jobs = worker_jobs(client)
    jobs.acquire_lease(queued.id, "w", 30)
    jobs.mark_running(queued.id)
    assert client.compact("s1", "manual").id == queued.id  # no instructions: joins the run
    with pytest.raises(JobConflictError, match="cannot take now") as caught:
        client.compact("s1", "manual", instructions="keep the parser decisions, and tests")
    assert caught.value.job_id == queued.id


def test_separate_broker_redis_gets_one_pipeline(redis_url: str, own_redis: Any,
                                                 raw: redis.Redis[str]) -> None:
    seed_sessions(redis_url, "s1")
    settings = ClientSettings(redis_url=redis_url, broker_url=own_redis.url)
    broker: redis.Redis[str] = redis.Redis.from_url(own_redis.url, decode_responses=True)
    with CompactionClient(settings) as client:
        assert client.transport.broker.name == "redis"
        client.warm()
        handle = client.compact("s1", "overflow")
    (message,) = [json.loads(m) for m in broker.lrange(BROKER + "compactor.urgent", 0, -1)]
    assert message["headers"]["id"] == handle.id
    assert raw.llen(BROKER + "compactor.urgent") == 0
    broker.close()


def test_task_sent_event_reaches_a_celery_event_receiver(settings: ClientSettings) -> None:
    """Flower's own way of listening: a Celery EventReceiver on the broker."""
    from celery import Celery

    sids = [f"s{i}" for i in range(20)]
    seed_sessions(settings.redis_url, *sids)
    app = Celery("receiver", broker=settings.redis_url, set_as_current=False)
    app.conf.broker_transport_options = redis_transport_options("compactor")  # Flower's too
    seen: list[dict[str, Any]] = []

    def listen() -> None:
        with app.connection() as conn:
            def on_sent(event: dict[str, Any]) -> None:
                seen.append(event)
                receiver.should_stop = True

            receiver = app.events.Receiver(conn, handlers={"task-sent": on_sent})
            receiver.capture(limit=None, timeout=None, wakeup=False)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    sent: list[str] = []
    with CompactionClient(ClientSettings(redis_url=settings.redis_url)) as client:
        for sid in sids:  # pub/sub keeps nothing: send until the receiver has subscribed
            sent.append(client.compact(sid, "threshold").id)
            thread.join(0.25)
            if seen:
                break
    thread.join(5)
    app.close()
    assert seen, "no task-sent event"
    event = seen[0]
    assert event["uuid"] in sent
    assert (event["name"], event["queue"], event["type"]) == (
        "compactor.compact", "compactor.compact", "task-sent")


def test_envelope_matches_what_celery_pushes(client: CompactionClient,
                                             raw: redis.Redis[str]) -> None:
    """The same task sent by Celery (the kombu path RabbitMQ keeps) and built by us."""
    route = route_for(JobKind.COMPACT, CompactReason.THRESHOLD)
    client.transport.producer.send("s1:00000000000000aa", route)
    (celery_made,) = [json.loads(m) for m in raw.lrange(BROKER + "compactor.compact:3", 0, -1)]
    ours = json.loads(task_push(route.task, "s1:00000000000000aa", route.queue,
                                route.priority).message)
    volatile = {"delivery_tag", "reply_to", "origin"}

    def stable(d: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in d.items() if k not in volatile}

    assert ours["body"] == celery_made["body"]
    assert stable(ours["headers"]) == stable(celery_made["headers"])
    celery_props = {k: v for k, v in celery_made["properties"].items()
                    if k not in ("argsrepr", "kwargsrepr")}  # Celery repeats them there
    assert stable(ours["properties"]) == stable(celery_props)
    assert set(ours) == set(celery_made)
