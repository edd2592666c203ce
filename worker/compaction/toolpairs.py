"""Tool calls and their results stay together (docs/compaction.md "Tool pairs").

A provider rejects a request whose ``toolResult`` does not follow the assistant message holding
its ``toolCall`` (a permanent 400). The reference agent's cut can start a kept range with a tool
result when a compaction was committed while that tool ran; these helpers move such a cut so the
call is kept too, or report that no safe cut exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice

from api_client.contract.session import CompactionEntry, Entry, Message, MessageEntry
from worker.compaction.cutpoint import is_valid_cut_point

__all__ = ["orphaned_tool_results", "safe_first_kept_id", "safe_first_kept_index", "tool_call_ids"]


def tool_call_ids(message: Message) -> set[str]:
    """The ids of the ``toolCall`` blocks of an assistant message (empty for other roles)."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return set()
    return {
        b["id"] for b in content
        if isinstance(b, dict) and b.get("type") == "toolCall" and isinstance(b.get("id"), str)
    }


def _call_id(message: Message) -> str | None:
    value = message.get("toolCallId")
    return value if isinstance(value, str) else None


def _holds_call(message: Message, call_id: str | None) -> bool:
    # A result without a usable id pairs with any assistant message that made tool calls.
    ids = tool_call_ids(message)
    return call_id in ids if call_id is not None else bool(ids)


def _orphans(messages: Iterable[tuple[int, Message]]) -> Iterator[tuple[int, Message]]:
    """The (position, message) of each tool result no earlier assistant message called."""
    seen: set[str] = set()
    any_call = False
    for position, message in messages:
        role = message.get("role")
        if role == "assistant":
            ids = tool_call_ids(message)
            seen |= ids
            any_call = any_call or bool(ids)
        elif role == "toolResult":
            call_id = _call_id(message)
            if not (call_id in seen if call_id is not None else any_call):
                yield position, message


def orphaned_tool_results(messages: Iterable[Message]) -> list[int]:
    """Positions of the tool results that no earlier assistant message of the list called."""
    return [position for position, _ in _orphans(enumerate(messages))]


def _kept_messages(path: Sequence[Entry], first: int) -> Iterator[tuple[int, Message]]:
    # What the new compaction's context keeps; earlier compactions contribute nothing
    # (docs/rules.md "Context building").
    return ((i, e.message) for i, e in islice(enumerate(path), first, None)
            if isinstance(e, MessageEntry))


def _opens_kept_range(path: Sequence[Entry], first: int, at: int) -> bool:
    """Whether a cut at ``first`` would start the kept range with the tool result at ``at``."""
    return not any(is_valid_cut_point(e) for e in islice(path, first, at))


def _calls_before(path: Sequence[Entry], end: int) -> set[str]:
    return set().union(*(tool_call_ids(e.message) for e in islice(path, end)
                         if isinstance(e, MessageEntry)))


def _was_called(calls: set[str], result: Message) -> bool:
    call_id = _call_id(result)
    return call_id in calls if call_id is not None else bool(calls)


def _first_orphan(path: Sequence[Entry], first: int) -> tuple[int, Message] | None:
    """The first kept tool result a cut at ``first`` orphans: its call is on the path before the
    kept range, or the kept range would start with it. A result no call on the path made was an
    orphan before any compaction (Q22 is not about it): it never moves the cut."""
    orphans = _orphans(_kept_messages(path, first))
    found = next(orphans, None)
    if found is None or _opens_kept_range(path, first, found[0]):
        return found  # the usual case: no orphan, and nothing before the cut is walked
    calls = _calls_before(path, first)  # a kept orphan's call is not in [first, at)
    return next((o for o in chain((found,), orphans) if _was_called(calls, o[1])), None)


def _caller_index(path: Sequence[Entry], result: Message, before: int, floor: int) -> int | None:
    call_id = _call_id(result)
    for i in range(before - 1, floor - 1, -1):
        entry = path[i]
        if isinstance(entry, MessageEntry) and _holds_call(entry.message, call_id):
            return i
    return None


def _pull_in_metadata(path: Sequence[Entry], cut: int, floor: int) -> int:
    # The pull-in of docs/compaction.md "Cut point", bounded by the lowest index this planner may
    # keep.
    while cut > floor and not isinstance(path[cut - 1], (CompactionEntry, MessageEntry)):
        cut -= 1
    return cut


def safe_first_kept_index(path: Sequence[Entry], first: int, floor: int, end: int) -> int | None:
    """The nearest first-kept index to ``first`` whose kept range orphans no tool result.

    An orphan whose call lies in ``[floor, first)`` moves the cut back to the latest valid cut
    point at or before that call (normally the assistant message itself), as does one the kept
    range would start with to the latest valid cut point before it; an orphan whose call is out
    of reach moves the cut forward past the orphan. None: no such cut exists. Results no call on
    the path made are left where they are (see :func:`_first_orphan`).
    """
    for _ in range(len(path) + 1):
        found = _first_orphan(path, first)
        if found is None:
            return first
        at, result = found
        caller = _caller_index(path, result, at, floor)
        if caller is None and _opens_kept_range(path, first, at):
            caller = at - 1  # a kept range never starts with a tool result
        backward = None if caller is None else _latest_cut_point(path, floor, caller)
        if backward is not None:
            first = _pull_in_metadata(path, backward, floor)
            continue
        forward = next((i for i in range(at + 1, end) if is_valid_cut_point(path[i])), None)
        if forward is None:
            return None
        floor = first = forward  # never move back before a result we gave up on
    return None


def _latest_cut_point(path: Sequence[Entry], floor: int, upto: int) -> int | None:
    return next((i for i in range(upto, floor - 1, -1) if is_valid_cut_point(path[i])), None)


def safe_first_kept_id(path: Sequence[Entry], first_kept_id: str) -> str:
    """A hook's ``firstKeptEntryId`` moved back, when needed, so that no kept result is orphaned.

    Keeping more never loses anything; an id not on the path keeps nothing and stays as it is.
    A result no call on the path made moves it only when the kept range would start with it.
    """
    first = next((i for i, e in enumerate(path) if e.id == first_kept_id), None)
    if first is None:
        return first_kept_id
    safe = safe_first_kept_index(path, first, 0, len(path))
    return (path[safe].id if safe is not None and safe < len(path) and safe <= first
            else first_kept_id)
