"""Worker throughput against the ideal C/L, on distinct sessions at real model speeds.

    .venv/bin/python bench/bench_throughput.py [--model-ms 100,2000] [--concurrency 8]
        [--ideal-s 6] [--pool threads] [--no-scaling] [--no-open-loop]

One ``compactor worker`` (pool ``--pool``, concurrency C) and a loopback model answering every
call in L, for each L of ``--model-ms`` (100 ms and 2 s by default). Each job is a manual
compaction of a session of its own (distinct text: no token count, parse or plan cache helps
one job with another's work); enough jobs that the ideal time is about ``--ideal-s``. With
``calls`` model calls in all, a worker that never leaves a slot idle finishes in calls x L / C:
the figure is that ideal over the measured time (1.0 = no idle slot; goal >= 0.85). Then two
workers on twice the jobs: their rate over one worker's (goal >= 1.8); then one worker fed
open-loop at 80 % of its nominal capacity C / (calls per job x L): the p99 of a job's
pickup-to-end (the record's startedAt to finishedAt) over the model time of a job (goal <= 2).
Each run also prints the worker's CPU per job (its process's user + system time over the jobs)
against a tiktoken encode of one session's text (the new span of a first compaction: all of
it; goal <= 1), and the Redis commands per job (whole server, idle polls included).
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from datetime import datetime

from _loopback import LoopbackModel, loopback_model, turns_session, wait_for_workers, workers
from _report import Report, percentile

from api_client import CompactionClient
from worker.cli.demo import embedded_redis
from worker.tokens.bpe import tiktoken_encoding

TURNS, CHARS = 20, 1500  # 40 entries of ~1.5 KB: a session a job reads, counts and plans whole
BASE = turns_session(TURNS, CHARS)
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def distinct_session(n: int) -> str:
    """The base session with every message's text made its own (no cache shared by two)."""
    return BASE.replace('"question ', f'"s{n} question ').replace('"answer ', f'"s{n} answer ')


def redis_commands(client: CompactionClient) -> int:
    return int(client.redis.info("stats")["total_commands_processed"])


def _stat(pid: str) -> list[str]:
    """/proc/<pid>/stat after pid and comm: state, ppid, ..., utime (11), stime (12)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return []


def cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds so far of the worker processes and their live children (a
    prefork pool's processes)."""
    stats = {pid: _stat(pid) for pid in os.listdir("/proc") if pid.isdigit()}
    tree = {str(pid) for pid in pids}
    grew = True
    while grew:
        found = {pid for pid, f in stats.items() if f and f[1] in tree} - tree
        tree |= found
        grew = bool(found)
    return sum(int(stats[p][11]) + int(stats[p][12]) for p in tree if stats.get(p)) * TICK_S


def encode_ms(text: str, repeats: int = 5) -> float:
    """A tiktoken encode (cl100k_base, the worker's encoding) of ``text``: the best of a few."""
    encoding = tiktoken_encoding()
    encoding.encode(text)
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        encoding.encode(text)
        best = min(best, time.process_time() - started)
    return best * 1000


def sessions(client: CompactionClient, jobs: int) -> list[str]:
    return [client.sessions.import_jsonl(distinct_session(i), f"tp-{uuid.uuid4().hex[:12]}")
            for i in range(jobs)]


def iso_s(value: str | None) -> float:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


class Run:
    """One batch's figures."""

    def __init__(self, seconds: float, calls: int, commands: float, cpu: float) -> None:
        self.seconds, self.calls, self.commands, self.cpu = seconds, calls, commands, cpu


def batch(client: CompactionClient, model: LoopbackModel, pids: list[int], jobs: int) -> Run:
    """All ``jobs`` enqueued at once: seconds to the last completion, calls, commands and worker
    CPU seconds per job."""
    sids = sessions(client, jobs)
    calls, commands, cpu = model.calls, redis_commands(client), cpu_s(pids)
    started = time.perf_counter()
    handles = [client.compact(sid, reason="manual") for sid in sids]
    for handle in handles:
        handle.wait(600)
    seconds = time.perf_counter() - started
    return Run(seconds, model.calls - calls, (redis_commands(client) - commands - 1) / jobs,
               (cpu_s(pids) - cpu) / jobs)


