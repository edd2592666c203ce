"""Fact survival end to end: a slice of each reference session through the client, a real
worker and the model ``COMPACTOR_MODELS`` names (issue 12, item 5).

Each session's last ``--slice`` tokens (starting at a user message, re-rooted; 0: the whole
session, keeping the default 20 000 tokens) are imported into Redis, a worker subprocess
(threads, one slot) compacts them with ``keep_recent_tokens`` a quarter of the slice, and the
stored entry's ``details.facts`` is printed per kind: found in summary + kept messages without
the ledger's block → with it. Not run by ``make bench``: it needs a model server
(docs/fact-ledger.md; the notes give the llama.cpp set-up), e.g.

    COMPACTOR_MODELS='[{"provider":"openai","model":"gemma","base_url":"http://127.0.0.1:8080/v1",
      "context_window":8192,"max_output_tokens":512,"timeout_s":900}]' \\
      .venv/bin/python bench/e2e_facts.py --slice 16000 --redis-url redis://127.0.0.1:6379/14

``--loopback`` serves the tests' model instead (a fixed text, over HTTP on loopback). The database
named by ``--redis-url`` is flushed first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import redis
from _loopback import loopback_model
from bench_facts import FIXTURES, last_tokens

from api_client import ClientSettings, CompactionClient
from api_client.contract.session import load_session
from worker.compaction import get_tokenizer
from worker.compaction.facts import FACT_KINDS

REPO = Path(__file__).resolve().parents[1]
PREFIX = "e2e-facts"


def slice_jsonl(name: str, tokens: int) -> str:
    text = (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8")
    if not tokens:
        return text  # the whole session
    tree = load_session(text).tree()
    part = last_tokens(list(tree.path_to(tree.leaf_id)), tokens, get_tokenizer("tiktoken"))
    lines = [text.split("\n", 1)[0]]
    for index, entry in enumerate(part):
        raw = dict(entry.raw)
        if index == 0:
            raw["parentId"] = None  # the slice starts a new path
        lines.append(json.dumps(raw, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def table_row(name: str, seconds: float, facts: dict[str, dict[str, int]]) -> str:
    cells = []
    for kind in FACT_KINDS:
        s = facts[kind]
        found = s["inSummary"] + s["appended"]
        cells.append(f"{s['inSummary']}/{s['total']} → {found}/{s['total']}" if s["total"] else "-")
    total = sum(s["total"] for s in facts.values())
    before = sum(s["inSummary"] for s in facts.values())
    after = sum(s["inSummary"] + s["appended"] for s in facts.values())
    share = f"{100 * before / max(total, 1):.0f} % → {100 * after / max(total, 1):.0f} %"
    return f"| {name} ({seconds:.0f} s) | " + " | ".join(cells) + f" | {share} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slice", type=int, default=16_000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--sessions", nargs="*", default=["before-compaction", "large-session"])
    parser.add_argument("--loopback", action="store_true",
                        help="serve the tests' fixed-text model on loopback (200k window) instead")
    args = parser.parse_args()
    keep = args.slice // 4 if args.slice else 20_000
    with ExitStack() as stack:
        if args.loopback:
            model = stack.enter_context(loopback_model(0.01))
            os.environ["COMPACTOR_MODELS"] = json.dumps([{
                "provider": "openai", "model": "fixed", "base_url": model.base_url,
                "api_key": "bench", "context_window": 200_000}])
        run(args, keep)


def run(args: argparse.Namespace, keep: int) -> None:
    redis.Redis.from_url(args.redis_url).flushdb()
    env = {**os.environ, "COMPACTOR_REDIS_URL": args.redis_url, "COMPACTOR_KEY_PREFIX": PREFIX,
           "COMPACTOR_KEEP_RECENT_TOKENS": str(keep),
           # A small local model takes minutes per chunk: room for it, and no redelivery.
           "COMPACTOR_JOB_DEADLINE_S": "1800", "COMPACTOR_VISIBILITY_TIMEOUT_S": "2400"}
    client = CompactionClient(ClientSettings(redis_url=args.redis_url, key_prefix=PREFIX,
                                             keep_recent_tokens=keep))
    sids = [(n, client.sessions.import_jsonl(slice_jsonl(n, args.slice), f"e2e-{n}"))
            for n in args.sessions]
    (REPO / "bench" / "results").mkdir(exist_ok=True)
    log = open(REPO / "bench" / "results" / "e2e-worker.log", "w")  # noqa: SIM115
    worker = subprocess.Popen([str(REPO / ".venv" / "bin" / "compactor"), "worker",
                               "--concurrency", "1", "-P", "threads"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    print("| session | " + " | ".join(FACT_KINDS) + " | all |")
    print("|---" * (len(FACT_KINDS) + 2) + "|")
    try:
        for name, sid in sids:
            start = time.monotonic()
            handle = client.compact(sid, reason="manual")
            entry = handle.wait(2400)
            assert isinstance(entry, dict)
            print(table_row(name, time.monotonic() - start, entry["details"]["facts"]), flush=True)
    finally:
        worker.terminate()
        worker.wait(60)
        log.close()
        client.close()


if __name__ == "__main__":
    main()
