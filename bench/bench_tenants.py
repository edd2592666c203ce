"""Tenant fairness: how long a small tenant's jobs wait behind another tenant's flood.

    .venv/bin/python bench/bench_tenants.py [--flood 500] [--probe 10] [--model-ms 50] [-c 4]

One ``compactor worker`` (threads pool, concurrency C) and a loopback model answering every call
in L. Tenant A enqueues ``--flood`` manual compactions at once (each on a session of its own),
then tenant B at once enqueues ``--probe`` more. B's *pickup latency* per job is its record's
``createdAt`` (stamped by the client inside ``compact()``) to ``startedAt`` (stamped by the
worker that starts it; both ISO, ms). Figures: B's pickup p50/p99 behind the flood against B
enqueuing the same jobs alone on the same worker (goal <= 2.0), and the fleet's rate on the
flood (A + B: first ``createdAt`` to last ``finishedAt``) against the same number of jobs from
one tenant (goal >= 0.90).

Today's figure first: the same flood with the fair order off (``fair_delay_ms=0``: first come,
first served per priority, as before tenants), where B waits for all of A's jobs (at least
flood x calls x L / C); then with the fair order (the default). Alone, B still queues behind its
own jobs when ``--probe`` > C (its p50 is then about one job's time, not zero): so B's pickup
behind the flood is also given against a lone job's (B's jobs one at a time, each waited for: what
a job costs to pick up on an idle worker), the baseline that cannot flatter the fair order.
"""

from __future__ import annotations

import argparse
import uuid
from dataclasses import dataclass
from datetime import datetime

from _loopback import loopback_model, turns_session, wait_for_workers, workers
from _report import Report, percentile

from api_client import ClientSettings, CompactionClient
from api_client.contract.wire import JobRecord
from worker.cli.demo import embedded_redis

SESSION = turns_session()


def client_for(url: str, tenant: str, *, fair: bool = True) -> CompactionClient:
    """A client of ``tenant``; ``fair=False``: its jobs queue first come, first served."""
    return CompactionClient(ClientSettings(redis_url=url, fair_delay_ms=1000 if fair else 0),
                            tenant=tenant)


def stamp(iso: str | None) -> float:
    if not iso:
        raise RuntimeError("a finished job without its timestamps")
    return datetime.fromisoformat(iso).timestamp()


@dataclass
class Batch:
    """Finished jobs of one tenant, records in enqueue order."""

    client: CompactionClient
    records: list[JobRecord]

    def pickups_ms(self) -> list[float]:
        return [(stamp(r.started_at) - stamp(r.created_at)) * 1000 for r in self.records]


def sessions(client: CompactionClient, prefix: str, jobs: int) -> list[str]:
    return [client.sessions.import_jsonl(SESSION, f"{prefix}-{uuid.uuid4().hex[:12]}")
            for _ in range(jobs)]


def run(*tenants: tuple[CompactionClient, list[str]]) -> list[Batch]:
    """Each tenant enqueues all of its sessions' compactions, the next right after; waits for
    every job, then drops the sessions (one phase's sessions in Redis at a time)."""
    handles = [[client.compact(sid, reason="manual") for sid in sids] for client, sids in tenants]
    batches = []
    for (client, sids), mine in zip(tenants, handles, strict=True):
        for handle in mine:
            handle.wait(300)
        batches.append(Batch(client, [handle.record() for handle in mine]))
        for sid in sids:
            client.sessions.delete(sid)
    return batches


def lone_pickups_ms(client: CompactionClient, sids: list[str]) -> list[float]:
    """Each session's compaction alone on the worker: enqueued, waited for, then the next."""
    records = []
    for sid in sids:
        handle = client.compact(sid, reason="manual")
        handle.wait(300)
        records.append(handle.record())
        client.sessions.delete(sid)
    return Batch(client, records).pickups_ms()


def rate(batches: list[Batch]) -> float:
    """Jobs per second from the first enqueue to the last finish."""
    records = [r for batch in batches for r in batch.records]
    span = max(stamp(r.finished_at) for r in records) - min(stamp(r.created_at) for r in records)
    return len(records) / span


