"""Worker processes: a worker killed mid-job, the start-up check, Redis down at enqueue, the
demo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker
from runtime.runtime_model_server import ModelServer
from runtime.runtime_support import completions, entries_of_type, new_session, runtime_settings

from api_client import BrokerUnavailableError, CompactionClient, ConfigurationError
from worker.celery_app import create_app

REPO = Path(__file__).resolve().parents[2]


def worker_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({
        "COMPACTOR_REDIS_URL": redis_url, "COMPACTOR_HOOKS_ENTRY_POINTS": "false",
        "COMPACTOR_CONCURRENCY": "1", "PYTHONPATH": str(REPO / "tests"),
    })
    env.update(extra)
    return env


def spawn_worker(env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "worker", "--loglevel", "WARNING",
         "--hostname", f"{name}@%h",
         "--without-mingle", "--without-gossip"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_worker_killed_mid_job_the_job_completes_once(module_redis: str, model: ModelServer,
                                                      demo_text: str) -> None:
    candidate = {"provider": "openai", "model": "loop", "base_url": model.base_url, "api_key": "k"}
    env = worker_env(module_redis, COMPACTOR_MODELS=json.dumps([candidate]),
                     COMPACTOR_JOB_DEADLINE_S="4", COMPACTOR_VISIBILITY_TIMEOUT_S="5",
                     COMPACTOR_LEASE_TTL_S="1.5", COMPACTOR_UNACKED_RESTORE_INTERVAL_S="0.5")
    with CompactionClient(module_redis) as client:
        sid = new_session(client, demo_text)
        model.stall_next(1)
        first = spawn_worker(env, "doomed")
        second: subprocess.Popen[bytes] | None = None
        try:
            handle = client.compact(sid, reason="manual")
            assert model.in_flight.wait(30), "the first worker never called the model"
            first.send_signal(signal.SIGKILL)
            first.wait(5)
            second = spawn_worker(env, "survivor")
            entry = handle.wait(40)  # visibility timeout (5 s) + one restore sweep + the job
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
        assert isinstance(entry, dict)
        record = handle.record()
        assert record.state.value == "succeeded" and record.attempts == 2
        assert [e["id"] for e in entries_of_type(client, sid, "compaction")] == [entry["id"]]
        assert len(completions(client, sid, handle.id)) == 1


def test_worker_refuses_a_visibility_timeout_shorter_than_the_deadline(module_redis: str) -> None:
    env = worker_env(module_redis, COMPACTOR_JOB_DEADLINE_S="10",
                     COMPACTOR_VISIBILITY_TIMEOUT_S="5")
    proc = subprocess.run([sys.executable, "-m", "worker", "worker"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "compactor: error: visibility timeout (5 s) must be longer than the job deadline (10 s): "
        "a job still running when it expires would be delivered to a second worker. Raise "
        "COMPACTOR_VISIBILITY_TIMEOUT_S or lower COMPACTOR_JOB_DEADLINE_S."]


def test_embedded_worker_refuses_it_too(module_redis: str) -> None:
    app = create_app(runtime_settings(module_redis, job_deadline_s=30, visibility_timeout_s=30))
    with pytest.raises(ConfigurationError, match="visibility timeout"), \
            start_worker(app, pool="threads", perform_ping_check=False):
        pass


def test_enqueue_with_redis_down_fails_fast(own_redis: object, demo_text: str) -> None:
    url = own_redis.url  # type: ignore[attr-defined]
    with CompactionClient(url) as client:
        sid = new_session(client, demo_text)
        own_redis.stop()  # type: ignore[attr-defined]
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError):
            client.compact(sid, reason="overflow")
        assert time.monotonic() - started <= 2.0


def test_demo_runs_with_nothing_but_the_install(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "worker", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 60
    out = proc.stdout
    assert "redis: embedded redis-server" in out
    for needle in ("prune pass: pruned 2 tool results", "compaction entry", "pruned 0 more",
                   "branch_summary entry", "timings (ms):"):
        assert needle in out
