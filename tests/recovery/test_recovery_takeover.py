"""Takeover: a SIGKILLed worker's job runs again on a live worker within seconds (default
lease and sweep settings), ends exactly once, and the late duplicate does nothing."""

from __future__ import annotations

import time
from pathlib import Path

from recovery.recovery_support import (
    RedisServer,
    WorkerProcess,
    model_env,
    wait_until,
    worker_env,
)
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, entries_of_type, new_session

from api_client import CompactionClient


def kill_and_recover(client: CompactionClient, env: dict[str, str], model: ModelServer,
                     sid: str, folder: Path) -> tuple[float, float]:
    """SIGKILL the worker running a job; (s until it runs again, s until it is done)."""
    doomed = WorkerProcess(env, "doomed", folder)
    survivor: WorkerProcess | None = None
    try:
        doomed.wait_ready()
        model.stall_next(1)
        handle = client.compact(sid, reason="threshold")
        assert model.in_flight.wait(30), "the first worker never called the model"
        survivor = WorkerProcess(env, "survivor", folder)
        survivor.wait_ready()
        doomed.kill()
        killed = time.monotonic()
        wait_until(lambda: handle.record().attempts >= 2, 60, "the job to run again", 0.05)
        rerun = time.monotonic() - killed
        assert isinstance(handle.wait(60), dict)
        done = time.monotonic() - killed
    finally:
        model.release()
        for proc in (doomed, survivor):
            if proc is not None:
                proc.stop()
    record = handle.record()
    assert record.state.value == "succeeded" and record.attempts == 2
    assert len(entries_of_type(client, sid, "compaction")) == 1
    assert len(completions(client, sid, handle.id)) == 1
    return rerun, done


def test_a_killed_workers_job_is_taken_over_in_seconds(
        aof_redis: RedisServer, model: ModelServer, demo_text: str, tmp_path: Path) -> None:
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url))
    with CompactionClient(aof_redis.url) as client:
        rerun, done = kill_and_recover(client, env, model, new_session(client, demo_text),
                                       tmp_path)
    # Defaults: lease 10 s + sweep 2 s; generous bounds for a noisy machine.
    assert rerun <= 20, f"ran again {rerun:.1f} s after the kill"
    assert done <= 40, f"done {done:.1f} s after the kill"
