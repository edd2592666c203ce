"""``prepareCompaction`` (docs/compaction.md "Preparation") and the usage helpers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from api_client.contract.session import CompactionEntry, Entry, Message, MessageEntry
from api_client.contract.session.context import last_compaction_index
from api_client.contract.session.convert import (
    compaction_summary_message,
    convert_to_llm,
    for_compaction,
)
from worker.compaction.agent_cut import PI_VERSIONS, AgentCut, agent_cut
from worker.compaction.caches import PlanCaches
from worker.compaction.cutpoint import CutPoint, classify_cut, find_cut_point
from worker.compaction.facts import parse_fact_block, strip_fact_block
from worker.compaction.fileops import file_lists, strip_file_operation_tags, tagged_paths
from worker.compaction.prune import PROTECTED_TOOLS
from worker.compaction.serialize import prompt_parts
from worker.compaction.toolpairs import safe_first_kept_index
from worker.tokens import SEGMENT_MIN_CHARS, JobTokenizer, Tokenizer, total_tokens

__all__ = [
    "CompactionSettings",
    "Preparation",
    "context_tokens",
    "last_assistant_usage",
    "no_plan_reason",
    "prepare_compaction",
    "prime_counts",
    "prompt_tokens",
]


@dataclass(frozen=True)
class CompactionSettings:
    keep_recent_tokens: int = 20_000
    reserve_tokens: int = 16_384


@dataclass(frozen=True)
class Preparation:
    first_kept_entry_id: str
    first_kept_entry_index: int
    turn_start_index: int
    is_split_turn: bool
    tokens_before: int
    keep_recent_tokens: int
    messages_to_summarize: tuple[Message, ...]
    turn_prefix_messages: tuple[Message, ...]
    recent_messages: tuple[Message, ...]
    summarize_entry_ids: tuple[str, ...]
    turn_prefix_entry_ids: tuple[str, ...]
    kept_entry_ids: tuple[str, ...]
    previous_summary: str | None
    read_files: tuple[str, ...]
    modified_files: tuple[str, ...]
    settings: CompactionSettings
    carried_facts: tuple[tuple[str, str], ...] = ()  # the previous summary's fact block


def _num(usage: Mapping[str, Any], key: str) -> float:
    value = usage.get(key)
    return value if isinstance(value, (int, float)) else 0


def context_tokens(usage: Mapping[str, Any]) -> int:
    total = _num(usage, "totalTokens")
    if total:
        return int(total)
    return int(sum(_num(usage, k) for k in ("input", "output", "cacheRead", "cacheWrite")))


def prompt_tokens(usage: Mapping[str, Any]) -> int:
    prompt = sum(_num(usage, k) for k in ("input", "cacheRead", "cacheWrite"))
    return int(prompt) if prompt > 0 else context_tokens(usage)


def last_assistant_usage(path: Sequence[Entry]) -> Mapping[str, Any] | None:
    for entry in reversed(path):
        if isinstance(entry, MessageEntry) and entry.role == "assistant":
            usage = entry.message.get("usage")
            if (usage and isinstance(usage, dict)
                    and entry.message.get("stopReason") not in ("aborted", "error")):
                return usage
    return None


def no_plan_reason(path: Sequence[Entry]) -> Literal["already compacted", "nothing to compact"]:
    return ("already compacted" if path and isinstance(path[-1], CompactionEntry)
            else "nothing to compact")


def _mapped(path: Sequence[Entry], start: int, end: int) -> list[tuple[str, Message]]:
    return [(e.id, m) for e in path[max(start, 0) : end] if (m := for_compaction(e)) is not None]


def planned_messages(path: Sequence[Entry], *, prune: bool = False) -> list[Message]:
    """The messages a plan counts: those after the path's last compaction entry (what a cold
    job primes its token counts for; the older ones are summarized already). With ``prune``
    also the tool results before it: the prune pass counts every tool result
    (docs/compaction.md "Pruning")."""
    start = last_compaction_index(path) + 1
    planned = [m for _, m in _mapped(path, start, len(path))]
    return [*older_tool_results(path), *planned] if prune else planned


def older_tool_results(path: Sequence[Entry]) -> list[Message]:
    """The tool results before the path's last compaction entry that the prune pass may count
    for their notice: not pruned yet, not of a protected tool."""
    return [e.message for e in path[:last_compaction_index(path) + 1]
            if isinstance(e, MessageEntry) and e.role == "toolResult"
            and "prunedAt" not in e.message and e.message.get("toolName") not in PROTECTED_TOOLS]


def prime_counts(tokenizer: JobTokenizer, path: Sequence[Entry], *, prune: bool,
                 counted: list[tuple[bytes, int]] | None = None,
                 caches: PlanCaches | None = None) -> int:
    """Count ahead, on threads, what a plan of ``path`` will tokenize and ``tokenizer`` has
    not counted yet; returns the characters counted (``JobTokenizer.prime``). That is the
    planned messages new to it, their parts of the summary prompt (a tool call reads
    ``name(k=…)`` there, not JSON) and, with ``prune``, the older tool results the prune pass
    counts. A cold session: all of them. A session grown since this process planned it: only
    what it grew by, and nothing else is walked twice."""
    fresh = tokenizer.uncounted(planned_messages(path))
    older = tokenizer.uncounted(older_tool_results(path)) if prune else []
    if not fresh and not older:
        return 0
    known = caches.parts if caches is not None else None
    parts = prompt_parts(convert_to_llm(fresh), SEGMENT_MIN_CHARS, known)
    return tokenizer.prime([*older, *fresh], parts, counted)


def _usage_index(path: Sequence[Entry]) -> int | None:
    """Where the usage :func:`last_assistant_usage` reads sits on the path."""
    for i in range(len(path) - 1, -1, -1):
        entry = path[i]
        if isinstance(entry, MessageEntry) and entry.role == "assistant":
            usage = entry.message.get("usage")
            if (usage and isinstance(usage, dict)
                    and entry.message.get("stopReason") not in ("aborted", "error")):
                return i
    return None


def measured_messages(path: Sequence[Entry], start: int | None = None) -> list[Message]:
    """The context the last assistant usage measured, as the agent sent it: the previous
    compaction's summary, its kept tail, and the messages after it up to that reply (from
    ``start`` instead, when the caller knows where that context begins)."""
    end = _usage_index(path)
    if end is None:
        return []
    prev_idx = last_compaction_index(path)
    if start is not None and start != prev_idx + 1:
        return [m for _, m in _mapped(path, start, end + 1)]
    if end < prev_idx:  # a reply from before the last compaction: not this context's measure
        return []
    head: list[Message] = []
    if prev_idx >= 0:
        previous = path[prev_idx]
        assert isinstance(previous, CompactionEntry)
        head.append(compaction_summary_message(previous))
        kept_from = _previous_kept_from(path, prev_idx)
        if kept_from is not None:
            head += [m for _, m in _mapped(path, kept_from, prev_idx)]
    return head + [m for _, m in _mapped(path, prev_idx + 1, end + 1)]


def _adjusted_keep(path: Sequence[Entry], start: int | None, keep: int,
                   tokenizer: Tokenizer) -> int:
    """Compactor's own keep (docs/compaction.md "Preparation"): scaled down by how much more the
    provider
    counted (the last usage) than the tokenizer counts of the same context, the whole context
    that usage measured (:func:`measured_messages`; docs/compaction.md), never only the
    entries after the last compaction. An agent's own cut is never scaled (pi has no such
    step)."""
    usage = last_assistant_usage(path)
    if usage is None:
        return keep
    estimated = total_tokens(tokenizer, measured_messages(path, start))
    ratio = prompt_tokens(usage) / estimated if estimated > 0 else 0.0
    if math.isfinite(ratio) and ratio > 1:
        return max(1, math.floor(keep / ratio))
    return keep


def _previous_kept_from(path: Sequence[Entry], prev_idx: int) -> int | None:
    """Where the previous compaction's kept range starts on the path (None: nothing kept)."""
    if prev_idx < 0:
        return None
    previous = path[prev_idx]
    assert isinstance(previous, CompactionEntry)
    return next((i for i, e in enumerate(path[:prev_idx]) if e.id == previous.first_kept_entry_id),
                None)


