"""The router: the one layer that retries model calls.

For one ``SummaryRequest`` it walks the candidates in order (primary first) and, per attempt,
asks ``retry_policy.decide`` what to do with a failure: back off and retry, move to the next
candidate, or stop. Context overflow is never retried unchanged on the same model: a later
candidate with a larger window gets the request, else the conversation is summarized in chunks
that fit (docs/compaction.md "Summary prompts": the update prompt per chunk, via
``request.rechunk``). A server that still
refuses a chunk (its tokenizer counts more than ours) gets the chunks re-planned smaller, at
most ``max_shrinks`` times per candidate. Candidates that keep failing are cooled down for all
workers (``cooldown``); a per-job budget caps the HTTP attempts, the re-planned ones included.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from worker.llm._answer_bounds import complete_bounded
from worker.llm._classify import caused_by_request
from worker.llm.chunking import (
    DEFAULT_COUNTER,
    SAFETY,
    RequestCounter,
    parse_overflow,
    shrink_limit,
)
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
from worker.llm.settings import DEFAULT_MAX_OUTPUT_TOKENS
from worker.observability import metrics
from worker.summary_requests import CancelToken, Spend, SummaryRequest, SummaryResult, Usage

__all__ = ["MAX_SHRINKS", "MIN_CHUNK_OUTPUT", "AttemptBudget", "JobSummarizer", "Router"]

log = logging.getLogger(__name__)

_SLEEP_SLICE_S = 0.05
_TRAIL_LINE = 400
_COUNTED = ("transient", "timeout", "permanent")  # failure kinds the circuit breaker counts
# (calls answered, calls planned in all, candidate): the plan's size is an estimate until the end.
Progress: TypeAlias = Callable[[int, int, str], None]
MAX_SHRINKS = 3  # re-plans after a server refused a chunk as too long, per candidate
MIN_CHUNK_OUTPUT = 256  # output tokens a chunk call gets at least


class AttemptBudget:
    """HTTP attempts left for one job; shared by its concurrent calls.

    The budget follows the chunk plan: each answered chunk of a chunked request gives its
    attempt back (:meth:`grant`), so a session of any length can be summarised, while every
    failed attempt (retries, fallbacks, chunks a server refused as too long) draws on the
    configured budget (``COMPACTOR_LLM_ATTEMPT_BUDGET``). The number of chunks is bounded by the
    job's token bound (``COMPACTOR_MAX_JOB_TOKENS``), checked before any call.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.granted = 0  # attempts answered chunks gave back
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def grant(self) -> None:
        """One attempt back: a planned chunk was answered."""
        with self._lock:
            self.limit += 1
            self.granted += 1

    @property
    def spent(self) -> int:
        """Attempts counted against the configured budget (the retry policy's view)."""
        return self.used - self.granted


@dataclass
class _Call:
    """Bookkeeping of one ``summarize`` call."""

    cancel: CancelToken | None
    budget: AttemptBudget
    progress: Progress | None = None
    spend: Spend | None = None  # the job's, told of every answered HTTP call
    attempts: int = 0
    chunks: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    trail: list[str] = field(default_factory=list)
    errors: list[ModelCallError] = field(default_factory=list)

    def note(self, line: str, level: int = logging.WARNING) -> None:
        line = line if len(line) <= _TRAIL_LINE else line[: _TRAIL_LINE - 1] + "…"
        self.trail.append(line)
        log.log(level, "%s", line)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_cancelled():
            raise ModelCancelledError()


@dataclass
class _Plan:
    """The chunked path on one candidate: where it is, and the chunk size it plans for."""

    limit: int  # prompt tokens (our count) per chunk request
    window: int | None  # the window planned for: configured, or learned from an overflow error
    previous: str | None  # the summary so far
    start: int = 0  # first message not summarized yet
    shrinks: int = 0


class _Refused(Exception):  # an internal signal: never leaves the router
    """A server refused a request as too long; what we sent, in our count."""

    def __init__(self, error: ContextOverflow, prompt: int, completion: int) -> None:
        super().__init__(str(error))
        self.error, self.prompt, self.completion = error, prompt, completion


def _label(provider: Provider) -> str:
    return provider.candidate.label


def _chunkable(request: SummaryRequest) -> bool:
    return request.rechunk is not None and bool(request.conversation)


