"""A stale draft is extended, not redone (docs/instant-compaction.md).

A stored draft that no longer fits the window still summarises a prefix of the path: everything
before its cut point, as of its snapshot. Laid on the path right after its snapshot leaf, as if
it had been committed there, it turns the next plan into the iterative update of SPEC §9.4
(with §16 Q5): its summary is the ``<previous-summary>``, and only its kept range and what was
appended since are summarised. The laid entry is never written: the compaction planned this way
cuts at a real entry of the path, and its summary covers everything before that cut (the
draft's span through the previous summary, the rest through the new span).

A draft is a base only for the path it was planned on: its snapshot leaf on the path with
something appended after it, no compaction since, its first kept entry before its snapshot leaf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api_client.contract.session import CompactionEntry, Entry, parse_entry
from api_client.contract.session.context import last_compaction_index
from worker.compaction.prepare import CompactionSettings, Preparation, prepare_compaction
from worker.tokens import Tokenizer

__all__ = ["DRAFT_ENTRY_ID", "DraftBase", "draft_base", "prepare_extension"]

# The laid entry's id: not of the session's id shape (8 hex digits), so it names nothing stored.
DRAFT_ENTRY_ID = "draft-base"


@dataclass(frozen=True)
class DraftBase:
    """A stored draft laid on a path (``path``) as its last compaction."""

    job_id: str
    usage: Mapping[str, Any]     # what the draft cost, its own extensions summed (wire names)
    path: tuple[Entry, ...]
    usage_start: int             # where the context the agent's last usage measured begins
    cost_usd: float = 0.0        # the USD of ``usage``


def _index(path: Sequence[Entry], entry_id: str) -> int | None:
    return next((i for i in range(len(path) - 1, -1, -1) if path[i].id == entry_id), None)


def draft_base(path: Sequence[Entry], draft: Mapping[str, Any] | None) -> DraftBase | None:
    """``draft`` (the stored JSON) laid on ``path``, or None when it is no base for it."""
    if not draft or not isinstance(draft.get("entry"), dict):
        return None
    leaf, body = draft.get("snapshotLeafId"), dict(draft["entry"])
    at = _index(path, leaf) if isinstance(leaf, str) else None
    if at is None or at == len(path) - 1:
        return None  # off this path, or nothing appended since: nothing to extend
    if last_compaction_index(path) > at:
        return None  # compacted since: the draft's span is summarised already
    first_kept = body.get("firstKeptEntryId")
    if not isinstance(first_kept, str) or _index(path[:at + 1], first_kept) is None:
        return None
    laid = parse_entry({**body, "type": "compaction", "id": DRAFT_ENTRY_ID, "parentId": leaf,
                        "timestamp": str(draft.get("createdAt") or "")})
    assert isinstance(laid, CompactionEntry)
    usage, cost = draft.get("usage"), draft.get("costUsd")
    return DraftBase(job_id=str(draft.get("jobId") or ""),
                     usage=usage if isinstance(usage, dict) else {},
                     path=(*path[:at + 1], laid, *path[at + 1:]),
                     usage_start=last_compaction_index(path) + 1,
                     cost_usd=float(cost) if isinstance(cost, int | float) else 0.0)


def prepare_extension(path: Sequence[Entry], draft: Mapping[str, Any] | None,
                      settings: CompactionSettings, tokenizer: Tokenizer,
                      version: str | None = None) -> tuple[Preparation, DraftBase] | None:
    """The plan of ``path`` built on ``draft`` (see the module doc), or None: no base, or the
    growth since the draft offers no cut point after it (plan the path alone then)."""
    base = draft_base(path, draft)
    if base is None:
        return None
    prep = prepare_compaction(base.path, settings, tokenizer, usage_start=base.usage_start,
                              version=version)
    return None if prep is None else (prep, base)
