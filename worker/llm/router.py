"""The router: the one layer that retries model calls.

For one ``SummaryRequest`` it walks the candidates in order (primary first) and, per attempt,
asks ``retry_policy.decide`` what to do with a failure: back off and retry, move to the next
candidate, or stop. Context overflow is never retried on the same model: a later candidate with
a larger window gets the request, else the conversation is summarized in chunks that fit
(SPEC §10.2 update prompt per chunk, via ``request.rechunk``). Candidates that keep failing are
cooled down for all workers (``cooldown``); a per-job budget caps the HTTP attempts.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from worker.llm.chunking import SAFETY, estimate_request, estimate_text, message_cost, next_chunk
from worker.llm.cooldown import CooldownStore, MemoryCooldownStore
from worker.llm.errors import (
    AllCandidatesFailedError,
    AttemptBudgetExhausted,
    CandidateCoolingDown,
    ContextOverflow,
    ModelCallError,
    ModelCancelledError,
    SummaryNotSmaller,
    Who,
)
from worker.llm.providers.base import Provider
from worker.llm.retry_policy import Failure, RetryPolicy, decide
from worker.llm.types import CancelToken, SummaryRequest, SummaryResult, Usage

__all__ = ["AttemptBudget", "JobSummarizer", "Router"]

log = logging.getLogger(__name__)

_SLEEP_SLICE_S = 0.05
_TRAIL_LINE = 400
_COUNTED = ("transient", "timeout", "permanent")  # failure kinds the circuit breaker counts


class AttemptBudget:
    """HTTP attempts left for one job; shared by its concurrent calls."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True


@dataclass
class _Call:
    """Bookkeeping of one ``summarize`` call."""

    cancel: CancelToken | None
    budget: AttemptBudget
    attempts: int = 0
    chunks: int = 0
    usage: Usage = field(default_factory=Usage)
    trail: list[str] = field(default_factory=list)
    errors: list[ModelCallError] = field(default_factory=list)

    def note(self, line: str, level: int = logging.WARNING) -> None:
        line = line if len(line) <= _TRAIL_LINE else line[: _TRAIL_LINE - 1] + "…"
        self.trail.append(line)
        log.log(level, "%s", line)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_cancelled():
            raise ModelCancelledError()


def _label(provider: Provider) -> str:
    return provider.candidate.label


