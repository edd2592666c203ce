"""Redis outages: the worker survives them at any moment and consumes again afterwards."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from recovery.recovery_support import (
    RedisServer,
    WorkerProcess,
    model_env,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session

from api_client import CompactionClient


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
            aof_redis.restart(down_s=4)
            time.sleep(3)  # the consumer notices the lost connection and handles it
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
