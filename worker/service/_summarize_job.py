"""A summarize job: the record's system prompt and prompt through the model router, no session.

The HTTP API's ``/v1/summarize`` and ``/v1/chat/completions`` (oh-my-pi's remote endpoint) wait
for it; the router gives it what a compaction's calls get: retries, fallback, shared cooldowns,
the job's attempt budget, its deadline and cancellation (the job control is the cancel token).

A prompt over the window of every model of the chain is refused before any call
(:class:`PromptTooLargeError`; docs/security.md): admission bounds only its estimate
(``max_prompt_tokens``), and a summarize request cannot be split. A candidate that names no
``context_window`` has the worker's (``COMPACTOR_CONTEXT_WINDOW``, 128 000).
"""

from __future__ import annotations

from typing import Any

from api_client.contract.errors import InvalidRequestError, PromptTooLargeError
from worker.compaction.prompts import history_max_tokens
from worker.llm import SummaryRequest
from worker.llm.chunking import RequestCounter
from worker.service._job_context import JobContext, JobSuccess, calls_summary

__all__ = ["check_window", "model_window", "run_summarize", "summary_request"]


def summary_request(data: Any, reserve_tokens: int) -> SummaryRequest:
    """The router's request for a record's ``input`` (``systemPrompt``, ``prompt``,
    ``maxTokens``; without ``maxTokens`` a history summary's budget,
    docs/compaction.md "Summary budgets")."""
    if not isinstance(data, dict) or not isinstance(data.get("prompt"), str):
        raise InvalidRequestError("the summarize job's record has no prompt")
    system, prompt = data.get("systemPrompt") or "", data["prompt"]
    max_tokens = data.get("maxTokens") or history_max_tokens(reserve_tokens)
    if not isinstance(system, str) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise InvalidRequestError("the summarize job's record has a malformed input")
    # The prompt as one user message too: the deterministic summarizer (the chain's floor)
    # reads the conversation, not the prompt text.
    conversation = ({"role": "user", "content": prompt, "timestamp": 0},)
    return SummaryRequest(purpose="history", system_prompt=system, prompt=prompt,
                          max_tokens=max_tokens, reasoning=True, conversation=conversation)


def model_window(ctx: JobContext) -> int:
    """The largest window of the chain's models (the worker's ``context_window`` for one that
    names none, and for a chain of none)."""
    s = ctx.rt.settings
    return max((m.context_window or s.context_window for m in s.models),
               default=s.context_window)


def check_window(ctx: JobContext, request: SummaryRequest) -> None:
    """:class:`PromptTooLargeError` when the prompts are over every model's window (counted
    only when their UTF-8 bytes, which bound any count, are not within it)."""
    window, counter = model_window(ctx), RequestCounter(ctx.rt.tokenizer)
    if counter.fits(request, window):
        return
    raise PromptTooLargeError("the summary's prompt", setting="context_window", limit=window,
                              value=counter.request(request))


def run_summarize(ctx: JobContext) -> JobSuccess:
    request = summary_request(ctx.record.input, ctx.rt.settings.client.reserve_tokens)
    check_window(ctx, request)
    ctx.control.check()
    call = ctx.summarizer.summarize(request, ctx.control)
    model, usage, detail = calls_summary([call])
    result = {"summary": call.text, **detail, "durationMs": ctx.control.elapsed_ms()}
    return JobSuccess(result=result, model=model, usage=usage, event={"result": result})
