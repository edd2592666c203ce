"""OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp server, Ollama, OpenRouter,
LiteLLM)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from worker.llm._classify import classify_http_error
from worker.llm._http import post_json
from worker.llm.errors import (
    EmptyOutput,
    MalformedResponse,
    ModelCallError,
    UnexpectedResponse,
    Who,
)
from worker.llm.providers.base import HttpContext, Reply, as_int, check_endpoint
from worker.llm.settings import ModelCandidate
from worker.summary_requests import CancelToken, SummaryRequest, Usage

__all__ = ["OpenAIChatProvider"]


class OpenAIChatProvider:
    uses_http = True

    def __init__(self, candidate: ModelCandidate, http: HttpContext, api_key: str | None) -> None:
        check_endpoint(candidate)
        self.candidate = candidate
        self._http = http
        self._api_key = api_key
        self._url = candidate.resolved_base_url + "/chat/completions"

    def problem(self) -> ModelCallError | None:
        return None  # local servers need no key; a provider that does answers 401

    def output_reserve(self, max_tokens: int, request: SummaryRequest) -> int:
        return max_tokens

    def _token_param(self) -> str:
        if self.candidate.token_param != "auto":
            return self.candidate.token_param
        host = urlsplit(self.candidate.resolved_base_url).hostname or ""
        return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"

    def payload(self, request: SummaryRequest, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.candidate.model,
            "messages": [
                {"role": "system", "content": request.system_prompt},
                {"role": "user", "content": request.prompt},
            ],
            self._token_param(): max_tokens,
            "stream": False,
        }
        if self.candidate.reasoning and request.reasoning:
            body["reasoning_effort"] = "high"
        return body

    def complete(self, request: SummaryRequest, max_tokens: int,
                 cancel: CancelToken | None) -> Reply:
        who: Who = {"provider": "openai", "model": self.candidate.model}
        headers = {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}
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
        if isinstance(data, dict) and "error" in data and not data.get("choices"):
            # OpenRouter and some proxies answer 200 with an error object
            status = data["error"].get("code") if isinstance(data["error"], dict) else None
            status = status if isinstance(status, int) and status >= 400 else 502
            raise classify_http_error(status, "in a 200 response", reply.headers, reply.body, **who)
        return Reply(_text(data, who), _usage(data))


def _text(data: Any, who: Who) -> str:
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as err:
        raise UnexpectedResponse("Model response has no choices[0].message", **who) from err
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # some servers return content parts
        content = "\n".join(p["text"] for p in content if isinstance(p, dict)
                            and p.get("type") == "text" and isinstance(p.get("text"), str))
    if not isinstance(content, str) or not content.strip():
        raise EmptyOutput("Model returned an empty summary", **who)
    return content


def _usage(data: Any) -> Usage:
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("prompt_tokens_details")
    cached = as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = as_int(usage.get("prompt_tokens"))
    # OpenAI counts cached tokens inside prompt_tokens; Usage keeps them apart (as pi does).
    return Usage(input=max(0, prompt - cached), output=as_int(usage.get("completion_tokens")),
                 cache_read=cached)
