"""Valid cut points, turn starts and the cut point (docs/compaction.md "Cut point")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api_client.contract.session import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    Entry,
    MessageEntry,
)
from api_client.contract.session.convert import for_compaction
from worker.tokens import Tokenizer

__all__ = [
    "CutPoint",
    "classify_cut",
    "find_cut_point",
    "find_turn_start_index",
    "find_valid_cut_points",
    "is_valid_cut_point",
]

_CUT_ROLES = frozenset(
    {"user", "assistant", "bashExecution", "hookMessage", "branchSummary", "compactionSummary",
     "custom"}
)
# Q1/Q4: custom and hookMessage messages start turns like custom_message entries do.
_TURN_START_ROLES = frozenset({"user", "bashExecution", "custom", "hookMessage"})


@dataclass(frozen=True, slots=True)
class CutPoint:
    first_kept_entry_index: int
    turn_start_index: int
    is_split_turn: bool


def _is_entry_turn_start(entry: Entry) -> bool:
    return isinstance(entry, (BranchSummaryEntry, CustomMessageEntry))


def is_valid_cut_point(entry: Entry) -> bool:
    if isinstance(entry, MessageEntry):
        return entry.role in _CUT_ROLES
    return _is_entry_turn_start(entry)


def is_turn_start(entry: Entry) -> bool:
    if isinstance(entry, MessageEntry):
        return entry.role in _TURN_START_ROLES
    return _is_entry_turn_start(entry)


def find_valid_cut_points(entries: Sequence[Entry], start: int, end: int) -> list[int]:
    return [i for i in range(start, end) if is_valid_cut_point(entries[i])]


def find_turn_start_index(entries: Sequence[Entry], idx: int, start: int) -> int:
    for i in range(idx, start - 1, -1):
        if is_turn_start(entries[i]):
            return i
    return -1


def _budget_cut(entries: Sequence[Entry], start: int, end: int, keep: int,
                tokenizer: Tokenizer) -> int | None:
    """Step 3: walk back until ``keep`` tokens of messages are kept; Q3 for the overshoot.
    None: no valid cut point in ``[start, end)``. The cut points are looked for only around
    where the walk stops (listing them all first walked every entry of the session again)."""
    acc = 0
    for i in range(end - 1, start - 1, -1):
        entry = entries[i]
        if not isinstance(entry, MessageEntry):
            continue  # custom_message, branch_summary and compaction entries are not counted
        acc += tokenizer.count(entry.message)
        if acc >= keep:
            at_or_after = _first_cut_point(entries, i, end)
            if at_or_after is not None:
                return at_or_after
            return _last_cut_point(entries, start, i)  # Q3: the nearest one before it
    return _first_cut_point(entries, start, end)


def _first_cut_point(entries: Sequence[Entry], start: int, end: int) -> int | None:
    return next((i for i in range(start, end) if is_valid_cut_point(entries[i])), None)


def _last_cut_point(entries: Sequence[Entry], start: int, end: int) -> int | None:
    return next((i for i in range(end - 1, start - 1, -1) if is_valid_cut_point(entries[i])),
                None)


def _pull_in_metadata(entries: Sequence[Entry], cut: int, start: int) -> int:
    while cut > start and not isinstance(entries[cut - 1], (CompactionEntry, MessageEntry)):
        cut -= 1
    return cut


def _classify(entries: Sequence[Entry], cut: int, start: int, end: int) -> tuple[int, bool]:
    """Step 5 with Q2 (skip pulled-in metadata) and Q4 (clean cuts at turn starts)."""
    k = next((i for i in range(cut, end) if for_compaction(entries[i]) is not None), None)
    if k is None or is_turn_start(entries[k]):
        return -1, False
    turn_start = find_turn_start_index(entries, k, start)
    return turn_start, turn_start != -1


def classify_cut(entries: Sequence[Entry], cut: int, start: int, end: int) -> CutPoint:
    """Step 5 for a cut chosen elsewhere (Q22 moves cuts); turn starts are searched to ``start``."""
    turn_start, split = _classify(entries, cut, start, end)
    return CutPoint(cut, turn_start, split)


def find_cut_point(
    entries: Sequence[Entry], start: int, end: int, keep_recent_tokens: int, tokenizer: Tokenizer
) -> CutPoint:
    budget_cut = _budget_cut(entries, start, end, keep_recent_tokens, tokenizer)
    if budget_cut is None:  # no valid cut point
        return CutPoint(start, -1, False)
    return classify_cut(entries, _pull_in_metadata(entries, budget_cut, start), start, end)
