"""Drafts that land: threshold compactions of a live session, plain vs drafts (issue 32).

    .venv/bin/python bench/bench_drafts.py [--pace 1] [--model-ms 1000] [--seeds 1 2]

One session per mode and seed grows turn by turn (turns of 1-8k tokens replayed from the
reference sessions, the agent pausing ``--pace`` seconds between turns) through three threshold
compactions of a 200k window; a counting loopback model answers every call in ``--model-ms``;
one worker process with the default concurrency. The session starts with 120k tokens of the
same messages appended at once, without observe (at this pace a draft is due only inside the
band, from ~161k; the agent's pace is measured from the turns after it).

* **plain**: ``should_compact`` → ``compact(reason="threshold")`` → ``wait()``;
* **drafts**: ``observe(...)`` after every turn (docs/instant-compaction.md), ``wait()`` on
  the compaction it starts above the threshold.

The sessions run one after the other (``--parallel N``: N at once, shorter, the worker then
shared); each session's model calls and input tokens are read from its job records (the
loopback reports a call's input tokens as its usage); the loopback's own totals check the sum.
Prints per mode the model calls, input tokens, drafts computed / extended / applied, instant
compactions, the mean stall and the tokens a turn sends to the agent's own model (the context
its next request carries, mean over the turns: a draft applied may keep more); JSON to
bench/results/drafts.json (``drafts-pace<N>.json`` for another pace).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _loopback import loopback_model, wait_for_workers, workers
from _report import Report

from api_client import CompactionClient, should_compact
from worker.cli.demo import embedded_redis
from worker.tokens import get_tokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "pi"
WINDOW = 200_000
COMPACTIONS = 3
PREFILL_TOKENS = 120_000
TURN_TOKENS = (1_000, 8_000)
ROLES = ("user", "assistant", "toolResult")
MODES = ("plain", "drafts")

Message = tuple[dict[str, Any], int]  # a message and its token count


def reference_messages() -> list[Message]:
    """Every message of the reference sessions that fits in a turn, with its token count."""
    count = get_tokenizer("tiktoken").count
    out = []
    if not any(FIXTURES.glob("*.jsonl")):
        sys.exit(f"bench_drafts: no reference sessions in {FIXTURES}")
    for path in sorted(FIXTURES.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            message = entry.get("message") if entry.get("type") == "message" else None
            if not isinstance(message, dict) or message.get("role") not in ROLES:
                continue
            message = {k: v for k, v in message.items() if k != "usage"}
            tokens = count(message)
            if tokens < TURN_TOKENS[1]:
                out.append((message, tokens))
    return out


def turns(messages: list[Message], seed: int) -> list[list[Message]]:
    """The messages (from a seeded offset, cycling) packed into turns of 1-8k tokens."""
    rng = random.Random(seed)
    at = rng.randrange(len(messages))
    out: list[list[Message]] = []
    while len(out) < 2_000:
        target, turn, size = rng.randint(*TURN_TOKENS), [], 0
        while size < target and (not turn or size + messages[at][1] <= TURN_TOKENS[1]):
            turn.append(messages[at])
            size += messages[at][1]
            at = (at + 1) % len(messages)
        out.append(turn)
    return out


@dataclass
class Run:
    mode: str
    seed: int
    pace_s: float
    sid: str = ""
    turns: int = 0
    sent_tokens: int = 0  # the context the agent's next request carries, summed over the turns
    compactions: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


class Agent:
    """One session's agent: appends a turn, tells Compactor, compacts when told to."""

    def __init__(self, url: str, run: Run, script: list[list[Message]]) -> None:
        self.client = CompactionClient(url)
        self.run = run
        self.script = iter(script)
        self.context = 0

    def append(self, turn: list[Message]) -> None:
        batch = []
        for message, tokens in turn:
            if message["role"] == "assistant":  # the usage a provider would have reported
                message = {**message, "usage": {
                    "input": self.context, "output": tokens, "cacheRead": 0, "cacheWrite": 0,
                    "totalTokens": self.context + tokens}}
            batch.append(message)
            self.context += tokens
        self.client.sessions.append_many(self.run.sid, batch)

    def recount(self) -> None:
        """After a compaction: what the next request sends (summary, kept, appended since)."""
        context = self.client.context(self.run.sid).session
        count = get_tokenizer("tiktoken").count
        self.context = sum(count(m.message) for m in context.messages)

    def start(self) -> None:
        self.run.sid = self.client.sessions.create(cwd="/bench")
        while self.context < PREFILL_TOKENS:
            self.append(next(self.script))

    def compact_plain(self) -> tuple[Any, bool] | None:
        if not should_compact(self.context, WINDOW, self.client.settings):
            return None
        return self.client.compact(self.run.sid, reason="threshold", context_window=WINDOW), False

    def compact_drafts(self) -> tuple[Any, bool] | None:
        done = self.client.observe(self.run.sid, context_tokens=self.context,
                                   context_window=WINDOW)
        if done.action != "compact" or done.handle is None:
            return None
        return done.handle, done.from_draft

    def live(self) -> None:
        step = self.compact_plain if self.run.mode == "plain" else self.compact_drafts
        while len(self.run.compactions) < COMPACTIONS:
            time.sleep(self.run.pace_s)
            self.append(next(self.script))
            self.run.turns += 1
            started = time.perf_counter()
            asked = step()
            if asked is None:
                self.run.sent_tokens += self.context
                continue
            handle, from_draft = asked
            entry = handle.wait(300)
            stall = time.perf_counter() - started
            before = self.context
            self.recount()
            self.run.sent_tokens += self.context
            self.run.compactions.append({"fromDraft": from_draft, "stallS": round(stall, 4),
                                         "entry": entry["id"], "contextBefore": before,
                                         "contextAfter": self.context, "turn": self.run.turns})

    def settle(self, timeout_s: float = 120) -> None:
        """Let a job still running end, then read every job record of the session."""
        deadline = time.monotonic() + timeout_s
        while True:
            ids = {e.job_id for e in self.client.events(session_id=self.run.sid, since="start",
                                                        follow=False)}
            records = [self.client.jobs.get(i) for i in sorted(ids)]
            if all(r.state.terminal for r in records) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.run.jobs = [r.to_wire() for r in records]

    def __call__(self) -> None:
        try:
            self.start()
            self.live()
            self.settle()
        except Exception as err:  # reported in the table; the other sessions go on
            self.run.error = f"{type(err).__name__}: {err}"
        finally:
            self.client.close()


