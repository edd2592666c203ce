"""The summarizer interface (docs/CONTRACTS.md) between the planner and the model layer.

Stdlib only, and below both: ``worker.compaction`` builds these requests, ``worker.llm``
answers them, and neither imports the other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from api_client.contract.session import Message

__all__ = [
    "CancelToken",
    "Message",
    "PromptLayout",
    "Purpose",
    "Spend",
    "Summarizer",
    "SummaryRequest",
    "SummaryResult",
    "Usage",
]

Purpose = Literal["history", "turn_prefix", "short", "branch"]


@dataclass(frozen=True)
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )


@dataclass(frozen=True)
class PromptLayout:
    """Where the serialized conversation stands in ``prompt``: it is
    ``head + separator.join(parts) + tail``. The parts are the same string objects from job to
    job for unchanged messages, so a counter can count a grown session's prompt by its new
    parts (``TiktokenTokenizer.count_joined``)."""

    prompt: str
    head: str
    parts: tuple[str, ...]
    separator: str
    tail: str


@dataclass(frozen=True)
class SummaryRequest:
    purpose: Purpose
    system_prompt: str
    prompt: str  # the exact user-message text (docs/compaction.md "Summary prompts")
    max_tokens: int  # docs/compaction.md "Summary budgets"
    reasoning: bool  # ask for high reasoning effort (False for branch)
    conversation: tuple[Message, ...] = ()  # LLM messages behind `prompt` (convert_to_llm output)
    previous_summary: str | None = None
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
    # Rebuilds this request for a slice of `conversation` with a previous summary, used by the
    # router's chunked path when the input does not fit the model window. None: cannot chunk.
    rechunk: Callable[[Sequence[Message], str | None], SummaryRequest] | None = None
    # How `prompt` was put together; counters use it only while `layout.prompt is prompt` (a
    # request copied with another prompt is counted from its text).
    layout: PromptLayout | None = None


@dataclass(frozen=True)
class SummaryResult:
    text: str
    model: str
    provider: str
    usage: Usage
    attempts: int  # HTTP attempts this request took, over all candidates and chunks
    # One line per failed attempt or skipped candidate, oldest first (for job events and logs).
    trail: tuple[str, ...] = ()
    chunks: int = 0  # calls of the chunked path (0: the input fitted in one call)
    cost_usd: float = 0.0  # at the candidates' prices (ModelCandidate.price_*_per_mtok)


@dataclass
class Spend:
    """What one job's model calls cost so far: every answered HTTP call, those of a stale round
    or of a chunked call that failed later included (the tenant paid for them all). The
    router adds to it (``JobSummarizer.spend``); the job's concurrent calls share it."""

    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, usage: Usage, cost_usd: float) -> None:
        with self._lock:
            self.usage, self.cost_usd = self.usage + usage, self.cost_usd + cost_usd
            self.calls += 1


class CancelToken(Protocol):
    def is_cancelled(self) -> bool: ...


class Summarizer(Protocol):
    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult: ...
