"""Token counts, and the split of a conversation into chunks that fit a model window.

Counts use the configured tokenizer (``COMPACTOR_TOKENIZER``, ``worker.tokens``), the one the
planner uses, with its caches: cl100k by default, since the reference estimator
(chars/4) undercounts hex dumps, minified JSON and code several times over, and a chunk planned
with it overflowed a real server. Either way the router fills only ``SAFETY`` of a window: the
server's own tokenizer is not cl100k. The fit check, the chunk planner and the "summary is
smaller" rule all use one ``RequestCounter``; the module-level functions are the default one's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from api_client.contract.session import Message
from worker.llm.errors import ContextOverflow
from worker.summary_requests import SummaryRequest
from worker.tokens import Tokenizer, counts_of, get_tokenizer

__all__ = [
    "COUNTER",
    "DEFAULT_COUNTER",
    "SAFETY",
    "OverflowNumbers",
    "RequestCounter",
    "clip_message",
    "estimate_request",
    "estimate_text",
    "message_cost",
    "next_chunk",
    "parse_overflow",
    "request_fits",
    "shrink_limit",
]

SAFETY = 0.9  # share of a context window we plan to fill
_MESSAGE_OVERHEAD = 8  # role labels and separators the serialization adds per message
_KEEP = 200  # strings up to this many chars are never clipped (ids, names, short texts)


class RequestCounter:
    """Token counts of requests, texts and messages with one tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.name = "cl100k" if tokenizer.name == "tiktoken" else "chars/4"
        # By object identity, shared with the planner's counts: the chunk plan of a grown
        # session counts only its new messages.
        self._message_counts = counts_of(tokenizer)

    def text(self, text: str | None) -> int:
        """Tokens of ``text`` (cached by content in the tokenizer)."""
        return self.tokenizer.count_text(text) if text else 0

    def request(self, request: SummaryRequest) -> int:
        return self.text(request.system_prompt) + self._prompt(request)

    def _prompt(self, request: SummaryRequest) -> int:
        """The prompt's tokens, part by part when the tokenizer can and the request says how
        the prompt was joined (``SummaryRequest.layout``)."""
        layout = request.layout
        joined = getattr(self.tokenizer, "count_joined", None)
        if layout is None or joined is None or layout.prompt is not request.prompt:
            return self.text(request.prompt)
        return int(joined(layout.head, layout.parts, layout.separator, layout.tail))

    def fits(self, request: SummaryRequest, budget: float) -> bool:
        """``self.request(request) <= budget``, without tokenizing when it clearly fits.

        Both tokenizers count at most one token per UTF-8 byte (a cl100k token is at least one
        byte; chars/4 counts UTF-16 units), so the byte length bounds the count. A character is
        at least one byte: a prompt of more characters than ``budget`` is counted without
        encoding it first (encoding a large prompt is not free).
        """
        system, prompt = request.system_prompt, request.prompt
        if len(system) + len(prompt) <= budget and (
                len(system.encode()) + len(prompt.encode()) <= budget):
            return True
        return self.request(request) <= budget

    def message(self, message: Message) -> int:
        return self._message_counts.get(message, self.tokenizer.count) + _MESSAGE_OVERHEAD

    def clip_message(self, message: Message, max_tokens: int) -> Message:
        """A copy of ``message`` whose long strings are cut in the middle to fit about
        ``max_tokens``."""
        strings = _strings(message)
        chars = sum(len(s) for s in strings)
        # chars per token of this very message: dense text (hex, JSON) must be cut harder
        density = chars / max(1, self.text("".join(strings))) if chars else 4.0
        short = sum(len(s) for s in strings if len(s) <= _KEEP)
        long_total = chars - short
        budget = max(_KEEP, int(max_tokens * density) - short)
        ratio = min(1.0, budget / long_total) if long_total else 1.0
        clipped: Message = _clip(message, ratio)
        return clipped

    def next_chunk(self, request: SummaryRequest, messages: Sequence[Message], costs: Sequence[int],
                   start: int, previous: str | None, limit: int) -> tuple[SummaryRequest, int]:
        """The request for the chunk starting at ``start`` and the index after its last message.

        Greedy: as many whole messages as fit ``limit`` tokens (prompt and system prompt
        included); a single message larger than that is clipped in the middle.
        """
        assert request.rechunk is not None
        base = self.request(request.rechunk((), previous))
        if base >= limit:
            raise ContextOverflow(f"the prompt without any conversation (~{base} tokens) "
                                  f"does not fit {limit} tokens")
        end, total = start, base
        while end < len(messages) and (end == start or total + costs[end] <= limit):
            total += costs[end]
            end += 1
        chunk = list(messages[start:end])
        sub = request.rechunk(chunk, previous)
        size = self.request(sub)
        while size > limit and len(chunk) > 1:  # the serialization came out larger: drop the excess
            scale = max(1.0, (size - base) / max(1, sum(costs[start:end])))
            over = float(size - limit)
            while over > 0 and len(chunk) > 1:
                over -= costs[end - 1] * scale
                chunk.pop()
                end -= 1
            sub = request.rechunk(chunk, previous)
            size = self.request(sub)
        room = limit - base
        for _ in range(4):  # one message too large: clip it, tighter each round
            if self.request(sub) <= limit:
                return sub, end
            room = room * 3 // 4
            sub = request.rechunk([self.clip_message(messages[start], room)], previous)
        raise ContextOverflow(f"a single message does not fit {limit} tokens even when clipped")


