"""One model call whose answer is bounded, whatever the provider sends back.

The body's bytes and JSON depth are bounded where it is read (``_http``); here, what is left:
an answer a provider's parser chokes on, whatever the exception (a ``RecursionError``, a
``TypeError`` on a field of the wrong type), is a ``MalformedResponse`` (transient: retried,
then the next candidate), and a summary longer than its output budget × ``slack`` (our token
count) is a ``SummaryTooLong`` (the next candidate at once). Neither ever ends a job as an
internal error, so an overflow compaction still reaches the fallback chain's last rung.
"""

from __future__ import annotations

import logging

from worker.llm.chunking import RequestCounter
from worker.llm.errors import MalformedResponse, ModelCallError, SummaryTooLong, Who
from worker.llm.providers.base import Provider, Reply
from worker.summary_requests import CancelToken, SummaryRequest

__all__ = ["complete_bounded"]

log = logging.getLogger("worker.llm.router")
_PARSE_FAILURES = (ValueError, TypeError, LookupError, AttributeError, RecursionError)


def complete_bounded(provider: Provider, request: SummaryRequest, max_tokens: int,
                     cancel: CancelToken | None, *, counter: RequestCounter,
                     slack: float) -> Reply:
    if not provider.uses_http:  # our own summarizer: its bugs stay visible as bugs
        return provider.complete(request, max_tokens, cancel)
    who: Who = {"provider": provider.candidate.provider, "model": provider.candidate.model}
    try:
        reply = provider.complete(request, max_tokens, cancel)
    except ModelCallError:
        raise
    except _PARSE_FAILURES as err:
        log.warning("%s: unreadable answer", provider.candidate.label, exc_info=True)
        raise MalformedResponse(f"Malformed response ({type(err).__name__})", **who) from err
    budget = provider.output_reserve(max_tokens, request)
    tokens = counter.text(reply.text)
    if tokens > int(budget * slack):
        raise SummaryTooLong(f"summary of ~{tokens} tokens is over its budget of {budget} "
                             f"tokens × {slack:g} (COMPACTOR_LLM_SUMMARY_SLACK)", **who)
    return reply
