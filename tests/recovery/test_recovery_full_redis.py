"""A full Redis (``maxmemory`` with ``noeviction``) kills no worker and loses no message (issue
33, finding 3). Before: the worker that acked or took a message exited ("Unrecoverable error:
OutOfMemoryError", kombu's ZADD/ZREM of ``unacked_index`` inside MULTI), the message it had
popped was gone until the sweep re-sent it about a minute later, a refused commit ended as
"internal error", and a worker could not start against a full Redis."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import redis
from kombu import Connection, Exchange, Queue
from recovery.recovery_support import (
    RedisServer,
    WorkerProcess,
    model_env,
    wait_until,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, entries_of_type, new_session

from api_client import CompactionClient, JobFailedError, StorageFullError
from api_client.contract.routing import redis_transport_options
from helpers.sessions import user
from worker.celery_app.broker_transport import REQUEUE_S

MAXMEMORY = "48mb"


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", aof=False, extra=[
        "--maxmemory", MAXMEMORY, "--maxmemory-policy", "noeviction"]).start()
    yield server
    server.stop()


def fill(raw: redis.Redis[str]) -> None:
    """Write until Redis refuses, then keep it there: client buffers come and go by megabytes
    (a refused write's, a snapshot's reply), which would let the next small write in; with
    maxmemory at half of what is used, every write that needs memory is refused."""
    n = 0
    for size in (1 << 20, 1 << 14):
        while True:
            try:
                raw.set(f"filler:{n}", "x" * size)
            except redis.exceptions.OutOfMemoryError:
                break
            n += 1
    raw.config_set("maxmemory", int(raw.info("memory")["used_memory"]) // 2)


def free(raw: redis.Redis[str]) -> int:
    """Memory is back (the filler deleted, maxmemory as configured); returns when memory began
    to come back, on Redis's clock (ms): the commands go in one round trip, TIME first."""
    pipe = raw.pipeline(transaction=False)
    pipe.time()
    pipe.delete(*raw.keys("filler:*"))
    pipe.config_set("maxmemory", MAXMEMORY)
    (seconds, micros), *_ = pipe.execute()
    return int(seconds) * 1000 + int(micros) // 1000


def ended_ms(client: CompactionClient, session_id: str, job_id: str) -> int:
    """When the job's end was written, on Redis's clock: its end event's stream id (ms)."""
    [end] = completions(client, session_id, job_id)
    assert end.stream_id is not None
    return int(end.stream_id.split("-")[0])


def logged_ms(log: str, message: str) -> int:
    """When a worker logged ``message`` (its first time), on the machine's clock (ms)."""
    stamp = re.search(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}):[^\]]*\] " + re.escape(message),
                      log, re.MULTILINE)
    assert stamp is not None, f"not logged: {message}"
    return int(datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000)


def test_a_full_redis_kills_no_worker_and_loses_no_message(
        full_redis: RedisServer, model: ModelServer, demo_text: str, tmp_path: Path) -> None:
    env = worker_env(full_redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     COMPACTOR_CONCURRENCY="1", COMPACTOR_LEASE_TTL_S="3")
    raw: redis.Redis[str] = redis.Redis.from_url(full_redis.url, decode_responses=True)
    workers: list[WorkerProcess] = []
    with CompactionClient(full_redis.url) as client:
        a_sid, b_sid, c_sid = (new_session(client, demo_text) for _ in range(3))
        try:
            workers.append(WorkerProcess(env, "first", tmp_path))
            workers[0].wait_ready()
            model.stall_next(1)
            a = client.compact(a_sid)            # runs on the one slot, its model call held
            assert model.in_flight.wait(30)
            b = client.compact(b_sid)            # waits in the queue
            fill(raw)
            # The client's writes are refused with a typed error and change nothing.
            with pytest.raises(StorageFullError, match="out of memory"):
                client.compact(c_sid)
            with pytest.raises(StorageFullError):
                client.sessions.append(c_sid, user("x"))
            # A worker that starts now (a restart, a scale-up; mingle and gossip on, as
            # deployed) takes b's message: it holds it.
            workers.append(WorkerProcess(env, "second", tmp_path, options=()))
            wait_until(lambda: "holding message" in workers[1].log(), 60, "b to be held")
            model.release()                      # a's commit is refused: a fails...
            wait_until(lambda: "finish: waiting for Redis" in workers[0].log(), 30,
                       "a's failure to wait for memory")  # ... once its end can be written
            time.sleep(1)
            assert all(w.alive() for w in workers), [w.log()[-3000:] for w in workers]
            assert a.record().state.value == "running"  # its failure waits for memory too
            freed_ms = free(raw)
            with pytest.raises(JobFailedError, match=r"out of memory.*commit was refused"):
                a.wait(30)
            assert isinstance(b.wait(30), dict)
            # docs/recovery.md: held messages go back within REQUEUE_S, a waiting job end is
            # written within the ride-out's longest pause; both jobs ended under a second.
            back = logged_ms(workers[1].log(), "held message") - freed_ms
            a_end, b_end = (ended_ms(client, sid, h.id) - freed_ms
                            for sid, h in ((a_sid, a), (b_sid, b)))
            assert back <= REQUEUE_S * 1000, f"b back in its queue {back} ms after memory"
            assert a_end <= 2000, f"a's end written {a_end} ms after memory was back"
            assert max(a_end, b_end) < 1000, f"ended {a_end} and {b_end} ms after memory was back"
            assert isinstance(client.compact(c_sid).wait(30), dict)  # new work succeeds
            assert all(w.alive() for w in workers)
        finally:
            model.release()
            codes = [w.stop() for w in workers]
    logs = "\n".join(w.log() for w in workers)
    assert "Unrecoverable" not in logs and codes == [0, 0], logs[-4000:]
    assert entries_of_type(client, a_sid, "compaction") == []  # a's session is unchanged
    assert len(entries_of_type(client, b_sid, "compaction")) == 1


@pytest.mark.parametrize("transport", ["redis", "worker.celery_app.broker_transport:Transport"])
def test_an_ack_needs_no_memory(full_redis: RedisServer, transport: str) -> None:
    """kombu acks with ZREM + HDEL in MULTI, which a full Redis refuses as a whole: the stock
    transport raises (the worker exited), the worker's acks."""
    raw: redis.Redis[str] = redis.Redis.from_url(full_redis.url, decode_responses=True)
    queue = Queue("compactor.compact", Exchange("compactor.compact"), "compactor.compact")
    options = redis_transport_options("compactor")
    with Connection(full_redis.url, transport=transport,
                    transport_options=options) as conn:
        simple = conn.SimpleQueue(queue)
        simple.put({"job": "s:0123456789abcdef"})
        message = simple.get(timeout=5)
        assert raw.hlen("compactor:broker:unacked") == 1
        fill(raw)
        if transport == "redis":
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                message.ack()
        else:
            message.ack()
            assert raw.hlen("compactor:broker:unacked") == 0
        simple.close()