def tally(runs: list[Run]) -> dict[str, Any]:
    """A mode's figures, summed over its seeds."""
    jobs = [j for r in runs for j in r.jobs]
    speculative = [j for j in jobs if j.get("reason") == "speculative"]
    compactions = [c for r in runs for c in r.compactions]
    return {
        "seeds": [r.seed for r in runs], "turns": sum(r.turns for r in runs),
        "sent_tokens_per_turn": round(sum(r.sent_tokens for r in runs)
                                      / max(1, sum(r.turns for r in runs))),
        "model_calls": sum((j.get("result") or {}).get("modelAttempts", 0) for j in jobs),
        "input_tokens": sum((j.get("usage") or {}).get("input", 0) for j in jobs),
        "draft_input_tokens": sum((j.get("usage") or {}).get("input", 0) for j in speculative),
        "drafts_computed": sum(bool((j.get("result") or {}).get("draft")) for j in speculative),
        "drafts_extended": sum(bool((j.get("result") or {}).get("extendedDraft"))
                               for j in speculative),
        "drafts_applied": sum(bool((j.get("result") or {}).get("fromDraft")) for j in jobs),
        "compactions": len(compactions),
        "instant": sum(c["fromDraft"] for c in compactions),
        "stall_mean_s": round(statistics.fmean(c["stallS"] for c in compactions), 4)
        if compactions else None,
        "context_after_mean": round(statistics.fmean(c["contextAfter"] for c in compactions))
        if compactions else None,
        "errors": [r.error for r in runs if r.error],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pace", type=float, default=1.0, help="seconds between turns")
    parser.add_argument("--model-ms", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--parallel", type=int, default=1,
                        help="sessions at once (1: one after the other, as the issue measured)")
    args = parser.parse_args()
    name = "drafts" if args.pace == 1 else f"drafts-pace{args.pace:g}"
    report = Report(name)
    messages = reference_messages()
    runs = [Run(mode, seed, args.pace) for seed in args.seeds for mode in MODES]
    with embedded_redis() as url, loopback_model(args.model_ms / 1000) as model, \
            workers(url, model.base_url, 1):
        wait_for_workers(url, 1)
        todo = list(runs)
        lock = threading.Lock()

        def agent_thread() -> None:
            while True:
                with lock:
                    if not todo:
                        return
                    run = todo.pop(0)
                Agent(url, run, turns(messages, run.seed))()

        threads = [threading.Thread(target=agent_thread) for _ in range(args.parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        totals = {"calls": model.calls, "input_tokens": model.input_tokens}
    modes = {mode: tally([r for r in runs if r.mode == mode]) for mode in MODES}
    print(f"\n  pace {args.pace:g} s, model {args.model_ms} ms, seeds {args.seeds}, "
          f"{args.parallel} session(s) at once")
    header = ("mode", "calls", "input tok", "drafts", "extended", "applied", "instant",
              "stall s", "turns", "tok/turn")
    print("  " + " ".join(f"{h:>10}" for h in header))
    for mode, t in modes.items():
        row = (mode, t["model_calls"], f"{t['input_tokens'] / 1e6:.2f} M", t["drafts_computed"],
               t["drafts_extended"], t["drafts_applied"], f"{t['instant']}/{t['compactions']}",
               t["stall_mean_s"], t["turns"], t["sent_tokens_per_turn"])
        print("  " + " ".join(f"{v!s:>10}" for v in row))
    counted = sum(t["model_calls"] for t in modes.values())
    print(f"  loopback totals: {totals['calls']} calls, {totals['input_tokens'] / 1e6:.2f} M "
          f"input tokens (the records: {counted} calls)")
    plain, drafts = modes["plain"], modes["drafts"]
    report.baseline("plain_input_tokens", plain["input_tokens"], "tok",
                    f"plain mode, {plain['compactions']} compactions")
    report.figure("drafts_input_tokens", drafts["input_tokens"], "tok",
                  against="plain_input_tokens", goal="<= 1.3")
    # What a turn costs the agent's own model: a draft applied keeps more (its cut was planned
    # turns earlier), so every later request carries more; the summarizer's tokens are a share.
    report.baseline("plain_sent_tokens_per_turn", plain["sent_tokens_per_turn"], "tok",
                    "the context the agent's next request carries, mean over the turns")
    report.figure("drafts_sent_tokens_per_turn", drafts["sent_tokens_per_turn"], "tok",
                  against="plain_sent_tokens_per_turn", goal="<= 1.1")
    share = drafts["instant"] / drafts["compactions"] if drafts["compactions"] else 0.0
    report.figure("instant_share", share, "", goal=">= 0.9",
                  what="threshold compactions applied from a draft")
    report.note(pace_s=args.pace, model_ms=args.model_ms, parallel=args.parallel, modes=modes,
                loopback=totals,
                runs=[{"mode": r.mode, "seed": r.seed, "turns": r.turns,
                       "compactions": r.compactions, "error": r.error} for r in runs])
    report.write()
    if any(t["errors"] for t in modes.values()):
        print("  errors:", [e for t in modes.values() for e in t["errors"]])
        sys.exit(1)


if __name__ == "__main__":
    main()
