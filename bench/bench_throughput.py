"""Worker throughput against the ideal C/L: do worker slots ever sit idle while jobs wait?

    .venv/bin/python bench/bench_throughput.py [--jobs 48] [--model-ms 500] [--concurrency 8]

One ``compactor worker`` (threads pool, concurrency C) and a loopback model answering every call
in L; ``--jobs`` manual compactions enqueued at once on separate sessions. With ``calls`` model
calls in all, a worker that never leaves a slot idle finishes in calls x L / C: the figure is
that ideal over the measured time (1.0 = no idle slot; goal >= 0.90). Then two workers on twice
the jobs: their rate over one worker's (goal >= 1.8).
"""

from __future__ import annotations

import argparse
import time
import uuid

from _loopback import LoopbackModel, loopback_model, turns_session, wait_for_workers, workers
from _report import Report

from api_client import CompactionClient
from worker.demo import embedded_redis

SESSION = turns_session()


def redis_commands(client: CompactionClient) -> int:
    return int(client.redis.info("stats")["total_commands_processed"])


def run_batch(client: CompactionClient, model: LoopbackModel,
              jobs: int) -> tuple[float, int, float]:
    """Seconds from the first enqueue to the last completion, the model calls made, and the
    Redis commands per job (client and workers, idle polls included)."""
    sids = [client.sessions.import_jsonl(SESSION, f"tp-{uuid.uuid4().hex[:12]}")
            for _ in range(jobs)]
    calls, commands = model.calls, redis_commands(client)
    started = time.perf_counter()
    handles = [client.compact(sid, reason="manual") for sid in sids]
    for handle in handles:
        handle.wait(300)
    seconds = time.perf_counter() - started
    return seconds, model.calls - calls, (redis_commands(client) - commands - 1) / jobs


def measure(url: str, model: LoopbackModel, client: CompactionClient, count: int, jobs: int,
            concurrency: int) -> tuple[float, float, int]:
    """(measured s, ideal s, calls, Redis commands per job) for ``count`` workers on ``jobs``."""
    with workers(url, model.base_url, count, concurrency=concurrency):
        wait_for_workers(url, count)
        run_batch(client, model, concurrency * count)  # warm: runtimes, tokenizer, HTTP pools
        seconds, calls, per_job = run_batch(client, model, jobs)
    return seconds, calls * model.delay_s / (concurrency * count), calls, per_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=48, help="jobs for one worker")
    parser.add_argument("--model-ms", type=float, default=500.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--no-scaling", action="store_true", help="skip the two-worker run")
    args = parser.parse_args()
    report = Report("throughput")
    c, jobs = args.concurrency, args.jobs
    with embedded_redis() as url, loopback_model(args.model_ms / 1000) as model, \
            CompactionClient(url) as client:
        one_s, ideal_s, calls, commands = measure(url, model, client, 1, jobs, c)
        report.baseline("ideal_one_worker", ideal_s, "s", f"{calls} calls x L / C={c}")
        report.figure("one_worker", one_s, "s", against="ideal_one_worker", inverse=True,
                      goal=">= 0.90", what="(ratio = share of C/L reached)", jobs=jobs,
                      calls=calls, model_ms=args.model_ms, concurrency=c,
                      redis_commands_per_job=round(commands, 1))
        print(f"  Redis commands per job (client + worker, whole server): {commands:.1f}")
        if not args.no_scaling:
            report.baseline("one_worker_rate", jobs / one_s, "job/s", "measured above")
            two_s, ideal2_s, calls2, _ = measure(url, model, client, 2, 2 * jobs, c)
            report.figure("two_workers_rate", 2 * jobs / two_s, "job/s",
                          against="one_worker_rate", goal=">= 1.8", jobs=2 * jobs, calls=calls2,
                          share_of_ideal=ideal2_s / two_s)
    report.write()


if __name__ == "__main__":
    main()
