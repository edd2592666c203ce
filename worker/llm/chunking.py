"""Cheap size estimates and the split of a conversation into chunks that fit a model window.

Sizes use the reference estimator (chars/4): cheap, and a slight overestimate for prose. The
router keeps a safety margin (``SAFETY``) for text that tokenizes worse (code, JSON).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from api_client.session import Message
from worker.llm.errors import ContextOverflow
from worker.llm.types import SummaryRequest

__all__ = ["SAFETY", "clip_message", "estimate_request", "estimate_text", "message_cost", "next_chunk"]

SAFETY = 0.9  # share of a context window we plan to fill
_MESSAGE_OVERHEAD = 8  # role labels and separators the serialization adds per message
_KEEP = 200  # strings up to this many chars are never clipped (ids, names, short texts)


def estimate_text(text: str | None) -> int:
    return math.ceil(len(text) / 4) if text else 0


def estimate_request(request: SummaryRequest) -> int:
    return estimate_text(request.system_prompt) + estimate_text(request.prompt)


def _core_counter() -> Callable[[Message], int] | None:
    try:
        from worker.compaction.tokens import get_tokenizer
    except ImportError:  # the core is optional for the model layer
        return None
    return get_tokenizer("estimate").count


_COUNT = _core_counter()


def message_cost(message: Message) -> int:
    if _COUNT is not None:
        return _COUNT(message) + _MESSAGE_OVERHEAD
    return estimate_text("".join(_strings(message))) + _MESSAGE_OVERHEAD


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() if key not in ("role", "type", "id") for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def clip_message(message: Message, max_tokens: int) -> Message:
    """A copy of ``message`` whose long strings are cut in the middle to fit about ``max_tokens``."""
    long_total = sum(len(s) for s in _strings(message) if len(s) > _KEEP)
    budget = max(_KEEP, max_tokens * 4 - sum(len(s) for s in _strings(message) if len(s) <= _KEEP))
    ratio = min(1.0, budget / long_total) if long_total else 1.0
    clipped: Message = _clip(message, ratio)
    return clipped


def _clip(value: Any, ratio: float) -> Any:
    if isinstance(value, str):
        if len(value) <= _KEEP or ratio >= 1.0:
            return value
        keep = max(_KEEP, int(len(value) * ratio))
        head, tail = value[: keep // 2], value[len(value) - keep // 2:]
        return f"{head}\n[… {len(value) - 2 * (keep // 2)} chars omitted to fit the summarizer …]\n{tail}"
    if isinstance(value, dict):
        return {key: item if key in ("role", "type", "id") else _clip(item, ratio) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip(item, ratio) for item in value]
    return value


def next_chunk(request: SummaryRequest, messages: Sequence[Message], costs: Sequence[int], start: int,
               previous: str | None, limit: int) -> tuple[SummaryRequest, int]:
    """The request for the chunk starting at ``start`` and the index after its last message.

    Greedy: as many whole messages as fit ``limit`` tokens (prompt and system prompt included);
    a single message larger than that is clipped in the middle.
    """
    assert request.rechunk is not None
    base = estimate_request(request.rechunk((), previous))
    if base >= limit:
        raise ContextOverflow(f"the prompt without any conversation (~{base} tokens) does not fit {limit} tokens")
    end, total = start, base
    while end < len(messages) and (end == start or total + costs[end] <= limit):
        total += costs[end]
        end += 1
    chunk = list(messages[start:end])
    sub = request.rechunk(chunk, previous)
    while estimate_request(sub) > limit and len(chunk) > 1:  # the serialization came out larger
        chunk.pop()
        end -= 1
        sub = request.rechunk(chunk, previous)
    room = limit - base
    for _ in range(4):  # one message too large: clip it, tighter each round
        if estimate_request(sub) <= limit:
            return sub, end
        room = room * 3 // 4
        sub = request.rechunk([clip_message(messages[start], room)], previous)
    raise ContextOverflow(f"a single message does not fit {limit} tokens even when clipped")
