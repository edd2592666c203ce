"""Tool-output pruning plan (docs/compaction.md "Pruning"; ``skill`` and ``read`` protected)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from api_client.contract.session import Entry, Message, MessageEntry
from worker.tokens import Tokenizer, token_counts

__all__ = [
    "MINIMUM_SAVINGS",
    "PROTECTED_TOOLS",
    "PROTECT_TOKENS",
    "PrunePlan",
    "apply_prune",
    "plan_prune",
    "prune_notice",
]

PROTECT_TOKENS = 40_000
MINIMUM_SAVINGS = 20_000
PROTECTED_TOOLS = frozenset({"skill", "read"})


@dataclass(frozen=True)
class PrunePlan:
    pruned_entry_ids: tuple[str, ...] = ()  # path order
    tokens_saved: int = 0
    token_counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def pruned_count(self) -> int:
        return len(self.pruned_entry_ids)


def prune_notice(tokens: int) -> str:
    return f"[Output truncated - {tokens} tokens]"


def _notice_tokens(tokenizer: Tokenizer, tokens: int) -> int:
    # The notice is a tool result of one text block: it counts as its text (the estimate's
    # ceil4(len(notice)), the reference's formula). Counted as a text, not as a new message
    # object: the tokenizer's content cache knows the text from the last job.
    return tokenizer.count_text(prune_notice(tokens))


def plan_prune(
    path: Sequence[Entry],
    tokenizer: Tokenizer,
    *,
    protect_tokens: int = PROTECT_TOKENS,
    minimum_savings: int = MINIMUM_SAVINGS,
    protected_tools: frozenset[str] = PROTECTED_TOOLS,
) -> PrunePlan:
    """Which tool results to replace by a notice; an empty plan when savings are too small.

    Only the results inside the protection window and the candidates are counted: past the
    window a result's count matters only for its notice, so the older results that are pruned
    already or protected (most of a long session's) are never tokenized."""
    seen = 0
    results = [e for e in reversed(path) if isinstance(e, MessageEntry) and e.role == "toolResult"]
    inside = 0
    # The check uses the total before a result, so the one crossing the line is protected.
    while inside < len(results) and seen < protect_tokens:
        seen += token_counts(tokenizer, [results[inside].message])[0]
        inside += 1
    older = [e for e in results[inside:] if "prunedAt" not in e.message
             and e.message.get("toolName") not in protected_tools]
    candidates = [(e.id, tokens) for e, tokens in
                  zip(older, token_counts(tokenizer, [e.message for e in older]), strict=True)]
    saved = sum(max(0, t - _notice_tokens(tokenizer, t)) for _, t in candidates)
    if not candidates or saved < minimum_savings:
        return PrunePlan()
    candidates.reverse()
    return PrunePlan(tuple(i for i, _ in candidates), saved, dict(candidates))


def apply_prune(message: Message, tokens: int, now_ms: int) -> Message:
    """The pruned copy of a tool result: one notice block, ``prunedAt`` set, images gone."""
    return {**message, "content": [{"type": "text", "text": prune_notice(tokens)}],
            "prunedAt": now_ms}
