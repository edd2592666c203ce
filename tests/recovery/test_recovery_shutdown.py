"""Graceful stop: on SIGTERM a worker takes no new job, finishes the running one (within its
deadline) and exits 0; what it had not started is left in the queue for the next worker."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

from recovery.recovery_support import (
    RedisServer,
    WorkerProcess,
    model_env,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, new_session

from api_client import CompactionClient


def test_sigterm_finishes_the_running_job_and_hands_back_the_rest(
        aof_redis: RedisServer, model: ModelServer, demo_text: str, tmp_path: Path) -> None:
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     COMPACTOR_CONCURRENCY="1", COMPACTOR_JOB_DEADLINE_S="30",
                     COMPACTOR_VISIBILITY_TIMEOUT_S="60")
    with CompactionClient(aof_redis.url) as client:
        first, second = (new_session(client, demo_text) for _ in range(2))
        worker = WorkerProcess(env, "stopping", tmp_path)
        worker.wait_ready()
        model.stall_next(1)
        running = client.compact(first, reason="threshold")
        assert model.in_flight.wait(30)
        waiting = client.compact(second, reason="threshold")
        worker.proc.send_signal(signal.SIGTERM)
        threading.Timer(2.0, model.release).start()  # the model answers after the signal
        started = time.monotonic()
        code = worker.proc.wait(40)
        assert code == 0, worker.log()[-3000:]
        assert time.monotonic() - started < 30  # within the job deadline
        assert running.record().state.value == "succeeded"
        assert running.record().attempts == 1
        assert waiting.record().state.value == "queued", "the stopping worker took a new job"
        successor = WorkerProcess(env, "successor", tmp_path)
        try:
            assert isinstance(waiting.wait(60), dict)
        finally:
            successor.stop()
        assert len(completions(client, first, running.id)) == 1
        assert len(completions(client, second, waiting.id)) == 1
