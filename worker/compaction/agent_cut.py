"""The agent's own cut (docs/compaction.md "The cut is the agent's cut"): what pi's
``prepareCompaction`` chooses, per pi version, for a request whose agent settings name a summary
format (``pi-1.6`` or ``pi-0.73``).

Both versions walk back from the newest entry, adding chars/4 estimates until
``keepRecentTokens`` are kept, then cut at the nearest valid cut point at or after that entry,
pull adjacent metadata entries into the kept part and call the cut a split turn when it does
not start a turn. The search starts at the previous compaction's first kept entry (its kept
tail is summarised again). They differ in details this module keeps apart:

* **pi 0.73** works on the path itself: only ``message`` entries are counted, custom messages
  and branch summaries are cut points and turn starts by their entry type, a cut at anything
  but a user message looks back for a turn start (so a pulled-in metadata entry before a user
  message makes a split turn), and with no cut point at or after the budget's entry it keeps
  from the first cut point.
* **pi 1.6** works on the context projection (the previous compaction first, its kept tail,
  then what follows; system messages left out of the tail): every entry counts the messages it
  puts in the context, custom messages and branch summaries by their messages' roles, a cut is
  a split turn unless its entry starts a turn, the fallback is the last cut point, and a plan
  with nothing to summarise is no plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api_client.contract.session import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    Entry,
    Message,
    MessageEntry,
)
from api_client.contract.session.convert import for_compaction
from worker.tokens import Tokenizer

__all__ = ["PI_VERSIONS", "AgentCut", "agent_cut"]

PI_VERSIONS = ("pi-1.6", "pi-0.73")
_CUT_ROLES = frozenset({"user", "assistant", "bashExecution", "custom", "branchSummary",
                        "compactionSummary"})
_TURN_ROLES = frozenset({"user", "bashExecution", "custom", "branchSummary",
                         "compactionSummary"})


@dataclass(frozen=True, slots=True)
class AgentCut:
    """Indices into the path: what is summarised, the split turn's prefix, the first kept."""

    first_kept_entry_index: int
    turn_start_index: int  # -1 unless a split turn
    is_split_turn: bool
    summarize: tuple[int, ...]
    prefix: tuple[int, ...]


def _context_messages(entry: Entry) -> list[Message]:
    """pi 1.6's ``sessionEntryToContextMessages`` for an entry after the newest compaction
    (older compactions contribute nothing there)."""
    if isinstance(entry, CompactionEntry):
        return []
    if isinstance(entry, BranchSummaryEntry) and not entry.raw.get("summary"):
        return []
    message = for_compaction(entry)
    return [] if message is None else [message]


class _View:
    """The entries pi 1.6 or 0.73 searches, as path indices, with its rules for each."""

    def __init__(self, path: Sequence[Entry], version: str, tokenizer: Tokenizer) -> None:
        self.path, self.new, self.tokenizer = path, version == "pi-1.6", tokenizer
        prev = next((i for i in range(len(path) - 1, -1, -1)
                     if isinstance(path[i], CompactionEntry)), -1)
        self.prev = prev
        kept_from = None
        if prev >= 0:
            first_kept = path[prev].raw.get("firstKeptEntryId")
            kept_from = next((i for i in range(prev) if path[i].id == first_kept), None)
        if kept_from is None:
            self.order = list(range(prev + 1, len(path)))
        elif self.new:  # the projection: the kept tail (no system messages), then the rest
            tail = [i for i in range(kept_from, prev) if not _is_system(path[i])]
            self.order = [*tail, *range(prev + 1, len(path))]
        else:
            self.order = list(range(kept_from, len(path)))

    def messages(self, i: int) -> list[Message]:
        return _context_messages(self.path[i])

    def tokens(self, i: int) -> int:
        entry = self.path[i]
        if self.new:
            return sum(self.tokenizer.count(m) for m in self.messages(i))
        return self.tokenizer.count(entry.message) if isinstance(entry, MessageEntry) else 0

    def is_cut_point(self, i: int) -> bool:
        entry = self.path[i]
        if self.new:
            return any(m.get("role") in _CUT_ROLES for m in self.messages(i))
        if isinstance(entry, MessageEntry):
            return entry.role in _CUT_ROLES
        return isinstance(entry, (BranchSummaryEntry, CustomMessageEntry))

    def starts_turn(self, i: int) -> bool:
        entry = self.path[i]
        if self.new:
            return any(m.get("role") in _TURN_ROLES for m in self.messages(i))
        if isinstance(entry, MessageEntry):
            return entry.role in ("user", "bashExecution")
        return isinstance(entry, (BranchSummaryEntry, CustomMessageEntry))

    def stops_pull(self, i: int) -> bool:
        """The scan for metadata before the cut stops here."""
        entry = self.path[i]
        if isinstance(entry, CompactionEntry):
            return True
        return bool(self.messages(i)) if self.new else isinstance(entry, MessageEntry)

    def included(self, i: int) -> bool:
        """Its message is summarised (``getMessage(s)FromEntryForCompaction``)."""
        entry = self.path[i]
        if isinstance(entry, CompactionEntry):
            return False
        if self.new:
            return bool(self.messages(i))
        return for_compaction(entry) is not None


def _is_system(entry: Entry) -> bool:
    return isinstance(entry, MessageEntry) and entry.role == "system"


def _cut(view: _View, keep: int) -> tuple[int, int, bool]:
    """(first kept, turn start, split) as positions in ``view.order``."""
    order = view.order
    points = [k for k in range(len(order)) if view.is_cut_point(order[k])]
    if not points:
        return 0, -1, False
    cut, acc = points[0], 0
    for k in range(len(order) - 1, -1, -1):
        counted = view.tokens(order[k])
        if counted == 0:
            continue
        acc += counted
        if acc >= keep:
            after = next((p for p in points if p >= k), None)
            cut = after if after is not None else (points[-1] if view.new else points[0])
            break
    while cut > 0 and not view.stops_pull(order[cut - 1]):
        cut -= 1
    starts = view.starts_turn(order[cut]) if view.new else (
        isinstance(e := view.path[order[cut]], MessageEntry) and e.role == "user")
    if starts:
        return cut, -1, False
    turn = next((k for k in range(cut, -1, -1) if view.starts_turn(order[k])), -1)
    return cut, turn, turn != -1


def agent_cut(path: Sequence[Entry], keep: int, tokenizer: Tokenizer,
              version: str) -> AgentCut | None:
    """pi ``version``'s preparation of ``path`` (see the module doc), or None where pi has
    none (the path ends with a compaction; the first kept entry has no id; pi 1.6: nothing to
    summarise)."""
    if not path or isinstance(path[-1], CompactionEntry):
        return None
    view = _View(path, version, tokenizer)
    if not view.order:
        return None
    cut, turn, split = _cut(view, keep)
    first = view.order[cut]
    if not path[first].id:
        return None
    history_end = turn if split else cut
    summarize = tuple(i for i in view.order[:history_end] if view.included(i))
    prefix = tuple(i for i in view.order[turn:cut] if view.included(i)) if split else ()
    if view.new and not summarize and not prefix:
        return None
    return AgentCut(first, view.order[turn] if split else -1, split, summarize, prefix)
