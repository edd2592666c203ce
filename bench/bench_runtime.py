"""The runtime end to end, as ratios: round trip against the model's own time, burst throughput
against the ideal C/L, for threads and prefork workers.

    .venv/bin/python bench/bench_runtime.py [--jobs 15] [--burst 32] [--model-ms 400]

Starts a private Redis and a loopback model server (OpenAI-compatible; every call takes
``--model-ms``), then for each pool configuration a real ``compactor worker`` subprocess:

* baseline ``model call``: one HTTP call to the model server straight from this process (p50);
* ``round trip``: sequential manual compactions (two model calls each: summary, short summary):
  enqueue → worker → the handle woken by the completion event; p50/p99 over the job's own model
  time (calls x the model call baseline): 1.0 = the worker adds nothing;
* ``burst``: ``--burst`` jobs enqueued at once; the ideal time calls x L / C over the measured
  time (1.0 = no idle slot), and the workers' resident memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import urllib.request
import uuid
from pathlib import Path

from _loopback import LoopbackModel, loopback_model, turns_session, wait_for_workers, workers
from _report import Report, percentile

from api_client import CompactionClient
from worker.cli.demo import embedded_redis

POOLS = [("threads", 8), ("prefork", 2), ("prefork", 8)]
SESSION = turns_session()


def model_call_ms(model: LoopbackModel, n: int = 5) -> float:
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "x"}]}).encode()
    times = []
    for _ in range(n):
        request = urllib.request.Request(model.base_url + "/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
        times.append((time.perf_counter() - started) * 1000)
    model.calls -= n
    return percentile(times, 0.5)


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (prefork pool processes)."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def sessions(client: CompactionClient, n: int) -> list[str]:
    return [client.sessions.import_jsonl(SESSION, f"rt-{uuid.uuid4().hex[:12]}") for _ in range(n)]


def bench_pool(report: Report, client: CompactionClient, url: str, model: LoopbackModel,
               pool: str, concurrency: int, jobs: int, burst: int) -> None:
    label = f"{pool} x{concurrency}"
    targets = sessions(client, jobs + burst + concurrency)
    with workers(url, model.base_url, 1, pool=pool, concurrency=concurrency) as procs:
        wait_for_workers(url, 1)
        warm = [client.compact(targets.pop(), reason="manual") for _ in range(concurrency)]
        for handle in warm:
            handle.wait(120)
        trips, calls = [], model.calls
        for sid in targets[:jobs]:
            started = time.perf_counter()
            client.compact(sid, reason="manual").wait(120)
            trips.append((time.perf_counter() - started) * 1000)
        per_job = (model.calls - calls) / jobs
        report.baseline(f"{label} model time per job",
                        per_job * report.baselines["model call"].value,
                        "ms", f"{per_job:g} calls x model call")
        for q in (0.5, 0.99):
            report.figure(f"{label} round trip p{round(q * 100)}", percentile(trips, q), "ms",
                          against=f"{label} model time per job")
        calls = model.calls
        started = time.perf_counter()
        handles = [client.compact(sid, reason="manual") for sid in targets[jobs:]]
        for h in handles:
            h.wait(300)
        burst_s = time.perf_counter() - started
        ideal_s = (model.calls - calls) * model.delay_s / concurrency
        report.baseline(f"{label} ideal burst", ideal_s, "s", f"{burst} jobs: calls x L / C")
        report.figure(f"{label} burst", burst_s, "s", against=f"{label} ideal burst", inverse=True,
                      what="(share of C/L)", rss_mb=rss_mb(procs[0].pid))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=15, help="sequential round trips per pool")
    parser.add_argument("--burst", type=int, default=32, help="jobs enqueued at once per pool")
    parser.add_argument("--model-ms", type=float, default=400.0, help="latency of one model call")
    args = parser.parse_args()
    report = Report("runtime")
    with embedded_redis() as url, loopback_model(args.model_ms / 1000) as model, \
            CompactionClient(url) as client:
        report.baseline("model call", model_call_ms(model), "ms", "one HTTP call, no worker")
        for pool, concurrency in POOLS:
            bench_pool(report, client, url, model, pool, concurrency, args.jobs, args.burst)
            client.redis.flushall()
    report.write()


if __name__ == "__main__":
    main()