def open_loop(client: CompactionClient, pids: list[int], jobs: int, rate: float) -> list[float]:
    """``jobs`` enqueued at ``rate`` a second; each job's pickup-to-end seconds."""
    sids = sessions(client, jobs)
    handles = []
    started = time.perf_counter()
    for i, sid in enumerate(sids):
        while time.perf_counter() < started + i / rate:
            time.sleep(0.001)
        handles.append(client.compact(sid, reason="manual"))
    spans = []
    for handle in handles:
        handle.wait(600)
        record = handle.record()
        spans.append(iso_s(record.finished_at) - iso_s(record.started_at))
    return spans


def one_latency(report: Report, url: str, client: CompactionClient, model: LoopbackModel,
                args: argparse.Namespace, encode: float) -> None:
    c, l_s = args.concurrency, model.delay_s
    tag = f"L{round(l_s * 1000)}ms"
    with workers(url, model.base_url, 1, pool=args.pool, concurrency=c) as procs:
        pids = [p.pid for p in procs]
        wait_for_workers(url, 1)
        warm = batch(client, model, pids, c)  # warm: runtimes, tokenizer, HTTP pools
        # As many jobs as make the ideal time --ideal-s, by the calls a job makes (it was taken
        # as two; these sessions' jobs make one, so the batch was half as long as said and its
        # first pickups and last stragglers weighed twice as much).
        jobs = max(2 * c, round(args.ideal_s * c / (max(1.0, warm.calls / c) * l_s)))
        one = batch(client, model, pids, jobs)
        ideal = one.calls * l_s / c
        report.baseline(f"ideal_one_worker_{tag}", ideal, "s", f"{one.calls} calls x L / C={c}")
        report.figure(f"one_worker_{tag}", one.seconds, "s", against=f"ideal_one_worker_{tag}",
                      inverse=True, goal=">= 0.85", what="(share of C/L reached)", jobs=jobs,
                      calls=one.calls, model_ms=l_s * 1000, concurrency=c, pool=args.pool,
                      redis_commands_per_job=round(one.commands, 1))
        report.baseline(f"tiktoken_encode_{tag}", encode, "ms", "one session's text")
        report.figure(f"worker_cpu_per_job_{tag}", one.cpu * 1000, "ms",
                      against=f"tiktoken_encode_{tag}", goal="<= 1")
        print(f"  Redis commands per job (client + worker, whole server): {one.commands:.1f}")
        if not args.no_open_loop:
            per_job_s = one.calls / jobs * l_s
            rate = 0.8 * c / per_job_s
            spans = open_loop(client, pids, jobs, rate)
            report.baseline(f"model_time_per_job_{tag}", per_job_s, "s", "calls per job x L")
            report.figure(f"p99_pickup_to_end_at_80pct_{tag}", percentile(spans, 0.99), "s",
                          against=f"model_time_per_job_{tag}", goal="<= 2", jobs=jobs,
                          rate_per_s=round(rate, 2), p50_s=percentile(spans, 0.5))
    if not args.no_scaling:
        report.baseline(f"one_worker_rate_{tag}", jobs / one.seconds, "job/s", "measured above")
        with workers(url, model.base_url, 2, pool=args.pool, concurrency=c) as procs:
            pids = [p.pid for p in procs]
            wait_for_workers(url, 2)
            batch(client, model, pids, 2 * c)
            two = batch(client, model, pids, 2 * jobs)
        report.figure(f"two_workers_rate_{tag}", 2 * jobs / two.seconds, "job/s",
                      against=f"one_worker_rate_{tag}", goal=">= 1.8", jobs=2 * jobs,
                      share_of_ideal=two.calls * l_s / (2 * c) / two.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-ms", default="100,2000", help="model latencies, comma-separated")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--ideal-s", type=float, default=6.0, help="ideal seconds of a batch")
    parser.add_argument("--pool", default="threads")
    parser.add_argument("--no-scaling", action="store_true", help="skip the two-worker run")
    parser.add_argument("--no-open-loop", action="store_true", help="skip the 80 %% run")
    args = parser.parse_args()
    report = Report("throughput")
    encode = encode_ms(distinct_session(0))
    with embedded_redis() as url, CompactionClient(url) as client:
        for model_ms in (float(v) for v in args.model_ms.split(",")):
            with loopback_model(model_ms / 1000) as model:
                one_latency(report, url, client, model, args, encode)
    report.write()


if __name__ == "__main__":
    main()
