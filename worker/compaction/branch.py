"""Branch summaries: collecting the abandoned path and budgeting it
(docs/compaction.md "Branch summaries")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api_client.contract.errors import SessionCycleError
from api_client.contract.session import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    Entry,
    Message,
    MessageEntry,
    SessionTree,
)
from api_client.contract.session.convert import for_branch
from worker.compaction.fileops import (
    FileOps,
    add_details_file_ops,
    compute_file_lists,
    extract_file_ops,
)
from worker.tokens import Tokenizer

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "MINIMUM_BRANCH_BUDGET",
    "BranchCollection",
    "BranchPreparation",
    "branch_budget",
    "branch_destination",
    "collect_entries_for_branch_summary",
    "prepare_branch_entries",
]

DEFAULT_CONTEXT_WINDOW = 128_000
MINIMUM_BRANCH_BUDGET = 4_096
_SQUEEZE = 0.9


@dataclass(frozen=True)
class BranchCollection:
    common_ancestor_id: str | None
    entries: tuple[Entry, ...]  # chronological


@dataclass(frozen=True)
class BranchPreparation:
    messages: tuple[Message, ...]  # chronological
    included_entry_ids: tuple[str, ...]
    read_files: tuple[str, ...]
    modified_files: tuple[str, ...]
    total_tokens: int


def collect_entries_for_branch_summary(
    tree: SessionTree, old_leaf_id: str | None, target_id: str
) -> BranchCollection:
    """Entries from the old leaf up to (not including) the common ancestor with the target."""
    if not old_leaf_id:
        return BranchCollection(None, ())
    ancestor = tree.common_ancestor(old_leaf_id, target_id)
    collected: list[Entry] = []
    seen: set[str] = set()
    current = tree.by_id.get(old_leaf_id)
    while current is not None and current.id != ancestor:
        if current.id in seen:  # Q15
            raise SessionCycleError(f"parentId cycle through entry {current.id}",
                                    source=tree.source, line=current.line)
        seen.add(current.id)
        collected.append(current)
        current = tree.by_id.get(current.parent_id) if current.parent_id else None
    collected.reverse()
    return BranchCollection(ancestor, tuple(collected))


def branch_budget(context_window: int | None, reserve_tokens: int) -> int:
    """Never below 4 096 tokens (docs/compaction.md "Branch summaries")."""
    window = context_window or DEFAULT_CONTEXT_WINDOW
    return max(MINIMUM_BRANCH_BUDGET, window - reserve_tokens)


def _details_ops(entries: Sequence[Entry]) -> FileOps:
    ops = FileOps()
    for entry in entries:
        if isinstance(entry, BranchSummaryEntry) and not entry.from_extension and entry.details:
            add_details_file_ops(entry.details, ops)
    return ops


def prepare_branch_entries(
    entries: Sequence[Entry], token_budget: int, tokenizer: Tokenizer
) -> BranchPreparation:
    """Newest first until the budget is spent; summaries may squeeze in below 90 % of it."""
    ops = _details_ops(entries)
    kept: list[tuple[str, Message]] = []
    total = 0
    for entry in reversed(entries):
        message = for_branch(entry)
        if message is None:
            continue
        extract_file_ops(message, ops)  # before the budget check: the breaking entry still counts
        tokens = tokenizer.count(message)
        if token_budget > 0 and total + tokens > token_budget:
            if (isinstance(entry, (CompactionEntry, BranchSummaryEntry))
                    and total < _SQUEEZE * token_budget):
                kept.append((entry.id, message))
                total += tokens
            break
        kept.append((entry.id, message))
        total += tokens
    kept.reverse()
    read, modified = compute_file_lists(ops)
    return BranchPreparation(
        tuple(m for _, m in kept), tuple(i for i, _ in kept), tuple(read), tuple(modified), total
    )


def branch_destination(tree: SessionTree, target_id: str) -> str | None:
    """docs/compaction.md "Branch navigation": a user message or custom_message target goes back to
    its parent."""
    target = tree.get(target_id)
    if (isinstance(target, CustomMessageEntry)
            or (isinstance(target, MessageEntry) and target.role == "user")):
        return target.parent_id
    return target_id
