"""The runtime end to end: enqueue latency, round trip to the completion event, prefork vs threads.

    .venv/bin/python bench/bench_runtime.py [--jobs 30] [--burst 32] [--model-ms 400]

Starts an embedded Redis and a loopback model server (OpenAI-compatible; every call takes
``--model-ms``, like a summarization model that mostly waits on the network), then for each pool
configuration a real ``compactor worker`` subprocess, and measures:

* ``enqueue``: wall time of ``client.compact(sid, reason="threshold")`` (record + single-flight
  Lua call + Celery publish), p50/p99 over new jobs, no worker consuming;
* ``round trip``: sequential jobs on the sample session: enqueue → worker (prune pass, plan, model
  calls, commit) → the handle woken by the completion event; p50/p99;
* ``burst``: ``--burst`` jobs enqueued at once; time until every one has finished (throughput of
  IO-bound jobs), and the workers' resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from api_client import CompactionClient
from worker.demo import embedded_redis

REPO = Path(__file__).resolve().parents[1]
SAMPLE = (REPO / "worker" / "data" / "demo-session.jsonl").read_text(encoding="utf-8")
POOLS = [("threads", 8), ("prefork", 2), ("prefork", 8)]


@contextmanager
def model_server(delay_s: float) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay_s)
            body = json.dumps({"choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": "## Goal\nBenchmark summary."}}],
                "usage": {"prompt_tokens": 1000, "completion_tokens": 10}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (prefork pool processes)."""
    total = 0
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


@contextmanager
def worker(url: str, model_url: str, pool: str, concurrency: int) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACTOR_")}
    env.update({
        "COMPACTOR_REDIS_URL": url, "COMPACTOR_POOL": pool, "COMPACTOR_CONCURRENCY": str(concurrency),
        "COMPACTOR_HOOKS_ENTRY_POINTS": "false",
        "COMPACTOR_MODELS": json.dumps([{"provider": "openai", "model": "bench", "base_url": model_url,
                                         "api_key": "bench", "context_window": 200000}]),
    })
    proc = subprocess.Popen([sys.executable, "-m", "worker", "worker", "--loglevel", "ERROR",
                             "--without-mingle", "--without-gossip"],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def sessions(client: CompactionClient, n: int) -> list[str]:
    return [client.sessions.import_jsonl(SAMPLE, f"bench-{uuid.uuid4().hex[:12]}") for _ in range(n)]


def bench_enqueue(client: CompactionClient, n: int) -> dict[str, float]:
    client.compact(f"warm-{uuid.uuid4().hex}", reason="threshold")  # builds the Celery producer
    times = []
    for _ in range(n):
        sid = f"enq-{uuid.uuid4().hex[:12]}"
        started = time.perf_counter()
        client.compact(sid, reason="threshold")
        times.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": pct(times, 50), "p99_ms": pct(times, 99), "mean_ms": statistics.fmean(times)}


def bench_pool(client: CompactionClient, url: str, model_url: str, pool: str, concurrency: int,
               jobs: int, burst: int) -> dict[str, Any]:
    targets = sessions(client, jobs + burst + 1)
    with worker(url, model_url, pool, concurrency) as proc:
        client.compact(targets.pop(), reason="threshold").wait(120)  # worker up and warm
        trips = []
        for sid in targets[:jobs]:
            started = time.perf_counter()
            client.compact(sid, reason="threshold").wait(120)
            trips.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        handles = [client.compact(sid, reason="threshold") for sid in targets[jobs:]]
        for h in handles:
            h.wait(300)
        burst_s = time.perf_counter() - started
        memory = rss_mb(proc.pid)
    return {
        "pool": f"{pool} x{concurrency}", "round_trip_p50_ms": pct(trips, 50),
        "round_trip_p99_ms": pct(trips, 99), "burst_jobs": burst, "burst_s": burst_s,
        "jobs_per_s": burst / burst_s, "rss_mb": memory,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--enqueues", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=30, help="sequential round trips per pool")
    parser.add_argument("--burst", type=int, default=32, help="jobs enqueued at once per pool")
    parser.add_argument("--model-ms", type=float, default=400.0, help="latency of one model call")
    args = parser.parse_args()
    with embedded_redis() as url, model_server(args.model_ms / 1000) as model_url, \
            CompactionClient(url) as client:
        enqueue = bench_enqueue(client, args.enqueues)
        print(f"enqueue (no worker): p50 {enqueue['p50_ms']:.3f} ms  p99 {enqueue['p99_ms']:.3f} ms  "
              f"mean {enqueue['mean_ms']:.3f} ms  (n={args.enqueues})")
        client.redis.flushall()
        print(f"model call latency {args.model_ms:.0f} ms; sample session "
              f"{len(SAMPLE) // 1024} KB (threshold: prune pass + 3 model calls)")
        print(f"{'pool':<12} {'trip p50':>9} {'trip p99':>9} {'burst':>6} {'burst s':>8} "
              f"{'jobs/s':>7} {'RSS MB':>7}")
        for pool, concurrency in POOLS:
            r = bench_pool(client, url, model_url, pool, concurrency, args.jobs, args.burst)
            print(f"{r['pool']:<12} {r['round_trip_p50_ms']:>8.0f}  {r['round_trip_p99_ms']:>8.0f} "
                  f"{r['burst_jobs']:>6} {r['burst_s']:>8.2f} {r['jobs_per_s']:>7.2f} {r['rss_mb']:>7.0f}")
            client.redis.flushall()


if __name__ == "__main__":
    main()
