"""What a stored session costs in Redis: the reference sessions, imported, then worked on.

    .venv/bin/python bench/bench_session_bytes.py [--fixtures DIR]

Starts a private redis-server (never the shared one), imports each reference session
(``../shared/fixtures/pi/*.jsonl``; skipped without them) and a small one cut from the first of
them (its first 20 lines, every string of a message cut to 200 characters: ~10 kB, where a
job's fixed costs show) and sums ``MEMORY USAGE <key> SAMPLES 0`` (exact: every element
counted) over every key of the session (``SCAN MATCH <p>:session:{<sid>}:*``); then a worker
(the no-LLM summarizer, so the figure does not depend on a model) runs a prune and the sum is
taken again, then a manual compaction and the sum is taken once more (job records, events,
effect markers and token counts included). Figures are bytes, against the JSONL's bytes:
docs/storage.md, "Sizing".
Writes ``bench/results/session_bytes.json``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import redis
from _report import Report

from api_client import CompactionClient
from api_client.contract.keys import KeyLayout
from worker.celery_app import create_app
from worker.cli.demo import embedded_redis, worker_thread
from worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[1]
# As the tests and bench_core find them: COMPACTOR_PI_FIXTURES, else ../shared/fixtures/pi.
FIXTURES = Path(os.environ.get("COMPACTOR_PI_FIXTURES", REPO.parent / "shared" / "fixtures" / "pi"))


def session_bytes(raw: redis.Redis[str], layout: KeyLayout, sid: str) -> dict[str, int]:
    """MEMORY USAGE (exact) of every key of the session, by its name after the hash tag."""
    base = layout.session(sid).header.removesuffix("header")
    sizes: dict[str, int] = defaultdict(int)
    for key in raw.scan_iter(base.replace("{", "\\{").replace("}", "\\}") + "*", count=1000):
        name = key[len(base):]
        kind = "job:*" if name.startswith("job:") else name
        sizes[kind] += int(raw.memory_usage(key, samples=0) or 0)
    return dict(sizes)


def small_session(text: str, lines: int = 20, chars: int = 200) -> str:
    """The first ``lines`` of a session, every string of a message cut to ``chars``."""
    def cut(value: Any) -> Any:
        if isinstance(value, str):
            return value[:chars]
        if isinstance(value, list):
            return [cut(v) for v in value]
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return value
    out = []
    for line in text.splitlines()[:lines]:
        entry = json.loads(line)
        if entry.get("type") == "message":
            entry["message"] = cut(entry["message"])
        out.append(json.dumps(entry, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    args = parser.parse_args()
    files = sorted(args.fixtures.glob("*.jsonl"))
    if not files:
        print(f"bench_session_bytes: skipped, no reference sessions at {args.fixtures}")
        return
    texts = {path.stem: (path.read_text(encoding="utf-8"), path.name) for path in files}
    first = texts[files[0].stem][0]
    texts["small-session"] = (small_session(first), f"{files[0].name}'s first 20 lines, cut")
    report = Report("session_bytes")
    notes: dict[str, Any] = {}
    with embedded_redis() as url:
        raw: redis.Redis[str] = redis.Redis.from_url(url, decode_responses=True)
        settings = WorkerSettings(redis_url=url, pool="threads", concurrency=2)
        layout = KeyLayout(settings.client.key_prefix)
        with CompactionClient(settings.client) as client:
            for name, (text, origin) in texts.items():
                size = len(text.encode("utf-8"))
                sid = client.sessions.import_jsonl(text, name)
                imported = session_bytes(raw, layout, sid)
                report.baseline(f"{sid}_jsonl", size, "B",
                                f"{origin}, {len(text.splitlines())} lines")
                report.figure(f"{sid}_imported", sum(imported.values()), "B",
                              against=f"{sid}_jsonl", what="every key after the import")
                notes[sid] = {"jsonl": size, "imported": imported}
            app = create_app(settings)
            with worker_thread(app):
                for sid in texts:
                    client.prune(sid).wait(timeout=300)
                    pruned = session_bytes(raw, layout, sid)
                    report.figure(f"{sid}_pruned", sum(pruned.values()), "B",
                                  against=f"{sid}_jsonl",
                                  what="after a prune (its record and events)")
                    client.compact(sid, reason="manual").wait(timeout=300)
                    worked = session_bytes(raw, layout, sid)
                    report.figure(f"{sid}_worked", sum(worked.values()), "B",
                                  against=f"{sid}_jsonl",
                                  what="after a prune and a compaction (records, events, ...)")
                    notes[sid].update(pruned=pruned, worked=worked)
            app.close_runtime()
        raw.close()
    report.note(**notes)
    print(json.dumps(notes, indent=1))
    report.write()


if __name__ == "__main__":
    main()
