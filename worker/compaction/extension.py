"""A stale draft is extended, not redone (docs/instant-compaction.md).

A stored draft that no longer fits the window still summarises a prefix of the path: everything
before its cut point, as of its snapshot. Laid on the path right after its snapshot leaf, as if
it had been committed there, it turns the next plan into the iterative update of
docs/compaction.md "Preparation" (with Q5): its summary is the ``<previous-summary>``, and
only its kept range and what was appended since are summarised. The laid entry is never
written: the compaction planned this way cuts at a real entry of the path, and its summary
covers everything before that cut (the
draft's span through the previous summary, the rest through the new span).

A draft is a base only for the path it was planned on: its snapshot leaf on the path with
something appended after it, no compaction since, its first kept entry before its snapshot leaf.

With the agent's own cut (a ``pi-*`` version, ``worker.compaction.agent_cut``) the plan must be
the agent's plan of the path itself (docs/instant-compaction.md, "The validity rule"): the
extension is taken only when it keeps from the same entry, splits the same turn and summarises
the rest of the same span as the plan of the path alone (:func:`extends_to`), and a draft whose
cut is still the agent's cut of the path is committed as it is (:func:`draft_is_exact`). When
both split the same turn (the new cut further into it, its start before the draft's cut), the
history is the draft's and only the turn's longer prefix is summarised anew (:func:`_same_turn`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from api_client.contract.session import CompactionEntry, Entry, parse_entry
from api_client.contract.session.context import last_compaction_index
from worker.compaction.agent_cut import PI_VERSIONS
from worker.compaction.prepare import CompactionSettings, Preparation, prepare_compaction
from worker.compaction.summarize import SPLIT_TURN_SEPARATOR
from worker.tokens import Tokenizer

__all__ = ["DRAFT_ENTRY_ID", "DraftBase", "draft_base", "draft_is_exact", "extends_to",
           "prepare_extension", "same_cut"]

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
    growth since the draft offers no cut point after it (plan the path alone then). With the
    agent's cut (``version`` pi-*), None too when the extension's cut is not the agent's cut
    of ``path`` (:func:`extends_to`)."""
    base = draft_base(path, draft)
    if base is None:
        return None
    prep = prepare_compaction(base.path, settings, tokenizer, usage_start=base.usage_start,
                              version=version)
    if prep is None:
        return None
    if version in PI_VERSIONS:
        own = prepare_compaction(path, settings, tokenizer, version=version)
        if own is None:
            return None
        if not extends_to(prep, own):
            split = _same_turn(path, draft or {}, own, settings, tokenizer, version)
            return None if split is None else (split, base)
    return prep, base


def _same_turn(path: Sequence[Entry], draft: Mapping[str, Any], own: Preparation,
               settings: CompactionSettings, tokenizer: Tokenizer,
               version: str) -> Preparation | None:
    """``own`` (the agent's plan of ``path``) with the draft's history summary as its history,
    when the draft split the same turn as ``own`` does (the same history span, a shorter prefix):
    only the turn prefix is summarised (one model call, the history call's text the draft's)."""
    body, leaf = draft.get("entry"), draft.get("snapshotLeafId")
    if not own.is_split_turn or not isinstance(body, dict) or not isinstance(leaf, str):
        return None
    summary, at = body.get("summary"), _index(path, leaf)
    if at is None or not isinstance(summary, str) or SPLIT_TURN_SEPARATOR not in summary:
        return None
    then = prepare_compaction(path[:at + 1], settings, tokenizer, version=version)
    if then is None or not then.is_split_turn or then.first_kept_entry_id != body.get(
            "firstKeptEntryId") or then.summarize_entry_ids != own.summarize_entry_ids:
        return None
    if path[then.turn_start_index].id != path[own.turn_start_index].id:
        return None
    history = summary.split(SPLIT_TURN_SEPARATOR, 1)[0]
    return replace(own, messages_to_summarize=(), summarize_entry_ids=(),
                   previous_summary=history)


def same_cut(a: Preparation, b: Preparation) -> bool:
    """Both plans keep from the same entry and split the same turn (the same prefix)."""
    return (a.first_kept_entry_id == b.first_kept_entry_id
            and a.is_split_turn == b.is_split_turn
            and a.turn_prefix_entry_ids == b.turn_prefix_entry_ids)


def extends_to(extension: Preparation, own: Preparation) -> bool:
    """The plan built on a draft is ``own`` (the plan of the path alone): the same cut, and
    what it summarises anew is the end of ``own``'s span (the draft's summary holds the rest),
    with something new to summarise."""
    new = extension.summarize_entry_ids
    if not new and not extension.turn_prefix_entry_ids:
        return False
    if not same_cut(extension, own):
        return False
    return not new or own.summarize_entry_ids[-len(new):] == new


def draft_is_exact(path: Sequence[Entry], draft: Mapping[str, Any], settings: CompactionSettings,
                   tokenizer: Tokenizer, version: str) -> bool:
    """The stored ``draft``'s cut is the agent's cut of ``path``: planned on a state of this
    path (its snapshot leaf on it, no compaction since), keeping from the entry the plan of
    ``path`` keeps from, and the plan of its snapshot splits the same turn as that plan."""
    leaf, body = draft.get("snapshotLeafId"), draft.get("entry")
    at = _index(path, leaf) if isinstance(leaf, str) else None
    if at is None or not isinstance(body, dict) or last_compaction_index(path) > at:
        return False
    own = prepare_compaction(path, settings, tokenizer, version=version)
    if own is None or own.first_kept_entry_id != body.get("firstKeptEntryId"):
        return False
    if at == len(path) - 1:
        return True  # the state it was planned on: the same plan
    then = prepare_compaction(path[:at + 1], settings, tokenizer, version=version)
    return then is not None and same_cut(then, own)
