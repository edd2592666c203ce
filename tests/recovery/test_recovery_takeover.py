"""Takeover: a SIGKILLed worker's job runs again on a live worker within a lease plus a sweep
interval, ends exactly once, and the late duplicate does nothing."""

from __future__ import annotations

from pathlib import Path

from recovery.recovery_support import RedisServer, kill_and_recover, model_env, worker_env
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import new_session

from api_client import CompactionClient


def test_a_killed_workers_job_is_taken_over_in_seconds(
        aof_redis: RedisServer, model: ModelServer, demo_text: str, tmp_path: Path) -> None:
    # A lease of 4 s (the default is 3 s: test_recovery_liveness.py and `make recovery-bench`
    # measure the defaults).
    env = worker_env(aof_redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     COMPACTOR_LEASE_TTL_S="4")
    with CompactionClient(aof_redis.url) as client:
        rerun, done = kill_and_recover(client, env, model, new_session(client, demo_text),
                                       tmp_path)
    # Lease 4 s + a sweep interval; generous bounds for a noisy machine.
    assert rerun <= 12, f"ran again {rerun:.1f} s after the kill"
    assert done <= 30, f"done {done:.1f} s after the kill"
