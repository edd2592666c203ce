"""Fact survival per kind on the reference sessions, without and with the fact ledger's block.

For each reference session the worker's default plan (keep 20 000 tokens, tiktoken) is
summarised by the deterministic summarizer, by a model answering a fixed text (what the tests'
loopback model does) and by every candidate ``COMPACTOR_MODELS`` names; then the ledger counts,
per kind, the facts of the summarised span findable verbatim in summary + kept messages before
its block is appended ("without") and after ("with"). The block's size is printed against its
budget.

    .venv/bin/python bench/bench_facts.py            (needs ../shared/fixtures/pi)
    COMPACTOR_MODELS='[{"provider":"openai","model":"gemma","baseUrl":"http://127.0.0.1:8080/v1"}]' \
        .venv/bin/python bench/bench_facts.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from api_client.session import load_session
from worker.compaction import CompactionSettings, compact, get_tokenizer, prepare_compaction
from worker.compaction.facts import FACT_KINDS, OPEN, default_fact_budget, estimate_tokens
from worker.compaction.prompts import history_max_tokens
from worker.llm import build_summarizer
from worker.llm.settings import LlmSettings
from worker.summarizer_types import CancelToken, Summarizer, SummaryRequest, SummaryResult, Usage

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("COMPACTOR_PI_FIXTURES", REPO.parent / "shared" / "fixtures" / "pi"))
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures/pi")


class FixedText:
    """A model that answers every call with the same text (the tests' loopback model)."""

    def summarize(self, request: SummaryRequest, cancel: CancelToken | None = None) -> SummaryResult:
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


def row(session: str, who: str, stats: dict[str, dict[str, int]], block_tokens: int, budget: int) -> str:
    total = sum(s["total"] for s in stats.values())
    without = sum(s["inSummary"] for s in stats.values())
    with_block = sum(s["inSummary"] + s["appended"] for s in stats.values())
    cells = []
    for kind in FACT_KINDS:
        s = stats[kind]
        cells.append(f"{_cell(s['inSummary'], s['total'])} → {_cell(s['inSummary'] + s['appended'], s['total'])}")
    share = f"{without}/{total} ({100 * without / max(total, 1):.0f} %) → {with_block}/{total} " \
            f"({100 * with_block / max(total, 1):.0f} %)"
    return f"| {session} | {who} | " + " | ".join(cells) + f" | {share} | {block_tokens}/{budget} |"


def main() -> None:
    tokenizer = get_tokenizer("tiktoken")
    settings = CompactionSettings()
    budget = default_fact_budget(history_max_tokens(settings.reserve_tokens))
    print("found/total without the block → with it (verbatim in summary + kept messages)\n")
    print("| session | summarizer | " + " | ".join(FACT_KINDS) + " | all | block tokens/budget |")
    print("|---" * (len(FACT_KINDS) + 4) + "|")
    for name in ("before-compaction", "large-session"):
        session = load_session((FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8"))
        path = session.tree().path_to(session.tree().leaf_id)
        prep = prepare_compaction(path, settings, tokenizer)
        if prep is None:
            print(f"| {name} | (no plan) |")
            continue
        for who, summarizer in summarizers():
            start = time.perf_counter()
            outcome = compact(prep, summarizer)
            seconds = time.perf_counter() - start
            text = outcome.summary
            block = text[text.rindex(OPEN) - 2 : text.index("</session-facts>") + 16] if OPEN in text else ""
            print(row(name, f"{who} ({seconds:.1f} s)", outcome.details["facts"], estimate_tokens(block), budget))


if __name__ == "__main__":
    sys.exit(main())