def late_starts(flood: Batch, probe: Batch) -> int:
    """A's jobs started after B's first: 0 when B waited for the whole flood (FIFO)."""
    first = min(stamp(r.started_at) for r in probe.records)
    return sum(stamp(r.started_at) > first for r in flood.records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=500, help="tenant A's jobs, at once")
    parser.add_argument("--probe", type=int, default=10, help="tenant B's jobs, right after")
    parser.add_argument("--model-ms", type=float, default=50.0)
    parser.add_argument("-c", "--concurrency", type=int, default=4)
    args = parser.parse_args()
    report = Report("tenants")
    flood, probe, c = args.flood, args.probe, args.concurrency
    with embedded_redis() as url, loopback_model(args.model_ms / 1000) as model, \
            client_for(url, "tenant-a") as a, client_for(url, "tenant-b") as b, \
            client_for(url, "tenant-a", fair=False) as fifo_a, \
            client_for(url, "tenant-b", fair=False) as fifo_b, \
            workers(url, model.base_url, 1, concurrency=c):
        wait_for_workers(url, 1)
        run((a, sessions(a, "warm", c)))  # warm: runtimes, tokenizer, HTTP pools

        alone = run((b, sessions(b, "tb", probe)))[0].pickups_ms()
        report.baseline("b_alone_pickup_p50", percentile(alone, 0.5), "ms",
                        f"{probe} jobs of B alone, C={c}")
        report.baseline("b_alone_pickup_p99", percentile(alone, 0.99), "ms")
        lone = lone_pickups_ms(b, sessions(b, "tl", probe))
        report.baseline("lone_job_pickup_p50", percentile(lone, 0.5), "ms",
                        f"{probe} jobs of B one at a time, each waited for")

        calls = model.calls
        one = rate(run((a, sessions(a, "ta", flood + probe))))
        report.baseline("one_tenant_rate", one, "job/s", f"{flood + probe} jobs of A alone")
        calls = (model.calls - calls) / (flood + probe)

        extra = {"flood": flood, "probe": probe, "concurrency": c, "model_ms": args.model_ms}
        fifo = run((fifo_a, sessions(fifo_a, "ta", flood)), (fifo_b, sessions(fifo_b, "tb", probe)))
        report.figure("fifo_b_flood_pickup_p99", percentile(fifo[1].pickups_ms(), 0.99), "ms",
                      against="b_alone_pickup_p99", what="(today: first come, first served)",
                      **extra)
        a_sids, b_sids = sessions(a, "ta", flood), sessions(b, "tb", probe)
        batches = run((a, a_sids), (b, b_sids))
        behind = batches[1].pickups_ms()
        report.figure("b_flood_pickup_p50", percentile(behind, 0.5), "ms",
                      against="b_alone_pickup_p50", goal="<= 2.0", **extra)
        report.figure("b_flood_pickup_p99", percentile(behind, 0.99), "ms",
                      against="b_alone_pickup_p99", goal="<= 2.0", **extra)
        report.figure("b_flood_pickup_p50_vs_lone", percentile(behind, 0.5), "ms",
                      against="lone_job_pickup_p50", **extra)
        report.figure("flood_rate", rate(batches), "job/s", against="one_tenant_rate",
                      goal=">= 0.90", what="(A + B)", **extra)
        late = late_starts(*batches)
        a_pickups = batches[0].pickups_ms()
        print(f"  A's jobs started after B's first: {late} of {flood}; A's pickup p50/p99 "
              f"{percentile(a_pickups, 0.5):.0f}/{percentile(a_pickups, 0.99):.0f} ms; "
              f"{calls:.2f} model calls per job")
        report.note(b_alone_pickups_ms=alone, lone_pickups_ms=lone, b_flood_pickups_ms=behind,
                    a_started_after_b=late, model_calls_per_job=calls)
    report.write()


if __name__ == "__main__":
    main()
