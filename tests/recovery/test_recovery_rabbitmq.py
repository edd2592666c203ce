"""RabbitMQ as broker (sessions, records and events stay in Redis): priority queues, routing,
the client's fast failure, and takeover after a worker's death."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from recovery.recovery_support import (
    RedisServer,
    free_port,
    kill_and_recover,
    model_env,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session, running_worker, runtime_settings

from api_client import BrokerUnavailableError, ClientSettings, CompactionClient


def test_priorities_and_routing_on_rabbitmq(redis_url: str, amqp_url: str, model: ModelServer,
                                            demo_text: str) -> None:
    settings = runtime_settings(redis_url, broker_url=amqp_url, models=[model.candidate()],
                                concurrency=1)
    with CompactionClient(settings.client) as client:
        sids = [new_session(client, demo_text) for _ in range(3)]
        # Queued before any worker runs: manual (priority 6), then threshold (3) on the same
        # queue, and a prune on its own queue.
        manual = client.compact(sids[0], reason="manual")
        threshold = client.compact(sids[1], reason="threshold")
        prune = client.prune(sids[2])
        with running_worker(settings):
            for handle in (manual, threshold, prune):
                handle.wait(60)
        started = {h.id: h.record().started_at for h in (manual, threshold)}
        assert started[threshold.id] < started[manual.id], "priority ignored by the queue"
        assert all(h.record().state.value == "succeeded" for h in (manual, threshold, prune))


@pytest.mark.parametrize("listen", [False, True], ids=["refused", "silent"])
def test_client_fails_fast_on_an_unreachable_rabbitmq(redis_url: str, listen: bool) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0 if listen else free_port()))
        port = silent.getsockname()[1]
        if listen:
            silent.listen(16)  # accepts (kernel backlog), never answers the AMQP handshake
        else:
            silent.close()
        settings = ClientSettings(redis_url=redis_url,
                                  broker_url=f"amqp://guest:guest@127.0.0.1:{port}//")
        with CompactionClient(settings) as client:
            sid = client.sessions.create()
            started = time.monotonic()
            with pytest.raises(BrokerUnavailableError):
                client.compact(sid)
            assert time.monotonic() - started <= 2.0


def test_a_killed_workers_job_is_taken_over_on_rabbitmq(
        aof_redis: RedisServer, amqp_url: str, model: ModelServer, demo_text: str,
        tmp_path: Path) -> None:
    env = worker_env(aof_redis.url, COMPACTOR_BROKER_URL=amqp_url,
                     COMPACTOR_MODELS=model_env(model.base_url), COMPACTOR_LEASE_TTL_S="4")
    settings = ClientSettings(redis_url=aof_redis.url, broker_url=amqp_url)
    with CompactionClient(settings) as client:
        rerun, done = kill_and_recover(client, env, model, new_session(client, demo_text),
                                       tmp_path)
    # RabbitMQ redelivers at once; the new delivery waits for the dead lease (4 s here).
    assert rerun <= 12, f"ran again {rerun:.1f} s after the kill"
    assert done <= 30, f"done {done:.1f} s after the kill"