def _summarize_range(path: Sequence[Entry], prev_idx: int, history_end: int) -> list[int]:
    """Path indices of the entries summarised (those with a message)."""
    span: list[int] = []
    kept_from = _previous_kept_from(path, prev_idx)
    if kept_from is not None:  # Q5: the previous compaction's kept range is summarised now
        span += range(kept_from, min(prev_idx, history_end))  # Q22: up to a moved cut
    span += range(prev_idx + 1, history_end)
    return [i for i in span if for_compaction(path[i]) is not None]


def _tool_pair_cut(path: Sequence[Entry], cut: CutPoint, prev_idx: int,
                   end: int) -> CutPoint | None:
    """Q22: never keep a tool result without its call; the previous kept range offers cut points."""
    kept_from = _previous_kept_from(path, prev_idx)
    floor = kept_from if kept_from is not None else prev_idx + 1
    first = safe_first_kept_index(path, cut.first_kept_entry_index, floor, end)
    if first is None:
        return None
    return cut if first == cut.first_kept_entry_index else classify_cut(path, first, floor, end)


def _file_lists(path: Sequence[Entry], prev_idx: int,
                messages: Sequence[Message]) -> tuple[list[str], list[str]]:
    previous = path[prev_idx] if prev_idx >= 0 else None
    if isinstance(previous, CompactionEntry) and not previous.from_extension and previous.details:
        return file_lists(previous.details, messages)
    return file_lists(None, messages)


