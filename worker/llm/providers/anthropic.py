"""Anthropic Messages API."""

from __future__ import annotations

from typing import Any

from worker.llm._classify import classify_http_error
from worker.llm._http import post_json
from worker.llm.errors import (
    EmptyOutput,
    MalformedResponse,
    MissingCredentials,
    ModelCallError,
    UnexpectedResponse,
    Who,
)
from worker.llm.providers.base import HttpContext, Reply, as_int, check_endpoint
from worker.llm.settings import ModelCandidate
from worker.summary_requests import CancelToken, SummaryRequest, Usage

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider:
    uses_http = True

    def __init__(self, candidate: ModelCandidate, http: HttpContext, api_key: str | None) -> None:
        check_endpoint(candidate)
        self.candidate = candidate
        self._http = http
        self._api_key = api_key
        self._url = candidate.resolved_base_url + "/v1/messages"

    def problem(self) -> ModelCallError | None:
        if self._api_key:
            return None
        return MissingCredentials("No API key for anthropic "
                                  f"({self.candidate.api_key_env or 'api_key'} unset)",
                                  provider="anthropic", model=self.candidate.model)

    def _thinking(self, request: SummaryRequest) -> bool:
        return self.candidate.reasoning and request.reasoning

    def output_reserve(self, max_tokens: int, request: SummaryRequest) -> int:
        return max_tokens + (self.candidate.thinking_budget_tokens if self._thinking(request)
                             else 0)

    def payload(self, request: SummaryRequest, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.candidate.model,
            # the thinking budget comes on top
            "max_tokens": self.output_reserve(max_tokens, request),
            "system": request.system_prompt,
            "messages": [{"role": "user", "content": [{"type": "text", "text": request.prompt}]}],
        }
        if self._thinking(request):
            body["thinking"] = {"type": "enabled",
                                "budget_tokens": self.candidate.thinking_budget_tokens}
        return body

    def complete(self, request: SummaryRequest, max_tokens: int,
                 cancel: CancelToken | None) -> Reply:
        who: Who = {"provider": "anthropic", "model": self.candidate.model}
        headers = {"x-api-key": self._api_key or "", "anthropic-version": ANTHROPIC_VERSION}
        reply = post_json(self._http.client, self._url, self.payload(request, max_tokens),
                          headers=headers, timeout_s=self.candidate.timeout_s,
                          connect_timeout_s=self._http.connect_timeout_s, cancel=cancel,
                          max_response_bytes=self._http.max_response_bytes, **who)
        if not 200 <= reply.status < 300:
            raise classify_http_error(reply.status, reply.reason, reply.headers, reply.body, **who)
        try:
            data = reply.json()
        except ValueError as err:
            raise MalformedResponse(f"Malformed JSON from the model ({err}): "
                                    f"{reply.body[:200]!r}", **who) from err
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            raise UnexpectedResponse("Model response has no content list", **who)
        # docs/compaction.md "Summary control flow": the text blocks joined with newlines; thinking
        # blocks are not the summary.
        texts = [b["text"] for b in data["content"]
                 if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str)]
        text = "\n".join(texts)
        if not text.strip():
            raise EmptyOutput("Model returned an empty summary", **who)
        return Reply(text, _usage(data.get("usage")))


def _usage(usage: Any) -> Usage:
    if not isinstance(usage, dict):
        return Usage()
    return Usage(
        input=as_int(usage.get("input_tokens")),
        output=as_int(usage.get("output_tokens")),
        cache_read=as_int(usage.get("cache_read_input_tokens")),
        cache_write=as_int(usage.get("cache_creation_input_tokens")),
    )
