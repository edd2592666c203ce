"""How far back a job must read a session's path for its plan to come out as on the whole path.

A job reads the leaf's path newest first (``worker.store.paths``) and stops once the part read
(``path``: its oldest entry first, the root possibly missing) holds everything its plan looks
at; these predicates say when. They are what makes a steady job's cost follow the size of its
context, not of its session.

* The compaction plan (docs/compaction.md "Preparation") looks at the path after the previous
  compaction's kept boundary, the previous compaction itself, the last assistant usage
  (searched over the whole path, so the part read must hold one), and, for the tool results it
  may keep, the calls that made them (a result whose call lies further back is read until the
  call is found).
* The prune pass (docs/compaction.md "Pruning") walks every tool result of the path; the session's
  prune watermark
  names an entry up to which no tool result is left to prune (each is pruned, or of a protected
  tool, since the prune that recorded it), and neither the notices' counts nor the protection
  window need anything older: once a plan passed it, the results older than the watermark
  would only be skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

from api_client.contract.session import CompactionEntry, Entry, MessageEntry
from api_client.contract.session.context import last_compaction_index
from worker.compaction.prepare import last_assistant_usage
from worker.compaction.toolpairs import tool_call_ids

__all__ = ["compaction_reach", "plan_reached", "prune_reached"]


def plan_reached(path: Sequence[Entry]) -> bool:
    """Does ``path`` hold all that :func:`~worker.compaction.prepare.prepare_compaction` of the
    whole path reads?"""
    prev = last_compaction_index(path)
    if prev < 0:
        return False  # no earlier compaction read yet: the plan starts at the root
    previous = path[prev]
    assert isinstance(previous, CompactionEntry)
    kept = next((i for i in range(prev - 1, -1, -1) if path[i].id == previous.first_kept_entry_id),
                None)
    if kept is None or last_assistant_usage(path) is None:
        return False
    return _calls_read(path, kept)


def _calls_read(path: Sequence[Entry], start: int) -> bool:
    """Is the call of every tool result from ``start`` on in ``path``?"""
    calls: set[str] = set()
    for entry in path:
        if isinstance(entry, MessageEntry) and entry.role == "assistant":
            calls |= tool_call_ids(entry.message)
    return all(entry.message.get("toolCallId") in calls for entry in path[start:]
               if isinstance(entry, MessageEntry) and entry.role == "toolResult")


def prune_reached(path: Sequence[Entry], pruned_through: str | None) -> bool:
    """Does ``path`` hold all that :func:`~worker.compaction.prune.plan_prune` of the whole path
    counts and rewrites? When it reaches the prune watermark."""
    return pruned_through is not None and any(e.id == pruned_through for e in path)


def compaction_reach(path: Sequence[Entry], pruned_through: str | None, *, prune: bool) -> bool:
    """Enough for a compaction (with its prune pass when ``prune``)."""
    return plan_reached(path) and (not prune or prune_reached(path, pruned_through))
