"""Instant compaction: the stall (``compact()`` call → entry in hand) with a valid draft vs
without one, and the draft hit rate while an agent keeps appending.

    .venv/bin/python bench/bench_instant.py [--sessions 50] [--model-ms 2000]

An embedded Redis, a loopback model answering every call in ``--model-ms`` and an in-process
worker (threads pool, one thread per session). Three phases, each over ``--sessions`` new
copies of the sample session:

* ``no draft``: ``compact(reason="threshold")`` + ``wait()`` on every session at once (the jobs
  run concurrently to keep the bench short; each stall is its own call → entry);
* ``draft``: a speculative job per session first (all at once), the agent appends one message,
  then ``compact(reason="threshold")`` + ``wait()`` one session after the other;
* ``hit rate``: per session an agent thread calls ``observe`` in the band (enqueues the
  speculative job), appends a message every ``--turn-ms``, then crosses the threshold; a hit
  is a compaction that came from the draft.

Prints p50/p99 of both stalls and their ratio; JSON to bench/results/instant.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from celery.contrib.testing.worker import start_worker

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _loopback import SAMPLE, loopback_model

from api_client import CompactionClient
from worker.celery_app import create_app
from worker.cli.demo import embedded_redis
from worker.hooks import HookSettings
from worker.settings import WorkerSettings

RESULTS = Path(__file__).resolve().parent / "results"
WINDOW = 200_000  # threshold 183 616 with the default reserve, band 22 952 below it


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def dist(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(values, 0.5) * 1000, 3),
            "p99_ms": round(pct(values, 0.99) * 1000, 3),
            "mean_ms": round(statistics.fmean(values) * 1000, 3), "n": len(values)}


def msg(text: str) -> dict[str, object]:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1}


def stall(client: CompactionClient, sid: str) -> tuple[float, bool]:
    started = time.perf_counter()
    handle = client.compact(sid, reason="threshold")
    entry = handle.wait(120)
    elapsed = time.perf_counter() - started
    assert isinstance(entry, dict) and entry["type"] == "compaction"
    return elapsed, handle.from_draft


def in_threads(fn: Any, items: list[str]) -> list[Any]:
    out: list[Any] = [None] * len(items)

    def run(i: int) -> None:
        out[i] = fn(items[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def sessions(client: CompactionClient, n: int) -> list[str]:
    return [client.sessions.import_jsonl(SAMPLE, f"b-{uuid.uuid4().hex[:10]}") for _ in range(n)]


def agent(client: CompactionClient, sid: str, turns: int, turn_s: float) -> bool:
    client.observe(sid, context_tokens=170_000, context_window=WINDOW)
    for i in range(turns):
        time.sleep(turn_s)
        client.sessions.append(sid, msg(f"turn {i}: the agent keeps working"))
    done = client.observe(sid, context_tokens=190_000, context_window=WINDOW)
    assert done.handle is not None
    done.handle.wait(120)
    return done.from_draft


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--model-ms", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--turn-ms", type=int, default=1500)
    args = parser.parse_args()
    n = args.sessions
    with embedded_redis() as url, loopback_model(args.model_ms / 1000) as model:
        model_url = model.base_url
        settings = WorkerSettings(
            redis_url=url, pool="threads", concurrency=n + 2, job_deadline_s=120.0,
            hooks=HookSettings(entry_points=False, plugins=[]),
            models=[{"provider": "openai", "model": "bench", "base_url": model_url,
                     "api_key": "bench", "context_window": WINDOW}])
        app = create_app(settings)
        with start_worker(app, pool="threads", concurrency=n + 2, perform_ping_check=False,
                          loglevel="WARNING", shutdown_timeout=60), CompactionClient(url) as client:
            client.ping()
            client.warm()  # connect and load the scripts before timing
            cold = in_threads(lambda s: stall(client, s), sessions(client, n))
            assert not any(from_draft for _, from_draft in cold)
            warm_ids = sessions(client, n)
            for h in [client.compact(s, reason="speculative") for s in warm_ids]:
                h.wait(120)
            warm: list[tuple[float, bool]] = []
            for sid in warm_ids:
                client.sessions.append(sid, msg("one more turn"))
                warm.append(stall(client, sid))
            hits = in_threads(lambda s: agent(client, s, args.turns, args.turn_ms / 1000),
                              sessions(client, n))
        app.close_runtime()
    without, with_draft = [t for t, _ in cold], [t for t, _ in warm]
    applied = sum(1 for _, d in warm if d)
    report = {
        "sessions": n, "model_ms": args.model_ms,
        "stall_without_draft": dist(without), "stall_with_draft": dist(with_draft),
        "drafts_applied": applied,
        "ratio_p50": round(pct(with_draft, 0.5) / pct(without, 0.5), 6),
        "ratio_p99": round(pct(with_draft, 0.99) / pct(without, 0.99), 6),
        "hit_rate": round(sum(hits) / len(hits), 3),
        "agent": {"turns": args.turns, "turn_ms": args.turn_ms},
    }
    print(f"stall without draft: p50 {report['stall_without_draft']['p50_ms']:.1f} ms, "
          f"p99 {report['stall_without_draft']['p99_ms']:.1f} ms (n={n})")
    print(f"stall with draft:    p50 {report['stall_with_draft']['p50_ms']:.3f} ms, "
          f"p99 {report['stall_with_draft']['p99_ms']:.3f} ms ({applied}/{n} applied)")
    print(f"ratio with/without:  p50 {report['ratio_p50']:.5f}, p99 {report['ratio_p99']:.5f}")
    print(f"draft hit rate while appending every {args.turn_ms} ms: {report['hit_rate']:.0%}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "instant.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
