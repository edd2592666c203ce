"""Fault matrix of the model layer: attempts and wall time per case, against a loopback server.

Runs the router with its DEFAULT retry numbers (1 000 ms base, x2, ±20 % jitter, 30 s wait cap,
3 attempts per candidate, 20 attempts per job) and a 3 s attempt timeout, over real HTTP to the
fake OpenAI/Anthropic server of the tests. Prints a Markdown table, and each case's wall time as
a ratio to the model's own time: the healthy case (one successful call) measured in the same run.

    .venv/bin/python bench/bench_llm.py
"""

from __future__ import annotations

import logging
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _report import Report
from llm.llm_fakes import (
    EXTRACTIVE,
    Act,
    FakeLLMServer,
    Flag,
    anthropic,
    error,
    hang,
    make_request,
    openai,
    raw,
    reset,
    trickle,
)

from worker.llm import build_summarizer
from worker.llm.errors import AllCandidatesFailedError, ModelCallError
from worker.llm.settings import LlmSettings, ModelCandidate

TIMEOUT_S = 3.0
RATE = {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}}


@dataclass
class Case:
    name: str
    primary: list[Act] = field(default_factory=list)
    secondary: list[Act] = field(default_factory=list)
    floor: bool = False
    primary_window: int | None = None
    chunkable: bool = False
    conversation_tokens: int = 0
    cancel_after: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[Any], None] | None = None


def overflow(shape: str) -> Act:
    bodies = {
        "openai": {"error": {"message": "This model's maximum context length is 8192 tokens",
                             "code": "context_length_exceeded"}},
        "llama.cpp": {"error": {"code": 400, "message": "the request exceeds the available context "
                                "size, try increasing it", "type": "exceed_context_size_error"}},
        "anthropic": {"type": "error",
                      "error": {"type": "invalid_request_error",
                                "message": "prompt is too long: 213462 tokens > 200000 maximum"}},
    }
    return error(400, bodies[shape])


CASES = [
    Case("healthy primary"),
    Case("429 retry-after: 1, then ok", [error(429, RATE, headers={"retry-after": "1"})]),
    Case("429 retry-after-ms: 1500, then ok",
         [error(429, RATE, headers={"retry-after-ms": "1500"})]),
    Case("429 retry-after: 120 (over the 30 s cap)",
         [error(429, RATE, headers={"retry-after": "120"})]),
    Case("500, 502, then ok", [error(500), error(502, "<html>bad gateway</html>")]),
    Case("503 x3 (primary exhausted)", [error(503)] * 3),
    Case("529 overloaded, then ok",
         [error(529, {"type": "error", "error": {"type": "overloaded_error"}})]),
    Case("hung connection (never answers)", [hang()] * 3),
    Case("connection reset, then ok", [reset()]),
    Case("malformed JSON, then ok", [raw(200, "{truncated")]),
    Case("empty content, then ok", [error(200, {"choices": [{"message": {"content": ""}}]})]),
    Case("slow stream past the deadline", [trickle("x" * 400, pieces=40, interval=0.1)]),
    Case("slow stream within the deadline", [trickle("ok " * 50, pieces=5, interval=0.2)]),
    Case("overflow, OpenAI shape -> larger window", [overflow("openai")]),
    Case("overflow, llama.cpp shape -> larger window", [overflow("llama.cpp")]),
    Case("overflow, Anthropic shape on both -> floor", [overflow("anthropic")],
         [overflow("anthropic")], floor=True),
    Case("401 unauthorized", [error(401, {"error": {"message": "Incorrect API key"}})]),
    Case("403 forbidden", [error(403, {"error": {"message": "forbidden"}})]),
    Case("404 model not found", [error(404, {"error": {"message": "model not found"}})]),
    Case("429 insufficient_quota",
         [error(429, {"error": {"type": "insufficient_quota", "message": "quota"}})]),
    Case("every provider 503 -> extractive floor", [error(503)] * 3, [error(503)] * 3, floor=True),
    Case("circuit open (cooled down by an earlier job)", [error(503)] * 3,
         settings={"llm_failure_threshold": 3}, prepare=lambda router: _trip(router)),
    Case("input 2x the primary window -> larger window", primary_window=4000, chunkable=True,
         conversation_tokens=8000),
    Case("input 2x the only window -> chunked", primary_window=4000, chunkable=True,
         conversation_tokens=8000, settings={"models_only_primary": True}),
    Case("overflow, unknown window -> chunked", [overflow("llama.cpp")], chunkable=True,
         conversation_tokens=4000, settings={"models_only_primary": True}),
    Case("cancelled during a hung call (0.5 s)", [hang()], cancel_after=0.5),
]


def _trip(router: Any) -> None:
    router.summarize(make_request())  # three 503s trip the breaker; this job falls back


def conversation(tokens: int) -> list[dict[str, Any]]:
    per = 100  # tokens per message
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"msg {i} " + "word " * (per * 4 // 5),
             "timestamp": 0} for i in range(tokens // per)]


def run_case(case: Case) -> tuple[str, str, str, str, str]:
    server = FakeLLMServer()
    try:
        extra = dict(case.settings)
        only_primary = extra.pop("models_only_primary", False)
        models = [openai(server, "primary", timeout_s=TIMEOUT_S,
                         context_window=case.primary_window)]
        if not only_primary:
            models.append(anthropic(server, "secondary", timeout_s=TIMEOUT_S,
                                    context_window=200_000))
        if case.floor:
            models.append(EXTRACTIVE)
        settings = LlmSettings(models=[ModelCandidate.model_validate(m) for m in models], **extra)
        router = build_summarizer(settings)
        if case.prepare:
            server.script("primary", *case.primary)
            case.prepare(router)
            server.seen.clear()
        else:
            server.script("primary", *case.primary)
        server.script("secondary", *case.secondary)
        request = make_request(conversation(case.conversation_tokens), chunkable=case.chunkable,
                               max_tokens=500)
        flag = Flag()
        if case.cancel_after:
            flag.cancel_after(case.cancel_after)
        started = time.monotonic()
        try:
            result = router.summarize(request, flag)
            outcome = (f"{result.provider}/{result.model}"
                       + (f" ({result.chunks} chunks)" if result.chunks else ""))
            attempts = str(result.attempts)
        except AllCandidatesFailedError as err:
            outcome, attempts = f"failed: {err}", str(err.attempts)
        except ModelCallError as err:
            outcome, attempts = type(err).__name__, str(len(server.seen))
        wall = time.monotonic() - started
        router.close()
        requests = " ".join(s.key[0] for s in server.seen) or "-"  # p = primary, s = secondary
        return case.name, outcome, attempts, f"{wall:.3f}", requests
    finally:
        server.close()


def main() -> None:
    logging.basicConfig(level=logging.ERROR)  # the router logs every failed attempt as a warning
    random.seed(0)  # the jitter draws: the table is reproducible
    report = Report("llm")
    rows = [("case", "outcome", "HTTP attempts", "wall s", "requests (p/s)")]
    rows += [run_case(case) for case in CASES]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for n, row in enumerate(rows):
        print("| " + " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    healthy = rows[1]
    report.baseline("healthy call", float(healthy[3]), "s", "one successful call (same run)")
    for name, outcome, attempts, wall, _ in rows[1:]:
        report.figure(name, float(wall), "s", against="healthy call", outcome=outcome,
                      attempts=attempts)
    report.write()


if __name__ == "__main__":
    main()
