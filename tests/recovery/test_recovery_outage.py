"""Redis outages: the worker survives them at any moment and consumes again afterwards."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from recovery.recovery_support import (
    RedisServer,
    WorkerProcess,
    model_env,
    wait_until,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import CALLS_AT_ONCE, completions, entries_of_type, new_session

from api_client import ClientSettings, CompactionClient, JobFailedError, JobHandle


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_worker_survives_an_outage_with_a_busy_and_a_free_slot(
        aof_redis: RedisServer, model: ModelServer, demo_text: str, tmp_path: Path,
        pool: str) -> None:
    # kombu 5.7 used to end such a worker with "Unrecoverable error: AttributeError(...
    # 'hostname')" and exit status 0 (see worker/transport.py).
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     COMPACTOR_LEASE_TTL_S="3", COMPACTOR_POOL=pool)
    with CompactionClient(aof_redis.url) as client:
        sid = new_session(client, demo_text)
        other = new_session(client, demo_text)
        worker = WorkerProcess(env, "outage", tmp_path)
        try:
            worker.wait_ready()
            model.stall_next(1)
            busy = client.compact(sid, reason="manual")
            assert model.in_flight.wait(30), "the worker never called the model"
            aof_redis.restart(down_s=2)
            time.sleep(2)  # the consumer notices the lost connection and handles it
            assert worker.alive(), f"worker exited:\n{worker.log()[-3000:]}"
            model.release()
            assert isinstance(busy.wait(60), dict)
            after = client.compact(other, reason="manual")
            assert isinstance(after.wait(60), dict), "the worker no longer consumes"
            assert worker.alive()
        finally:
            code = worker.stop()
        assert "Unrecoverable error" not in worker.log(), worker.log()[-3000:]
        assert code == 0


def test_redis_restart_with_queued_and_running_jobs_loses_nothing(
        aof_redis: RedisServer, model: ModelServer, demo_text: str, tmp_path: Path) -> None:
    """Two jobs finish their model calls while Redis is down, six wait in the queue (AOF), and
    every pending ``wait()`` rides the outage out. Each job ends once, none calls the model
    again (3 calls per job), and no message is dropped by a failed retry publish."""
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     COMPACTOR_LEASE_TTL_S="3")
    results: dict[str, object] = {}
    with CompactionClient(aof_redis.url) as client:
        sids = [new_session(client, demo_text) for _ in range(8)]
        worker = WorkerProcess(env, "restart", tmp_path)
        try:
            worker.wait_ready()
            held = model.held
            model.stall_next(100)
            handles = [client.compact(sid, reason="threshold") for sid in sids]
            wait_until(lambda: model.held - held == 2 * CALLS_AT_ONCE and sum(
                h.record().state.value == "running" for h in handles) == 2, 30,
                "two jobs calling the model")
            waiters = [threading.Thread(target=_wait_into, args=(h, results)) for h in handles]
            for t in waiters:
                t.start()
            aof_redis.stop()
            model.release()  # the running jobs reach their commit while Redis is down
            time.sleep(4)
            aof_redis.start()
            for t in waiters:
                t.join(120)
        finally:
            worker.stop()
        log = worker.log()
        assert {h.id: results.get(h.id) for h in handles} == {h.id: "ok" for h in handles}, \
            log[-4000:]
        for handle, sid in zip(handles, sids, strict=True):
            assert handle.record().state.value == "succeeded"
            assert len(completions(client, sid, handle.id)) == 1
            assert len(entries_of_type(client, sid, "compaction")) == 1
    assert model.requests == 3 * len(sids), "a job called the model again after the outage"
    assert "Reject" not in log and "Unrecoverable" not in log


def _wait_into(handle: JobHandle, results: dict[str, object]) -> None:
    try:
        results[handle.id] = "ok" if isinstance(handle.wait(90), dict) else "no entry"
    except Exception as err:
        results[handle.id] = repr(err)


def test_retries_used_up_end_the_job_failed_and_free_the_session(
        aof_redis: RedisServer, demo_text: str, tmp_path: Path) -> None:
    """Session data down, broker up: the delivery retries in place (keeping its message),
    then ends the job ``failed`` once Redis takes the write, and frees the single-flight key."""
    broker = RedisServer(tmp_path / "broker", aof=False).start()
    env = worker_env(aof_redis.url, COMPACTOR_BROKER_URL=broker.url,
                     COMPACTOR_RESULT_BACKEND=broker.url, COMPACTOR_TASK_MAX_RETRIES="1",
                     COMPACTOR_TASK_RETRY_BACKOFF_S="0.5", COMPACTOR_LEASE_TTL_S="5")
    settings = ClientSettings(redis_url=aof_redis.url, broker_url=broker.url)
    try:
        with CompactionClient(settings) as client:
            sid = new_session(client, demo_text)
            handle = client.compact(sid, reason="threshold")
            aof_redis.stop()
            worker = WorkerProcess(env, "give-up", tmp_path)
            try:
                wait_until(lambda: "giving up" in worker.log(), 60, "the delivery to give up")
                aof_redis.start()
                with pytest.raises(JobFailedError, match="Redis unavailable after 1 retries"):
                    handle.wait(30)
            finally:
                worker.stop()
            assert handle.record().state.value == "failed"
            assert client.redis.get(client.layout.session(sid).inflight("compact")) is None
            assert [e.state.value for e in completions(client, sid, handle.id)
                    if e.state] == ["failed"]
            assert client.compact(sid, reason="threshold").id != handle.id
    finally:
        broker.stop()