class Router:
    def __init__(self, providers: Sequence[Provider], *, policy: RetryPolicy | None = None,
                 cooldown: CooldownStore | None = None, rng: Callable[[], float] = random.random,
                 on_close: Callable[[], None] | None = None, max_shrinks: int = MAX_SHRINKS,
                 counter: RequestCounter = DEFAULT_COUNTER, summary_slack: float = 1.5) -> None:
        if not providers:
            raise ValueError("the router needs at least one candidate")
        self.providers = list(providers)
        self.policy = policy or RetryPolicy()
        self.cooldown: CooldownStore = cooldown or MemoryCooldownStore()
        self._rng = rng
        self._on_close = on_close
        self.max_shrinks = max_shrinks
        self.counter = counter  # the configured tokenizer's counts (fit checks, chunk plans)
        self.summary_slack = summary_slack  # COMPACTOR_LLM_SUMMARY_SLACK

    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult:
        """One request with its own attempt budget; use ``for_job()`` to share one per job."""
        return self.run(request, cancel, AttemptBudget(self.policy.job_attempt_budget))

    def for_job(self) -> JobSummarizer:
        return JobSummarizer(self)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()

    def run(self, request: SummaryRequest, cancel: CancelToken | None,
            budget: AttemptBudget, progress: Progress | None = None,
            spend: Spend | None = None) -> SummaryResult:
        call = _Call(cancel, budget, progress, spend)
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
            return SummaryResult(text=text, model=candidate.model or candidate.provider,
                                 provider=candidate.provider,
                                 usage=call.usage, attempts=call.attempts, trail=tuple(call.trail),
                                 chunks=call.chunks, cost_usd=call.cost_usd)
        raise AllCandidatesFailedError(call.errors, attempts=call.attempts)

    def _refusal(self, provider: Provider, call: _Call) -> ModelCallError | None:
        who: Who = {"provider": provider.candidate.provider, "model": provider.candidate.model}
        if provider.uses_http and self.cooldown.is_cooling(provider.candidate.cooldown_key):
            return CandidateCoolingDown("cooling down after repeated failures", **who)
        if provider.uses_http and call.budget.used >= call.budget.limit:
            return AttemptBudgetExhausted(f"the job's budget of {call.budget.limit} "
                                          "model attempts is spent", **who)
        return provider.problem()

    # --- one candidate ------------------------------------------------------------------------
    def _max_tokens(self, provider: Provider, request: SummaryRequest, window: int | None) -> int:
        candidate = provider.candidate
        # Clamped to what the candidate can write (docs/security.md): a caller's maxTokens
        # over it would only draw the model's 400.
        out = min(request.max_tokens, candidate.max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS)
        # A small window cannot give a 13k-token answer room; a summary rarely needs a quarter.
        return max(1, min(out, window // 4)) if window else out

    def _budget(self, provider: Provider, request: SummaryRequest, window: int) -> int:
        """Prompt tokens (our count) a request may have on ``window``."""
        reserve = provider.output_reserve(self._max_tokens(provider, request, window), request)
        return int(window * SAFETY) - reserve

    def _fits(self, provider: Provider, request: SummaryRequest, window: int | None) -> bool:
        return not window or self.counter.fits(request, self._budget(provider, request, window))

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

    def _on_candidate(self, index: int, provider: Provider, request: SummaryRequest,
                      call: _Call) -> str:
        window = provider.candidate.context_window
        who: Who = {"provider": provider.candidate.provider, "model": provider.candidate.model}
        if not self._fits(provider, request, window):
            if self._larger_later(index, request, window):
                raise ContextOverflow(f"input does not fit the window of {window} tokens; "
                                      "a later candidate has a larger one", **who)
            if not _chunkable(request):
                raise ContextOverflow(f"input of ~{self.counter.request(request)} tokens "
                                      f"does not fit {_label(provider)} and this request "
                                      "cannot be split", **who)
            assert window is not None
            plan = _Plan(self._budget(provider, request, window), window, request.previous_summary)
            return self._shrinking(index, provider, request, plan, call)
        max_tokens = self._max_tokens(provider, request, window)
        try:
            return self._attempts(index, provider, request, call, max_tokens)
        except ContextOverflow as err:
            if self._larger_later(index, request, window) or not _chunkable(request):
                raise
            refused = _Refused(err, self.counter.request(request),
                               provider.output_reserve(max_tokens, request))
        plan = _Plan(0, window, request.previous_summary)
        self._shrink(provider, request, plan, refused, call)
        return self._shrinking(index, provider, request, plan, call)

    def _attempts(self, index: int, provider: Provider, request: SummaryRequest, call: _Call,
                  max_tokens: int) -> str:
        key, label = provider.candidate.cooldown_key, _label(provider)
        last = index == len(self.providers) - 1
        attempt = 0
        while True:
            call.check_cancel()
            if provider.uses_http:
                if not call.budget.take():
                    raise AttemptBudgetExhausted(f"the job's budget of {call.budget.limit} "
                                                 "model attempts is spent",
                                                 provider=provider.candidate.provider,
                                                 model=provider.candidate.model)
                call.attempts += 1
            attempt += 1
            started = time.monotonic()
            try:
                reply = complete_bounded(provider, request, max_tokens, call.cancel,
                                         counter=self.counter, slack=self.summary_slack)
            except ModelCancelledError:
                raise
            except ModelCallError as err:
                metrics.observe_model_call(label, type(err).__name__, time.monotonic() - started)
                tripped = (provider.uses_http and err.kind in _COUNTED
                           and not caused_by_request(err)  # one request's, not the model's
                           and self.cooldown.record_failure(key))
                decision = decide(self.policy, Failure(err.kind, attempt, call.budget.spent,
                                                       err.retry_after_ms, last, self._rng()))
                reason = "circuit breaker opened" if tripped else decision.reason
                call.note(f"{label} attempt {attempt}: {type(err).__name__}: {err} -> {reason}")
                if decision.action != "retry" or tripped:
                    raise
                self._sleep(decision.delay_ms, call)
                continue
            if provider.uses_http:
                self.cooldown.record_success(key)
            cost = provider.candidate.cost_usd(reply.usage)
            metrics.observe_model_call(label, "ok", time.monotonic() - started, reply.usage, cost)
            call.usage, call.cost_usd = call.usage + reply.usage, call.cost_usd + cost
            if provider.uses_http and call.spend is not None:  # the extractive one is free
                call.spend.add(reply.usage, cost)
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
    def _shrinking(self, index: int, provider: Provider, request: SummaryRequest, plan: _Plan,
                   call: _Call) -> str:
        """The chunked path, re-planned smaller each time the server refuses a chunk as too long."""
        while True:
            try:
                return self._chunked(index, provider, request, plan, call)
            except _Refused as refused:
                self._shrink(provider, request, plan, refused, call)

    def _shrink(self, provider: Provider, request: SummaryRequest, plan: _Plan, refused: _Refused,
                call: _Call) -> None:
        """Lower ``plan.limit`` after ``refused``; re-raises its error when no shrink is left."""
        label = _label(provider)
        if plan.shrinks >= self.max_shrinks:
            call.note(f"{label}: still too long after {plan.shrinks} smaller re-plans")
            raise refused.error
        numbers = parse_overflow(str(refused.error))
        if numbers is not None and (plan.window is None or numbers.window < plan.window):
            plan.window = numbers.window  # the server told us its window: plan the output for it
        next_completion = provider.output_reserve(self._max_tokens(provider, request, plan.window),
                                                  request)
        plan.limit = shrink_limit(numbers, refused.prompt, refused.completion, next_completion)
        plan.shrinks += 1
        how = (f"the server counted {numbers.counted} of its {numbers.window} tokens" if numbers
               else "no numbers in the error: halving")
        call.note(f"{label}: shrink {plan.shrinks}/{self.max_shrinks}: ~{refused.prompt} tokens "
                  f"refused ({how}); re-planning chunks of ≤ ~{plan.limit} tokens")

    def _chunked(self, index: int, provider: Provider, request: SummaryRequest, plan: _Plan,
                 call: _Call) -> str:
        label = _label(provider)
        who: Who = {"provider": provider.candidate.provider, "model": provider.candidate.model}
        messages = list(request.conversation)
        costs = [self.counter.message(m) for m in messages]
        while plan.start < len(messages):
            sub, end = self.counter.next_chunk(request, messages, costs, plan.start, plan.previous,
                                               plan.limit)
            replaced = sum(costs[plan.start:end]) + self.counter.text(plan.previous)
            # An answer that merely fits the output budget must still be smaller than its input.
            max_tokens = min(self._max_tokens(provider, request, plan.window),
                             max(MIN_CHUNK_OUTPUT, replaced // 2))
            try:
                text = self._attempts(index, provider, sub, call, max_tokens)
            except ContextOverflow as err:
                raise _Refused(err, self.counter.request(sub),
                               provider.output_reserve(max_tokens, sub)) from err
            if provider.uses_http:
                call.budget.grant()  # the chunk's answered attempt was the plan's, not a retry
            call.chunks += 1
            call.note(f"{label}: chunk {call.chunks} (messages {plan.start}-{end - 1}, "
                      f"~{self.counter.request(sub)} tokens, max_tokens {max_tokens})",
                      level=logging.INFO)
            if call.progress is not None:  # "call i of about n" for the operators' events
                left = -(-sum(costs[end:]) // max(1, plan.limit))
                call.progress(call.chunks, call.chunks + left, label)
            if self.counter.text(text) >= replaced:
                raise SummaryNotSmaller(f"chunk summary (~{self.counter.text(text)} tokens) "
                                        "is not smaller than what it replaces "
                                        f"(~{replaced} tokens)", **who)
            plan.previous, plan.start = text, end
        assert plan.previous is not None
        return plan.previous


class JobSummarizer:
    """The router seen by one job: every call shares the job's attempt budget."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.budget = AttemptBudget(router.policy.job_attempt_budget)
        # Told after each answered chunk of a chunked call (the job publishes it as an event).
        self.progress: Progress | None = None
        self.spend = Spend()  # what the job's calls cost (its tenant's usage)

    def summarize(self, request: SummaryRequest,
                  cancel: CancelToken | None = None) -> SummaryResult:
        return self.router.run(request, cancel, self.budget, self.progress, self.spend)
