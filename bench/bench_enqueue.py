"""Request-path cost of ``CompactionClient.compact()`` against a local Redis.

    .venv/bin/python bench/bench_enqueue.py [--redis-url redis://127.0.0.1:6379/15] [-n 2000]

Reports p50/p99 wall time and the client's own CPU time per call for:

* ``new job``: every call creates a job (a new session each time): 1 Lua call + 1 publish;
* ``coalesced``: the session already has a job of that kind in flight: 1 Lua call;
* ``round trip``: enqueue → a stub worker (a thread popping the Celery message and finishing
  the job through JobStore) → the handle's ``wait`` woken by the completion event. No planning
  or model call: the floor that transport and events add to a real job.

Uses the key prefix ``compactor-bench`` and removes its keys and queues afterwards.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import threading
import time
from collections.abc import Callable

import redis

from api_client import ClientSettings, CompactionClient
from api_client.wire import QUEUES

PREFIX = "compactor-bench"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(n: int, call: Callable[[int], object]) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for i in range(n):
        w0, c0 = time.perf_counter(), time.thread_time()
        call(i)
        cpus.append((time.thread_time() - c0) * 1000)
        walls.append((time.perf_counter() - w0) * 1000)
    return walls, cpus


def report(name: str, walls: list[float], cpus: list[float]) -> None:
    print(f"{name:<28} wall p50 {percentile(walls, .5):7.3f} ms  p99 {percentile(walls, .99):7.3f} ms"
          f"   cpu p50 {percentile(cpus, .5):6.3f} ms  p99 {percentile(cpus, .99):6.3f} ms"
          f"   (mean wall {statistics.fmean(walls):.3f} ms, n={len(walls)})")


def stub_worker(client: CompactionClient, stop: threading.Event) -> None:
    raw = redis.Redis.from_url(client.settings.redis_url, decode_responses=True)
    lists = [q for q in QUEUES] + [f"{q}:{p}" for q in QUEUES for p in (3, 6, 9)]
    while not stop.is_set():
        popped = raw.brpop(lists, timeout=0.2)
        if popped is None:
            continue
        job_id = json.loads(base64.b64decode(json.loads(popped[1])["body"]))[0][0]
        client.jobs.acquire_lease(job_id, "bench", 30)
        client.jobs.mark_running(job_id)
        client.jobs.finish(job_id, "succeeded", entry={"type": "compaction", "id": "bench0000"})
    raw.close()


def cleanup(url: str) -> None:
    raw = redis.Redis.from_url(url, decode_responses=True)
    keys = list(raw.scan_iter(f"{PREFIX}:*", count=1000))
    keys += [k for q in QUEUES for k in raw.scan_iter(f"{q}*")]
    keys += list(raw.scan_iter("_kombu.binding*compactor*"))
    for i in range(0, len(keys), 500):
        raw.delete(*keys[i:i + 500])
    raw.close()


def run(url: str, n: int, sent_event: bool) -> None:
    settings = ClientSettings(redis_url=url, key_prefix=PREFIX, send_sent_event=sent_event)
    label = "sent event on" if sent_event else "sent event off"
    with CompactionClient(settings) as client:
        client.compact("warmup")  # builds the Celery app and opens the pools
        report(f"new job ({label})", *measure(n, lambda i: client.compact(f"s{i}", "threshold")))
        report(f"coalesced ({label})", *measure(n, lambda i: client.compact("s0", "threshold")))
        cleanup(url)
        stop = threading.Event()
        worker = threading.Thread(target=stub_worker, args=(client, stop), daemon=True)
        worker.start()
        rounds = max(50, n // 10)
        report(f"round trip ({label})",
               *measure(rounds, lambda i: client.compact(f"r{i}", "overflow").wait(timeout=10)))
        stop.set()
        worker.join()
    cleanup(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("-n", type=int, default=2000)
    args = parser.parse_args()
    for sent_event in (True, False):
        run(args.redis_url, args.n, sent_event)


if __name__ == "__main__":
    main()
