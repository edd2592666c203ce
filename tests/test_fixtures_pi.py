"""The reference agent's real sessions: load, migrate, round-trip and plan with invariants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api_client.contract.session import CompactionEntry, MessageEntry, load_session
from worker.compaction import (
    CompactionSettings,
    build_session_context,
    collect_entries_for_branch_summary,
    for_compaction,
    get_tokenizer,
    plan_prune,
    prepare_branch_entries,
    prepare_compaction,
)
from worker.compaction.prune import PROTECT_TOKENS, PROTECTED_TOOLS

pytestmark = pytest.mark.fixtures


def _load(pi_file: Path):  # type: ignore[no-untyped-def]
    return load_session(pi_file.read_text(encoding="utf-8"), source=pi_file.name)


def test_load_migrates_v1_to_a_linear_v3_chain(pi_file: Path) -> None:
    session = _load(pi_file)
    assert session.original_version == 1 and session.header["version"] == 3
    ids = [e.id for e in session.entries]
    assert len(set(ids)) == len(ids)  # Q12: no collisions
    assert all(e.parent_id == (ids[i - 1] if i else None) for i, e in enumerate(session.entries))
    lines = [line for line in pi_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(session.entries) == len(lines) - 1


def test_export_round_trip_is_json_equal(pi_file: Path) -> None:
    first = _load(pi_file)
    again = load_session(first.to_jsonl(), source="export")
    assert again.original_version == 3
    assert [json.loads(x) for x in again.to_jsonl().splitlines()] == [
        json.loads(x) for x in first.to_jsonl().splitlines()]


def test_before_compaction_resolves_old_first_kept_indices(pi_dir: Path) -> None:
    session = _load(pi_dir / "before-compaction.jsonl")
    compactions = [e for e in session.entries if isinstance(e, CompactionEntry)]
    assert len(compactions) == 2
    ids = {e.id for e in session.entries}
    assert all(c.first_kept_entry_id in ids and "firstKeptEntryIndex" not in c.raw
               for c in compactions)
    roles = [e.role for e in session.entries if isinstance(e, MessageEntry)]
    assert (roles.count("user"), roles.count("assistant"), roles.count("toolResult"),
            roles.count("bashExecution")) == (55, 484, 448, 3)


def test_context_starts_with_the_latest_compaction(pi_dir: Path) -> None:
    session = _load(pi_dir / "before-compaction.jsonl")
    context = build_session_context(session.tree())
    last = [e for e in session.entries if isinstance(e, CompactionEntry)][-1]
    assert (context.messages[0].entry_id == last.id
            and context.messages[0].message["role"] == "compactionSummary")
    kept_from = [e.id for e in session.entries].index(last.first_kept_entry_id)
    assert context.messages[1].entry_id == session.entries[kept_from].id


@pytest.mark.parametrize("tokenizer", ["estimate", "tiktoken"])
@pytest.mark.parametrize("keep", [2_000, 20_000, 60_000])
def test_plan_invariants(pi_file: Path, tokenizer: str, keep: int) -> None:
    session = _load(pi_file)
    path = session.tree().path_to(session.tree().leaf_id)
    prep = prepare_compaction(path, CompactionSettings(keep_recent_tokens=keep),
                              get_tokenizer(tokenizer))
    assert prep is not None
    first = path[prep.first_kept_entry_index]
    assert first.id == prep.first_kept_entry_id
    # never cut at a tool result
    assert not (isinstance(first, MessageEntry) and first.role == "toolResult")
    prev = max((i for i, e in enumerate(path) if isinstance(e, CompactionEntry)), default=-1)
    in_range = [e.id for e in path[prev + 1 :] if for_compaction(e) is not None]
    own = [i for i in prep.summarize_entry_ids if i in set(in_range)]
    # summarized (own range) + prefix + kept partition the messages after the previous compaction,
    # in order
    assert own + list(prep.turn_prefix_entry_ids) + list(prep.kept_entry_ids) == in_range
    assert prep.keep_recent_tokens <= keep


def test_prune_protects_read_skill_and_the_newest_40k(pi_file: Path) -> None:
    session = _load(pi_file)
    path = session.tree().path_to(session.tree().leaf_id)
    tok = get_tokenizer("estimate")
    plan = plan_prune(path, tok)
    pruned = set(plan.pruned_entry_ids)
    newer = 0
    for entry in reversed(path):
        if isinstance(entry, MessageEntry) and entry.role == "toolResult":
            if entry.id in pruned:
                assert entry.message.get("toolName") not in PROTECTED_TOOLS
                assert newer >= PROTECT_TOKENS
            newer += tok.count(entry.message)
    assert plan.tokens_saved == 0 or plan.tokens_saved >= 20_000


def test_branch_collection_over_the_whole_path(pi_file: Path) -> None:
    session = _load(pi_file)
    tree = session.tree()
    target = session.entries[10].id
    collection = collect_entries_for_branch_summary(tree, tree.leaf_id, target)
    assert collection.common_ancestor_id == target
    assert [e.id for e in collection.entries] == [e.id for e in session.entries[11:]]
    prep = prepare_branch_entries(collection.entries, 128_000 - 16_384, get_tokenizer("estimate"))
    assert prep.total_tokens > 0
    assert list(prep.included_entry_ids) == [i for i in prep.included_entry_ids
                                             if i in {e.id for e in collection.entries}]


@pytest.mark.parametrize("keep", [2_000, 20_000])
def test_no_plan_on_a_real_session_orphans_a_tool_result(pi_file: Path, keep: int) -> None:
    # Q22 over real files: compact at every 7th entry of the path as if it were the leaf.
    from api_client.contract.session import SessionTree, parse_entry
    from worker.compaction.toolpairs import orphaned_tool_results

    session = _load(pi_file)
    path = session.tree().path_to(session.tree().leaf_id)
    tokenizer = get_tokenizer("estimate")
    planned = 0
    for end in range(7, len(path) + 1, 7):
        prep = prepare_compaction(path[:end], CompactionSettings(keep_recent_tokens=keep),
                                  tokenizer)
        if prep is None:
            continue
        new = parse_entry({"type": "compaction", "id": "q22", "parentId": path[end - 1].id,
                           "timestamp": "2026-01-01T00:00:00.000Z", "summary": "s",
                           "firstKeptEntryId": prep.first_kept_entry_id, "tokensBefore": 1})
        context = build_session_context(SessionTree([*path[:end], new]), "q22")
        assert orphaned_tool_results(m.message for m in context.messages) == [], end
        planned += 1
    assert planned > len(path) // 14


def test_deterministic_summary_keeps_the_facts_of_a_real_session(pi_file: Path) -> None:
    from worker.compaction import compact
    from worker.compaction.facts import CLOSE, OPEN, default_fact_budget, estimate_tokens
    from worker.compaction.ledger import summary_budget
    from worker.llm import build_summarizer
    from worker.llm.settings import LlmSettings

    session = _load(pi_file)
    path = session.tree().path_to(session.tree().leaf_id)
    prep = prepare_compaction(path, CompactionSettings(), get_tokenizer("tiktoken"))
    assert prep is not None
    outcome = compact(prep, build_summarizer(LlmSettings(models=[])))
    stats = outcome.details["facts"]
    total = sum(s["total"] for s in stats.values())
    kept = sum(s["inSummary"] + s["appended"] for s in stats.values())
    assert total > 100 and kept >= 0.95 * total
    assert stats["paths"]["dropped"] == 0 and stats["requests"]["dropped"] == 0
    without = sum(s["inSummary"] for s in stats.values())
    assert without >= 0.85 * total  # the summarizer itself keeps requests, commands and errors
    summary = outcome.summary
    if OPEN in summary:
        block = summary[summary.index(OPEN) : summary.index(CLOSE) + len(CLOSE)]
        assert estimate_tokens(block) <= default_fact_budget(summary_budget(prep))


def test_a_summary_that_keeps_nothing_still_leaves_the_facts_findable(pi_file: Path) -> None:
    """The loopback model's fixed text keeps no fact: the block alone must carry them, within
    10 % of the stored summary's budget (history, plus turn prefix on a split turn)."""
    from worker.compaction import compact
    from worker.compaction.facts import CLOSE, OPEN, default_fact_budget, estimate_tokens
    from worker.compaction.ledger import summary_budget
    from worker.summary_requests import SummaryResult, Usage

    class FixedText:
        def summarize(self, request: object, cancel: object = None) -> SummaryResult:
            return SummaryResult("## Goal\n- Continue the work.", "fixed", "loopback", Usage(), 1)

    tree = _load(pi_file).tree()  # one load: a v1 file gets fresh ids on every migration
    prep = prepare_compaction(tree.path_to(tree.leaf_id), CompactionSettings(),
                              get_tokenizer("tiktoken"))
    assert prep is not None
    outcome = compact(prep, FixedText())
    stats = outcome.details["facts"]
    total = sum(s["total"] for s in stats.values())
    assert sum(s["inSummary"] for s in stats.values()) < 0.25 * total  # the text kept little
    assert sum(s["inSummary"] + s["appended"] for s in stats.values()) >= 0.95 * total
    assert stats["paths"]["dropped"] == 0 and stats["errors"]["dropped"] == 0
    block = outcome.summary[outcome.summary.index(OPEN) : outcome.summary.index(CLOSE) + len(CLOSE)]
    assert estimate_tokens(block) <= default_fact_budget(summary_budget(prep))
