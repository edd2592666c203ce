"""What every provider offers the router."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from worker.llm.errors import ModelCallError
from worker.llm.settings import ModelCandidate
from worker.summary_requests import CancelToken, SummaryRequest, Usage

__all__ = ["HttpContext", "Provider", "Reply", "as_int"]


@dataclass(frozen=True)
class Reply:
    text: str
    usage: Usage


@dataclass(frozen=True)
class HttpContext:
    """What the HTTP providers share: one client, one connect timeout."""

    client: httpx.Client
    connect_timeout_s: float = 10.0


class Provider(Protocol):
    candidate: ModelCandidate
    uses_http: bool

    def problem(self) -> ModelCallError | None:
        """A reason not to call this candidate at all (e.g. no API key), or None."""
        ...

    def output_reserve(self, max_tokens: int, request: SummaryRequest) -> int:
        """Tokens of the context window the answer may take (thinking budget included)."""
        ...

    def complete(self, request: SummaryRequest, max_tokens: int,
                 cancel: CancelToken | None) -> Reply:
        """One attempt. Raises a ``ModelCallError`` subclass on failure."""
        ...


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