DEFAULT_COUNTER = RequestCounter(get_tokenizer("tiktoken"))
COUNTER = DEFAULT_COUNTER.name
estimate_text = DEFAULT_COUNTER.text
estimate_request = DEFAULT_COUNTER.request
request_fits = DEFAULT_COUNTER.fits
message_cost = DEFAULT_COUNTER.message
clip_message = DEFAULT_COUNTER.clip_message
next_chunk = DEFAULT_COUNTER.next_chunk


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() if key not in ("role", "type", "id")
                for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def _clip(value: Any, ratio: float) -> Any:
    if isinstance(value, str):
        if len(value) <= _KEEP or ratio >= 1.0:
            return value
        keep = max(_KEEP, int(len(value) * ratio))
        head, tail = value[: keep // 2], value[len(value) - keep // 2:]
        return (f"{head}\n[… {len(value) - 2 * (keep // 2)} chars omitted "
                f"to fit the summarizer …]\n{tail}")
    if isinstance(value, dict):
        return {key: item if key in ("role", "type", "id") else _clip(item, ratio)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_clip(item, ratio) for item in value]
    return value


# --- what an overflow error says --------------------------------------------------------------
@dataclass(frozen=True)
class OverflowNumbers:
    """The numbers of a context-overflow error text."""

    window: int  # the model's context length
    counted: int  # tokens the server counted against it
    completion_included: bool  # does ``counted`` include the completion budget asked for?


_N = r"(\d[\d,]*)"
_SHAPES: tuple[tuple[re.Pattern[str], tuple[int, int], bool], ...] = (
    # OpenAI, vLLM, llama.cpp's OpenAI-compatible server:
    # "... you requested M tokens (X in the messages, ...)"
    (re.compile(rf"maximum context length is {_N} tokens.*?requested {_N} tokens", re.I | re.S),
     (1, 2), True),
    # OpenAI (newer) and vLLM (newer): the prompt alone
    (re.compile(rf"maximum context length is {_N} tokens.*?"
                rf"(?:messages resulted in|request has) {_N} (?:input )?tokens",
                re.I | re.S), (1, 2), False),
    # Anthropic
    (re.compile(rf"prompt is too long: {_N} tokens > {_N} maximum", re.I), (2, 1), False),
    (re.compile(rf"exceed context limit: {_N} \+ \d[\d,]* > {_N}", re.I), (2, 1), False),
)


def parse_overflow(text: str) -> OverflowNumbers | None:
    """Window and counted tokens from an overflow error text; None when it states no numbers."""
    for pattern, (window_group, counted_group), included in _SHAPES:
        match = pattern.search(text)
        if match:
            window, counted = (int(match.group(g).replace(",", ""))
                               for g in (window_group, counted_group))
            if window > 0 and counted > 0:
                return OverflowNumbers(window, counted, included)
    return None


def shrink_limit(numbers: OverflowNumbers | None, sent_prompt: int, sent_completion: int,
                 next_completion: int) -> int:
    """The prompt limit (our count) for the next try after a server refused ``sent_prompt`` tokens.

    With the server's numbers: scale by how the server counts our tokens so the next prompt and
    ``next_completion`` fill ``SAFETY`` of its window. Without them: half of what was refused.
    The result is always smaller than ``sent_prompt`` unless the completion budget shrank.
    """
    if numbers is None:
        return sent_prompt // 2
    server_prompt = numbers.counted - (sent_completion if numbers.completion_included else 0)
    if server_prompt <= 0:
        return sent_prompt // 2
    target = int(sent_prompt * (numbers.window * SAFETY - next_completion) / server_prompt)
    ceiling = sent_prompt if next_completion < sent_completion else int(sent_prompt * SAFETY)
    return max(0, min(target, ceiling))
