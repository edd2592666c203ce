"""The reference agent's remote summarization endpoint
(docs/compaction.md "Remote summarization endpoint"):
POST {systemPrompt, prompt} -> {summary}."""

from __future__ import annotations

from worker.llm._classify import classify_http_error
from worker.llm._http import post_json
from worker.llm.errors import (
    EmptyOutput,
    MalformedResponse,
    ModelCallError,
    UnexpectedResponse,
    Who,
)
from worker.llm.providers.base import HttpContext, Reply, check_endpoint
from worker.llm.settings import ModelCandidate
from worker.summary_requests import CancelToken, SummaryRequest, Usage

__all__ = ["RemoteEndpointProvider"]


def parse_header(raw: str | None) -> dict[str, str]:
    """``"Name: value"`` -> ``{"name": "value"}``; a bare value is sent as a bearer token."""
    if not raw:
        return {}
    name, sep, value = raw.partition(":")
    if sep and name.strip() and " " not in name.strip():
        return {name.strip().lower(): value.strip()}
    return {"authorization": f"Bearer {raw.strip()}"}


class RemoteEndpointProvider:
    uses_http = True

    def __init__(self, candidate: ModelCandidate, http: HttpContext,
                 auth_header: str | None) -> None:
        check_endpoint(candidate)
        self.candidate = candidate
        self._http = http
        self._headers = parse_header(auth_header)

    def problem(self) -> ModelCallError | None:
        return None

    def output_reserve(self, max_tokens: int, request: SummaryRequest) -> int:
        return max_tokens

    def complete(self, request: SummaryRequest, max_tokens: int,
                 cancel: CancelToken | None) -> Reply:
        who: Who = {"provider": "remote", "model": self.candidate.model}
        payload = {"systemPrompt": request.system_prompt, "prompt": request.prompt}
        reply = post_json(self._http.client, self.candidate.resolved_base_url, payload,
                          headers=self._headers, timeout_s=self.candidate.timeout_s,
                          connect_timeout_s=self._http.connect_timeout_s, cancel=cancel,
                          max_response_bytes=self._http.max_response_bytes, **who)
        if not 200 <= reply.status < 300:
            message = f"Remote compaction failed ({reply.status} {reply.reason})"
            raise classify_http_error(reply.status, reply.reason, reply.headers, reply.body,
                                      message=message, **who)
        try:
            data = reply.json()
        except ValueError as err:
            raise MalformedResponse(f"Malformed JSON from the remote endpoint ({err}): "
                                    f"{reply.body[:200]!r}", **who) from err
        summary = data.get("summary") if isinstance(data, dict) else None
        if not isinstance(summary, str):
            raise UnexpectedResponse("Remote compaction response missing summary", **who)
        if not summary.strip():
            raise EmptyOutput("Remote compaction returned an empty summary", **who)
        return Reply(summary, Usage())