class Router:
    def __init__(self, providers: Sequence[Provider], *, policy: RetryPolicy | None = None,
                 cooldown: CooldownStore | None = None, rng: Callable[[], float] = random.random,
                 on_close: Callable[[], None] | None = None) -> None:
        if not providers:
            raise ValueError("the router needs at least one candidate")
        self.providers = list(providers)
        self.policy = policy or RetryPolicy()
        self.cooldown: CooldownStore = cooldown or MemoryCooldownStore()
        self._rng = rng
        self._on_close = on_close

    def summarize(self, request: SummaryRequest, cancel: CancelToken | None = None) -> SummaryResult:
        """One request with its own attempt budget; use ``for_job()`` to share one per job."""
        return self.run(request, cancel, AttemptBudget(self.policy.job_attempt_budget))

    def for_job(self) -> JobSummarizer:
        return JobSummarizer(self)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()

    def run(self, request: SummaryRequest, cancel: CancelToken | None, budget: AttemptBudget) -> SummaryResult:
        call = _Call(cancel, budget)
        for index, provider in enumerate(self.providers):
            call.check_cancel()
            refusal = self._refusal(provider, call)
            if refusal is not None:
                call.errors.append(refusal)
                call.note(f"{_label(provider)}: skipped ({refusal})")
                continue
            try:
                text = self._on_candidate(index, provider, request, call)
            except ModelCancelledError:
                raise
            except ModelCallError as err:
                call.errors.append(err)
                call.note(f"{_label(provider)}: gave up ({type(err).__name__}: {err})")
                continue
            candidate = provider.candidate
            return SummaryResult(text=text, model=candidate.model or candidate.provider, provider=candidate.provider,
                                 usage=call.usage, attempts=call.attempts, trail=tuple(call.trail),
                                 chunks=call.chunks)
        raise AllCandidatesFailedError(call.errors, attempts=call.attempts)

    def _refusal(self, provider: Provider, call: _Call) -> ModelCallError | None:
        who: Who = {"provider": provider.candidate.provider, "model": provider.candidate.model}
        if provider.uses_http and self.cooldown.is_cooling(provider.candidate.cooldown_key):
            return CandidateCoolingDown("cooling down after repeated failures", **who)
        if provider.uses_http and call.budget.used >= call.budget.limit:
            return AttemptBudgetExhausted(f"the job's budget of {call.budget.limit} model attempts is spent", **who)
        return provider.problem()

    # --- one candidate ------------------------------------------------------------------------
    def _max_tokens(self, provider: Provider, request: SummaryRequest) -> int:
        candidate = provider.candidate
        out = min(request.max_tokens, candidate.max_output_tokens or request.max_tokens)
        # A small window cannot give a 13k-token answer room; a summary rarely needs a quarter.
        return max(1, min(out, candidate.context_window // 4)) if candidate.context_window else out

    def _fits(self, provider: Provider, request: SummaryRequest, window: int | None) -> bool:
        if not window:
            return True
        reserve = provider.output_reserve(self._max_tokens(provider, request), request)
        return estimate_request(request) + reserve <= window * SAFETY

    def _larger_later(self, index: int, request: SummaryRequest, window: int | None) -> bool:
        """Is there a later usable candidate with a larger known window that fits the request?"""
        for later in self.providers[index + 1:]:
            theirs = later.candidate.context_window
            if not (later.uses_http and theirs and (window is None or theirs > window)):
                continue
            if later.problem() is None and self._fits(later, request, theirs) \
                    and not self.cooldown.is_cooling(later.candidate.cooldown_key):
                return True
        return False

    def _on_candidate(self, index: int, provider: Provider, request: SummaryRequest, call: _Call) -> str:
        window = provider.candidate.context_window
        who: Who = {"provider": provider.candidate.provider, "model": provider.candidate.model}
        if not self._fits(provider, request, window):
            if self._larger_later(index, request, window):
                raise ContextOverflow(f"input does not fit the window of {window} tokens; "
                                      "a later candidate has a larger one", **who)
            return self._chunked(index, provider, request, int(window * SAFETY) if window else 0, call)
        try:
            return self._attempts(index, provider, request, call)
        except ContextOverflow:
            if self._larger_later(index, request, window):
                raise
            estimate = estimate_request(request)
            # The provider saw more tokens than we estimated: aim well below what it refused.
            return self._chunked(index, provider, request, int(min(window or estimate, estimate) * 0.75), call)

    def _attempts(self, index: int, provider: Provider, request: SummaryRequest, call: _Call) -> str:
        max_tokens = self._max_tokens(provider, request)
        key, label = provider.candidate.cooldown_key, _label(provider)
        last = index == len(self.providers) - 1
        attempt = 0
        while True:
            call.check_cancel()
            if provider.uses_http:
                if not call.budget.take():
                    raise AttemptBudgetExhausted(f"the job's budget of {call.budget.limit} model attempts is spent",
                                                 provider=provider.candidate.provider, model=provider.candidate.model)
                call.attempts += 1
            attempt += 1
            try:
                reply = provider.complete(request, max_tokens, call.cancel)
            except ModelCancelledError:
                raise
            except ModelCallError as err:
                tripped = provider.uses_http and err.kind in _COUNTED and self.cooldown.record_failure(key)
                decision = decide(self.policy, Failure(err.kind, attempt, call.budget.used, err.retry_after_ms,
                                                       last, self._rng()))
                reason = "circuit breaker opened" if tripped else decision.reason
                call.note(f"{label} attempt {attempt}: {type(err).__name__}: {err} -> {reason}")
                if decision.action != "retry" or tripped:
                    raise
                self._sleep(decision.delay_ms, call)
                continue
            if provider.uses_http:
                self.cooldown.record_success(key)
            call.usage = call.usage + reply.usage
            return reply.text

    def _sleep(self, delay_ms: int, call: _Call) -> None:
        deadline = time.monotonic() + delay_ms / 1000
        while True:
            call.check_cancel()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(_SLEEP_SLICE_S, left))

    # --- the chunked path ---------------------------------------------------------------------
    def _chunked(self, index: int, provider: Provider, request: SummaryRequest, window: int, call: _Call) -> str:
        label = _label(provider)
        who: Who = {"provider": provider.candidate.provider, "model": provider.candidate.model}
        if request.rechunk is None or not request.conversation or window <= 0:
            raise ContextOverflow(f"input of ~{estimate_request(request)} tokens does not fit {label} "
                                  "and this request cannot be split", **who)
        limit = window - provider.output_reserve(self._max_tokens(provider, request), request)
        messages = list(request.conversation)
        costs = [message_cost(m) for m in messages]
        previous, start = request.previous_summary, 0
        while start < len(messages):
            sub, end = next_chunk(request, messages, costs, start, previous, limit)
            replaced = sum(costs[start:end]) + estimate_text(previous)
            text = self._attempts(index, provider, sub, call)
            call.chunks += 1
            call.note(f"{label}: chunk {call.chunks} (messages {start}-{end - 1}, ~{estimate_request(sub)} tokens)",
                      level=logging.INFO)
            if estimate_text(text) >= replaced:
                raise SummaryNotSmaller(f"chunk summary (~{estimate_text(text)} tokens) is not smaller than "
                                        f"what it replaces (~{replaced} tokens)", **who)
            previous, start = text, end
        assert previous is not None
        return previous


class JobSummarizer:
    """The router seen by one job: every call shares the job's attempt budget."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.budget = AttemptBudget(router.policy.job_attempt_budget)

    def summarize(self, request: SummaryRequest, cancel: CancelToken | None = None) -> SummaryResult:
        return self.router.run(request, cancel, self.budget)
