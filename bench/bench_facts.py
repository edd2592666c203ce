"""Fact survival per kind on the reference sessions, without and with the fact ledger's block.

For each reference session the worker's default plan (keep 20 000 tokens, tiktoken) is
summarised by the deterministic summarizer, by a model answering a fixed text (what the tests'
loopback model does) and by every candidate ``COMPACTOR_MODELS`` names; then the ledger counts,
per kind, the facts of the summarised span findable verbatim in summary + kept messages before
its block is appended ("without") and after ("with"). The block's size is printed against its
budget.

    .venv/bin/python bench/bench_facts.py            (needs ../shared/fixtures/pi)
    COMPACTOR_MODELS='[{"provider":"openai","model":"gemma",
      "base_url":"http://127.0.0.1:8080/v1"}]' \\
        .venv/bin/python bench/bench_facts.py
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from api_client.contract.session import Entry, load_session
from api_client.contract.session.convert import convert_to_llm, for_compaction
from worker.compaction import (
    CompactionSettings,
    compact,
    get_tokenizer,
    prepare_compaction,
    serialize_conversation,
)
from worker.compaction.facts import (
    FACT_KINDS,
    OPEN,
    default_fact_budget,
    estimate_tokens,
    extract_facts,
)
from worker.compaction.ledger import hook_compaction_with_facts, summary_budget
from worker.compaction.prepare import Preparation
from worker.llm import build_summarizer
from worker.llm.settings import LlmSettings
from worker.summary_requests import CancelToken, Summarizer, SummaryRequest, SummaryResult, Usage
from worker.tokens import Tokenizer

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("COMPACTOR_PI_FIXTURES", REPO.parent / "shared" / "fixtures" / "pi"))
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures/pi")


class FixedText:
    """A model that answers every call with the same text (the tests' loopback model)."""

    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult:
        return SummaryResult("## Goal\n- Continue the work.", "fixed", "loopback", Usage(), 1)


def summarizers() -> list[tuple[str, Summarizer]]:
    chosen: list[tuple[str, Summarizer]] = [
        ("deterministic", build_summarizer(LlmSettings(models=[]))),
        ("fixed text", FixedText()),
    ]
    configured = LlmSettings()
    for candidate in configured.models:
        name = f"{candidate.provider}:{candidate.model or ''}"
        chosen.append((name, build_summarizer(LlmSettings(models=[candidate]))))
    return chosen


def _cell(found: int, total: int) -> str:
    return f"{found}/{total}" if total else "-"


def row(session: str, who: str, stats: dict[str, dict[str, int]], block_tokens: int,
        budget: int) -> str:
    total = sum(s["total"] for s in stats.values())
    without = sum(s["inSummary"] for s in stats.values())
    with_block = sum(s["inSummary"] + s["appended"] for s in stats.values())
    cells = []
    for kind in FACT_KINDS:
        s = stats[kind]
        cells.append(f"{_cell(s['inSummary'], s['total'])} → "
                     f"{_cell(s['inSummary'] + s['appended'], s['total'])}")
    share = f"{without}/{total} ({100 * without / max(total, 1):.0f} %) → {with_block}/{total} " \
            f"({100 * with_block / max(total, 1):.0f} %)"
    return f"| {session} | {who} | " + " | ".join(cells) + f" | {share} | {block_tokens}/{budget} |"


def last_tokens(path: list[Entry], limit: int, tokenizer: Tokenizer) -> list[Entry]:
    """The shortest suffix of ``path`` that starts at a user message and counts at least
    ``limit`` tokens of messages (the end of the session: where the work was densest)."""
    used = 0
    for index in range(len(path) - 1, -1, -1):
        message = for_compaction(path[index])
        used += tokenizer.count(message) if message is not None else 0
        if used >= limit and message is not None and message.get("role") == "user":
            return path[index:]
    return path


def verify(prep: Preparation, summary: str, stats: dict[str, dict[str, int]]) -> None:
    """The "with" column is what a verbatim search of summary + kept messages finds, not the
    ledger's own word: count it again here and stop on a difference."""
    facts = extract_facts([*prep.messages_to_summarize, *prep.turn_prefix_messages],
                          prep.carried_facts)
    kept = serialize_conversation(convert_to_llm(prep.recent_messages))
    haystack = " ".join(f"{summary}\n{kept}".split())
    for kind in FACT_KINDS:
        found = sum(1 for f in facts if f.kind == kind and " ".join(f.text.split()) in haystack)
        claimed = stats[kind]["inSummary"] + stats[kind]["appended"]
        if found != claimed:
            raise SystemExit(f"{kind}: the ledger claims {claimed} found, a search finds {found}")


def main() -> None:
    tokenizer = get_tokenizer("tiktoken")
    # A slice (the path's last N tokens, keeping a quarter) fits a small local model's window.
    slice_tokens = int(os.environ.get("BENCH_FACTS_SLICE_TOKENS", "0"))
    settings = CompactionSettings(keep_recent_tokens=slice_tokens // 4) if slice_tokens \
        else CompactionSettings()
    print("found/total without the block → with it (verbatim in summary + kept messages)\n")
    print("| session | summarizer | " + " | ".join(FACT_KINDS) + " | all | block tokens/budget |")
    print("|---" * (len(FACT_KINDS) + 4) + "|")
    for name in ("before-compaction", "large-session"):
        session = load_session((FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8"))
        path = session.tree().path_to(session.tree().leaf_id)
        if slice_tokens:
            path = last_tokens(path, slice_tokens, tokenizer)
        prep = prepare_compaction(path, settings, tokenizer)
        if prep is None:
            print(f"| {name} | (no plan) |")
            continue
        for who, summarizer in summarizers():
            start = time.perf_counter()
            outcome = compact(prep, summarizer)
            seconds = time.perf_counter() - start
            text = outcome.summary
            block = (text[text.rindex(OPEN) - 2 : text.index("</session-facts>") + 16]
                     if OPEN in text else "")
            stats = outcome.details["facts"]
            verify(prep, text, stats)
            budget = default_fact_budget(summary_budget(prep))
            print(row(name, f"{who} ({seconds:.1f} s)", stats, estimate_tokens(block), budget))
        # A hook's compaction (fromExtension) that writes a fixed text: the same block is appended.
        text, details, ledger = hook_compaction_with_facts(prep, "Summary written by a hook.", None)
        verify(prep, text, details["facts"])
        print(row(name, "hook, fixed text", details["facts"], estimate_tokens(ledger.block),
                  default_fact_budget(summary_budget(prep))))


if __name__ == "__main__":
    main()