def _carried_facts(previous: Entry | None) -> tuple[tuple[str, str], ...]:
    """The previous summary's fact block, and, for a hook's compaction, the paths of the tags
    Compactor appended to it: its file lists are not merged into the next ones
    (docs/rules.md "File operations"), so
    the ledger carries them as facts instead."""
    if not isinstance(previous, CompactionEntry):
        return ()
    facts = parse_fact_block(strip_file_operation_tags(previous.summary))
    if previous.from_extension:
        facts += [("paths", path) for path in tagged_paths(previous.summary)]
    return tuple(facts)


def _orphans_a_result(path: Sequence[Entry], first: int) -> bool:
    """Would a kept range from ``first`` hold a tool result without its call?"""
    return safe_first_kept_index(path, first, first, len(path)) != first


def _own_cut(path: Sequence[Entry], keep: int, tokenizer: Tokenizer) -> AgentCut | None:
    """Compactor's own cut (docs/compaction.md "Cut point", "Tool pairs"), as path indices."""
    prev_idx = last_compaction_index(path)
    start, end = prev_idx + 1, len(path)
    cut = _tool_pair_cut(path, find_cut_point(path, start, end, keep, tokenizer), prev_idx, end)
    if cut is None:
        return None
    first = cut.first_kept_entry_index
    if first >= len(path) or not path[first].id:
        return None
    history_end = cut.turn_start_index if cut.is_split_turn else first
    prefix = range(cut.turn_start_index, first) if cut.is_split_turn else range(0)
    return AgentCut(first, cut.turn_start_index, cut.is_split_turn,
                    tuple(_summarize_range(path, prev_idx, history_end)),
                    tuple(i for i in prefix if for_compaction(path[i]) is not None))


def prepare_compaction(
    path: Sequence[Entry], settings: CompactionSettings, tokenizer: Tokenizer, *,
    usage_start: int | None = None, version: str | None = None,
) -> Preparation | None:
    """The compaction plan for a root→leaf path, or None (see :func:`no_plan_reason`).
    ``usage_start``: where the context the last assistant usage measured begins, when not
    after the path's last compaction (a draft laid on the path: ``extension``). ``version``:
    the agent whose cut to make (``pi-1.6``, ``pi-0.73``: :mod:`worker.compaction.agent_cut`);
    None: Compactor's own."""
    if not path or isinstance(path[-1], CompactionEntry):
        return None
    prev_idx = last_compaction_index(path)
    end = len(path)
    usage = last_assistant_usage(path)
    if version in PI_VERSIONS:
        keep = settings.keep_recent_tokens
        cut = agent_cut(path, keep, tokenizer, str(version))
        if cut is not None and _orphans_a_result(path, cut.first_kept_entry_index):
            cut = _own_cut(path, keep, tokenizer)  # Q22 first (docs/compaction.md)
    else:
        keep = _adjusted_keep(path, usage_start, settings.keep_recent_tokens, tokenizer)
        cut = _own_cut(path, keep, tokenizer)
    if cut is None:
        return None
    first = cut.first_kept_entry_index
    summarize = [(path[i].id, m) for i in cut.summarize if (m := for_compaction(path[i]))]
    prefix = [(path[i].id, m) for i in cut.prefix if (m := for_compaction(path[i]))]
    recent = _mapped(path, first, end)
    read, modified = _file_lists(path, prev_idx, [m for _, m in summarize + prefix])
    previous = path[prev_idx] if prev_idx >= 0 else None
    previous_text = (strip_file_operation_tags(previous.summary)
                     if isinstance(previous, CompactionEntry) else None)
    return Preparation(
        first_kept_entry_id=path[first].id,
        first_kept_entry_index=first,
        turn_start_index=cut.turn_start_index,
        is_split_turn=cut.is_split_turn,
        tokens_before=context_tokens(usage) if usage else 0,
        keep_recent_tokens=keep,
        messages_to_summarize=tuple(m for _, m in summarize),
        turn_prefix_messages=tuple(m for _, m in prefix),
        recent_messages=tuple(m for _, m in recent),
        summarize_entry_ids=tuple(i for i, _ in summarize),
        turn_prefix_entry_ids=tuple(i for i, _ in prefix),
        kept_entry_ids=tuple(i for i, _ in recent),
        previous_summary=strip_fact_block(previous_text) if previous_text is not None else None,
        read_files=tuple(read),
        modified_files=tuple(modified),
        settings=settings,
        carried_facts=_carried_facts(previous),
    )
