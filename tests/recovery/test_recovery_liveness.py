"""Worker liveness (docs/recovery.md "Worker liveness") with a real worker process and the HTTP
API: ``GET /v1/workers`` counts it while it runs and drops to 0 within its heartbeat's TTL after
a SIGKILL, and the job it was running shows ``workerLost``. With the default settings, the job
of a worker killed during its model call is done within 10 s of the kill on a Redis broker and
on RabbitMQ (docs/recovery.md "Recovery figures")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from recovery.recovery_support import (
    RedisServer,
    WorkerProcess,
    kill_and_recover,
    model_env,
    wait_until,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session
from server.server_support import TOKEN, running_api

from api_client import ClientSettings, CompactionClient
from worker.observability.health import BEAT_TTL_S

# docs/recovery.md "Recovery figures": kill → job done, with the default settings.
DONE_WITHIN_S = 10.0


def _alive(http: httpx.Client) -> int:
    reply = http.get("/v1/workers")
    assert reply.status_code == 200, reply.text
    return int(reply.json()["alive"])


def _job(http: httpx.Client, job_id: str) -> dict[str, Any]:
    reply = http.get(f"/v1/jobs/{job_id}")
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def test_workers_alive_and_a_lost_workers_job(aof_redis: RedisServer, model: ModelServer,
                                              demo_text: str, tmp_path: Path) -> None:
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url))
    worker = WorkerProcess(env, "liveness", tmp_path)
    try:
        with running_api(aof_redis.url) as url, \
                httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=10) as http, \
                CompactionClient(aof_redis.url) as client:
            assert http.get("/v1/workers", headers={"Authorization": ""}).status_code == 401
            worker.wait_ready()
            wait_until(lambda: _alive(http) >= 1, 30, "the worker's heartbeat")
            model.stall_next(1)
            handle = client.compact(new_session(client, demo_text), reason="threshold")
            assert model.in_flight.wait(30), "the worker never called the model"
            running = _job(http, handle.id)
            assert running["state"] == "running" and "workerLost" not in running
            worker.kill()
            # The heartbeat counts BEAT_TTL_S after the last one (written every second); the
            # bound leaves a loaded machine some room.
            wait_until(lambda: _alive(http) == 0, BEAT_TTL_S + 3, "alive to drop to 0")
            lost = wait_until(lambda: _job(http, handle.id).get("workerLost"), BEAT_TTL_S + 3,
                              "workerLost on the running job")
            assert lost is True
            assert _job(http, handle.id)["state"] == "running"
    finally:
        model.release()
        worker.stop()


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_killed_workers_job_is_done_within_10_s_with_the_defaults(
        broker: str, aof_redis: RedisServer, model: ModelServer, demo_text: str,
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # No lease, sweep or visibility setting here: the defaults are what is measured.
    amqp = request.getfixturevalue("amqp_url") if broker == "rabbitmq" else None
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     **({"COMPACTOR_BROKER_URL": amqp} if amqp else {}))
    with CompactionClient(ClientSettings(redis_url=aof_redis.url, broker_url=amqp)) as client:
        _, done = kill_and_recover(client, env, model, new_session(client, demo_text), tmp_path,
                                   done_within_s=DONE_WITHIN_S)
    assert done <= DONE_WITHIN_S, f"done {done:.1f} s after the kill"
