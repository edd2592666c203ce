"""Summarize jobs: a system prompt and a prompt, summarised by the workers' model router (retries,
fallback, cooldowns, deadline, metrics) for a caller without a session — the HTTP API's
``/v1/summarize`` and ``/v1/chat/completions``, oh-my-pi's remote endpoint.

A job id names its session (``<sid>:<token>``), and every key of a job lives in that session's
hash slot; a summarize job gets a session id of its own, ``summarize-<32 hex>``, that no session
ever has (no header is written). Its record and completion event live and expire like any job's;
the request itself travels in the record's ``input`` (the task message carries the id only).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from api_client.contract.errors import InvalidRequestError, PromptTooLargeError
from api_client.contract.job_enums import JobKind, JobState
from api_client.contract.keys import KeyLayout
from api_client.contract.routing import route_for
from api_client.contract.session.validate import check_json_value
from api_client.contract.wire import JobRecord, now_iso

__all__ = ["SUMMARIZE_SESSION_PREFIX", "SummaryInput", "summary_record"]

SUMMARIZE_SESSION_PREFIX = "summarize-"


@dataclass(frozen=True, slots=True)
class SummaryInput:
    """What the model is asked: the system prompt, the prompt, and at most this many output
    tokens (None: the worker's budget for a history summary, 0.8 × reserve_tokens)."""

    system_prompt: str
    prompt: str
    max_tokens: int | None = None

    def estimate(self) -> int:
        """The prompts' tokens by the estimate admission reserves with: characters / 4."""
        return -(-(len(self.system_prompt) + len(self.prompt)) // 4)

    def checked(self, max_prompt_tokens: int | None = None) -> SummaryInput:
        """The request, or the error it is refused with: a prompt whose estimate is over
        ``max_prompt_tokens`` is :class:`PromptTooLargeError` (docs/security.md)."""
        for name, text in (("system_prompt", self.system_prompt), ("prompt", self.prompt)):
            if not isinstance(text, str):
                raise InvalidRequestError(f"{name} must be a string, not {type(text).__name__}")
            check_json_value(text, source=f"summarize {name}")  # lone surrogates
        if not self.prompt.strip():
            raise InvalidRequestError("prompt is empty: nothing to summarize")
        tokens = self.max_tokens
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                                   or tokens <= 0):
            raise InvalidRequestError(f"max_tokens must be a positive int, not {tokens!r}")
        if max_prompt_tokens is not None and self.estimate() > max_prompt_tokens:
            raise PromptTooLargeError("the summary's prompt (characters / 4)",
                                      setting="max_prompt_tokens", limit=max_prompt_tokens,
                                      value=self.estimate())
        return self

    def to_wire(self) -> dict[str, object]:
        wire: dict[str, object] = {"systemPrompt": self.system_prompt, "prompt": self.prompt}
        if self.max_tokens is not None:
            wire["maxTokens"] = self.max_tokens
        return wire


def summary_record(layout: KeyLayout, request: SummaryInput,
                   max_prompt_tokens: int | None = None) -> JobRecord:
    """The queued record of a new summarize job, in a session id of its own (a prompt over
    ``max_prompt_tokens`` by the estimate is refused)."""
    session_id = SUMMARIZE_SESSION_PREFIX + secrets.token_hex(16)
    route, wire = route_for(JobKind.SUMMARIZE), request.checked(max_prompt_tokens).to_wire()
    return JobRecord(id=layout.new_job_id(session_id), kind=JobKind.SUMMARIZE,
                     session_id=layout.qualified(session_id), state=JobState.QUEUED,
                     priority=route.priority, queue=route.queue, created_at=now_iso(),
                     input=wire)
