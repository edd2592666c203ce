"""Recovery measurements with the shipped defaults (``make recovery-bench``, a few minutes).

1. SIGKILL of the worker running a job, a live worker beside it: seconds until the job runs
   again and until it is done (p50 / max over ``--kills`` kills), on a Redis broker and on
   RabbitMQ (skipped when ``rabbitmqctl`` is missing). Target: done ≤ 10 s after the kill
   (docs/recovery.md "Recovery figures"; ``tests/recovery/test_recovery_liveness.py`` holds it).
2. Redis restart (AOF, 5 s down) with 30 threshold jobs queued and 2 running: how many
   succeeded, how many are stuck, and how many extra model calls the outage cost.

The loopback model answers at once (the held call excepted), so "done" is recovery time plus
the worker's own work; a real model's time adds to it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from recovery.recovery_support import (  # noqa: E402
    RedisServer,
    WorkerProcess,
    kill_and_recover,
    model_env,
    wait_until,
    worker_env,
)
from runtime.runtime_model_server import ModelServer  # noqa: E402

from api_client import ClientSettings, CompactionClient  # noqa: E402

DEMO = (REPO / "worker" / "data" / "demo-session.jsonl").read_text(encoding="utf-8")


@contextmanager
def rabbit_vhost() -> Iterator[str | None]:
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        yield None
        return
    vhost = f"compactor-bench-{uuid.uuid4().hex[:8]}"
    subprocess.run([ctl, "-q", "add_vhost", vhost], check=True, capture_output=True)
    subprocess.run([ctl, "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
                   check=True, capture_output=True)
    try:
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        subprocess.run([ctl, "-q", "delete_vhost", vhost], capture_output=True)


def kills(broker: str | None, n: int, folder: Path) -> dict[str, object]:
    redis = RedisServer(folder / f"redis-{uuid.uuid4().hex[:6]}").start()
    model = ModelServer()
    try:
        extra = {"COMPACTOR_BROKER_URL": broker} if broker else {}
        env = worker_env(redis.url, COMPACTOR_MODELS=model_env(model.base_url), **extra)
        settings = ClientSettings(redis_url=redis.url, broker_url=broker)
        reruns, dones = [], []
        with CompactionClient(settings) as client:
            for i in range(n):
                sid = client.sessions.import_jsonl(DEMO, f"b-{uuid.uuid4().hex[:10]}")
                rerun, done = kill_and_recover(client, env, model, sid, folder)
                reruns.append(rerun)
                dones.append(done)
                print(f"  kill {i + 1}: ran again after {rerun:.1f} s, done after {done:.1f} s",
                      flush=True)
        return {"kills": n,
                "rerun_s": {"p50": round(statistics.median(reruns), 1),
                            "max": round(max(reruns), 1)},
                "done_s": {"p50": round(statistics.median(dones), 1), "max": round(max(dones), 1)},
                "target_s": {"done": 10}}
    finally:
        model.close()
        redis.stop()


def redis_restart(folder: Path, queued: int = 30, running: int = 2) -> dict[str, object]:
    redis = RedisServer(folder / "restart-redis", aof=True).start()
    model = ModelServer()
    env = worker_env(redis.url, COMPACTOR_MODELS=model_env(model.base_url),
                     COMPACTOR_CONCURRENCY=str(running))
    worker = WorkerProcess(env, "restart", folder)
    try:
        worker.wait_ready()
        with CompactionClient(redis.url) as client:
            sids = [client.sessions.import_jsonl(DEMO, f"r-{i}") for i in range(queued + running)]
            model.stall_next(1000)
            handles = [client.compact(sid, reason="threshold") for sid in sids[:running]]
            wait_until(lambda: sum(h.record().state.value == "running" for h in handles)
                       == running and model.held >= running, 30, "running jobs")
            handles += [client.compact(sid, reason="threshold") for sid in sids[running:]]
            redis.stop()
            model.release()  # the running jobs finish their model calls while Redis is down
            time.sleep(5)
            redis.start()
            back = time.monotonic()
            for handle in handles:
                try:
                    handle.wait(120)
                except Exception as err:  # counted below from the records
                    print(f"  {handle.id}: {err!r}")
            all_done = time.monotonic() - back
            states = [h.record().state.value for h in handles]
        return {"jobs": len(handles), "succeeded": states.count("succeeded"),
                "stuck": sum(s in ("queued", "running") for s in states),
                "failed": states.count("failed"),
                "extra_model_calls": model.requests - 3 * len(handles),
                "all_done_after_restart_s": round(all_done, 1), "down_s": 5}
    finally:
        worker.stop()
        model.close()
        redis.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="compactor-recovery-"))
    report: dict[str, object] = {}
    print("SIGKILL, Redis broker:", flush=True)
    report["sigkill_redis_broker"] = kills(None, args.kills, folder)
    with rabbit_vhost() as amqp:
        if amqp is None:
            report["sigkill_rabbitmq_broker"] = "skipped: rabbitmqctl not found"
        else:
            print("SIGKILL, RabbitMQ broker:", flush=True)
            report["sigkill_rabbitmq_broker"] = kills(amqp, args.kills, folder)
    print("Redis restart (AOF, 5 s down), 30 queued + 2 running:", flush=True)
    report["redis_restart"] = redis_restart(folder)
    print(json.dumps(report, indent=2))
    shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
