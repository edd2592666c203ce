"""The fact ledger applied to a compaction, a hook's compaction and a branch summary.

Where the facts come from and where they are looked up:

* compaction: the summarised messages (history and turn prefix) plus the facts carried from the
  previous summary's block; looked up in the new summary (file-operation tags included) and the
  kept messages, serialised as the model would read them (docs/rules.md "Serialised conversation").
* hook compaction (``fromExtension``): the same facts and lookup; the block (and the plan's
  file-operation tags, when the hook wrote none) is appended to the hook's summary too, since a
  lost fact is lost whoever wrote the summary. The counts go into ``details.facts`` only when
  the hook's ``details`` is absent or an object without ``facts``.
* branch summary: the included entries of the abandoned branch (tool results too); looked up in
  the summary alone, since the branch is left behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from api_client.contract.session import Entry, Message
from api_client.contract.session.convert import convert_to_llm, for_compaction
from worker.compaction import prompts
from worker.compaction.caches import PlanCaches
from worker.compaction.facts import LedgerResult, apply_ledger, default_fact_budget, extract_facts
from worker.compaction.fileops import format_file_operations, strip_file_operation_tags
from worker.compaction.prepare import Preparation
from worker.compaction.serialize import normalized_conversation

__all__ = ["branch_ledger", "compaction_ledger", "hook_compaction_with_facts", "summary_budget"]


def _budget(configured: int | None, summary_budget: int) -> int:
    return default_fact_budget(summary_budget) if configured is None else max(0, configured)


def summary_budget(prep: Preparation) -> int:
    """The token budget of the summary a compaction stores: the history summary's, plus the
    turn prefix summary's when a split turn has one (the two are stored as one text)."""
    reserve = prep.settings.reserve_tokens
    split = prep.is_split_turn and bool(prep.turn_prefix_messages)
    return (prompts.history_max_tokens(reserve)
            + (prompts.turn_prefix_max_tokens(reserve) if split else 0))


def compaction_ledger(prep: Preparation, summary_with_tags: str,
                      budget_tokens: int | None = None, *,
                      caches: PlanCaches | None = None) -> LedgerResult:
    """The ledger of a compaction whose summary (file-operation tags included) is written.

    ``budget_tokens``: room for the block; None is 10 % of :func:`summary_budget`, 0 only
    measures. ``caches``: the worker's (``PlanCaches``), else nothing is kept.
    """
    caches = caches or PlanCaches()
    facts = extract_facts([*prep.messages_to_summarize, *prep.turn_prefix_messages],
                          prep.carried_facts, folds=caches.fact_folds)
    parts = caches.parts

    def kept() -> str:  # built only when a fact is not in the summary (apply_ledger)
        return normalized_conversation(convert_to_llm(prep.recent_messages), parts)

    budget = _budget(budget_tokens, summary_budget(prep))
    return apply_ledger(facts, summary_with_tags, budget, found_in_normalized=kept)


def with_block(summary: str, tags: str, ledger: LedgerResult) -> str:
    """The stored layout: summary, fact block, file-operation tags (each after a blank line)."""
    return summary + ledger.block + tags


def hook_compaction_with_facts(prep: Preparation, summary: str, details: Any,
                               budget_tokens: int | None = None, *,
                               caches: PlanCaches | None = None) -> tuple[str, Any, LedgerResult]:
    """A hook's summary with the lost facts appended, and its details with the counts.

    A summary without file-operation tags gets the plan's (as a model's summary does), so the
    block's budget goes to the facts a file list cannot hold.
    """
    has_tags = strip_file_operation_tags(summary) != summary
    tags = "" if has_tags else format_file_operations(prep.read_files, prep.modified_files)
    ledger = compaction_ledger(prep, summary + tags, budget_tokens, caches=caches)
    if details is None:
        details = {"facts": ledger.stats}
    elif isinstance(details, dict) and "facts" not in details:
        details = {**details, "facts": ledger.stats}
    return with_block(summary, tags, ledger), details, ledger


def branch_ledger(entries: Sequence[Entry], included_ids: Sequence[str], summary: str,
                  budget_tokens: int | None = None, *,
                  caches: PlanCaches | None = None) -> LedgerResult:
    """The ledger of a branch summary over the entries it included (tool results too)."""
    start = next((i for i, e in enumerate(entries) if included_ids and e.id == included_ids[0]),
                 len(entries))
    messages: list[Message] = [m for e in entries[start:] if (m := for_compaction(e)) is not None]
    budget = _budget(budget_tokens, prompts.BRANCH_MAX_TOKENS)
    folds = caches.fact_folds if caches is not None else None
    return apply_ledger(extract_facts(messages, folds=folds), summary, budget)
