"""The summarisation control flow (docs/compaction.md "Summary control flow", "Branch summaries")
over a ``Summarizer``.

No retries here: the model layer is the one place that retries model calls. The summary format
(``agent.summaryFormat``, docs/compaction.md "Summary formats") picks the prompts; the max-token
overrides (``agent.summaryMaxTokens`` / ``agent.turnPrefixMaxTokens``) replace the budgets derived
from the reserve.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.agent_settings import AgentSettings, SummaryFormat
from api_client.contract.errors import ModelError
from api_client.contract.session import Entry, Message
from api_client.contract.session.convert import convert_to_llm
from worker.compaction import prompts
from worker.compaction.branch import DEFAULT_CONTEXT_WINDOW, branch_budget, prepare_branch_entries
from worker.compaction.caches import PlanCaches
from worker.compaction.fileops import format_file_operations
from worker.compaction.ledger import branch_ledger, compaction_ledger, with_block
from worker.compaction.prepare import Preparation
from worker.compaction.serialize import PART_SEPARATOR, conversation_parts
from worker.summary_requests import (
    CancelToken,
    PromptLayout,
    Purpose,
    Summarizer,
    SummaryRequest,
    SummaryResult,
)
from worker.tokens import Tokenizer

__all__ = [
    "NO_PRIOR_HISTORY",
    "BranchOutcome",
    "CompactionOutcome",
    "RequestOptions",
    "SummarizationError",
    "branch_max_tokens",
    "branch_request",
    "compact",
    "history_request",
    "options_for",
    "short_request",
    "summarize_branch",
    "turn_prefix_request",
]

NO_PRIOR_HISTORY = "No prior history."
SPLIT_TURN_SEPARATOR = "\n\n---\n\n**Turn Context (split turn):**\n\n"
_FAILURE_PREFIX = {
    "history": "Summarization failed",
    "turn_prefix": "Turn prefix summarization failed",
    "short": "Short summary failed",
    "branch": "Summarization failed",
}


class SummarizationError(ModelError):
    """A summary call failed; the text names the call as the reference agent does."""


@dataclass(frozen=True)
class CompactionOutcome:
    summary: str
    short_summary: str | None  # None under a pi format: pi writes none
    first_kept_entry_id: str
    tokens_before: int
    details: dict[str, Any]  # readFiles, modifiedFiles, facts (the ledger's counts per kind)
    calls: tuple[SummaryResult, ...]


@dataclass(frozen=True)
class BranchOutcome:
    summary: str | None
    read_files: tuple[str, ...]
    modified_files: tuple[str, ...]
    calls: tuple[SummaryResult, ...]
    facts: dict[str, dict[str, int]] | None = None  # the ledger's counts per kind

    def details(self) -> dict[str, Any]:
        details: dict[str, Any] = {"readFiles": list(self.read_files),
                                   "modifiedFiles": list(self.modified_files)}
        if self.facts is not None:
            details["facts"] = self.facts
        return details


@dataclass(frozen=True)
class RequestOptions:
    custom_instructions: str | None
    prompt_override: str | None
    extra_context: tuple[str, ...]
    reserve: int
    read_files: tuple[str, ...]
    modified_files: tuple[str, ...]
    # The worker's (``PlanCaches``); else the job's own: its requests share their parts.
    caches: PlanCaches = field(default_factory=PlanCaches, compare=False, repr=False)
    summary_format: SummaryFormat | None = None  # None: Compactor's prompts
    summary_max_tokens: int | None = None  # history (and branch) call; None: from the reserve
    turn_prefix_max_tokens: int | None = None  # turn prefix call; None: from the reserve

    def history_budget(self) -> int:
        return self.summary_max_tokens or prompts.history_max_tokens(self.reserve)

    def turn_prefix_budget(self) -> int:
        return self.turn_prefix_max_tokens or prompts.turn_prefix_max_tokens(self.reserve)


def _call(summarizer: Summarizer, request: SummaryRequest,
          cancel: CancelToken | None) -> SummaryResult:
    try:
        return summarizer.summarize(request, cancel)
    except SummarizationError:
        raise
    except ModelError as err:
        if type(err).__name__ == "ModelCancelledError":
            raise
        raise SummarizationError(f"{_FAILURE_PREFIX[request.purpose]}: "
                                 f"{err or 'Unknown error'}") from err


def _request(purpose: Purpose, llm: Sequence[Message], prompt: str, max_tokens: int,
             opts: RequestOptions, conversation: prompts.Conversation,
             **extra: object) -> SummaryRequest:
    return SummaryRequest(
        purpose=purpose,
        system_prompt=prompts.system_prompt(opts.summary_format),
        prompt=prompt,
        max_tokens=max_tokens,
        reasoning=purpose != "branch",
        conversation=tuple(llm),
        read_files=opts.read_files,
        modified_files=opts.modified_files,
        layout=_layout(prompt, conversation),
        **extra,  # type: ignore[arg-type]
    )


def _serialized(llm: Sequence[Message], opts: RequestOptions) -> prompts.Conversation:
    """The conversation of a prompt, as the parts it joins."""
    parts = tuple(conversation_parts(llm, opts.caches.parts))
    return prompts.Conversation(prompts.agent_parts(parts, opts.summary_format), PART_SEPARATOR)


def _layout(prompt: str, conversation: prompts.Conversation) -> PromptLayout | None:
    """Where ``conversation`` stands in ``prompt``: right after one of
    ``CONVERSATION_OPENINGS``, as every builder of ``prompts`` puts it. Checked where it is
    cheap (the opening, the last part at the end of the conversation's length): its 0.5-2 MB
    are not compared again, and a prompt shaped otherwise has no layout."""
    opening = next((o for o in prompts.CONVERSATION_OPENINGS if prompt.startswith(o)), None)
    if opening is None:
        return None
    at = len(opening)
    end = at + conversation.length
    parts = conversation.parts
    if not (len(prompt) >= end
            and (not parts or prompt.startswith(parts[-1], end - len(parts[-1])))):
        return None
    return PromptLayout(prompt, prompt[:at], parts, conversation.separator, prompt[end:])


def history_request(llm: Sequence[Message], previous: str | None,
                    opts: RequestOptions) -> SummaryRequest:
    conversation = _serialized(llm, opts)
    prompt = prompts.build_history_prompt(
        conversation,
        previous_summary=previous,
        custom_instructions=opts.custom_instructions,
        prompt_override=opts.prompt_override,
        extra_context=opts.extra_context,
        summary_format=opts.summary_format,
    )
    rechunk: Callable[[Sequence[Message], str | None], SummaryRequest] = (  # noqa: E731
        lambda chunk, prev: history_request(chunk, prev, opts)
    )
    return _request("history", llm, prompt, opts.history_budget(), opts,
                    conversation, previous_summary=previous, rechunk=rechunk)


def turn_prefix_request(llm: Sequence[Message], opts: RequestOptions,
                        previous: str | None = None) -> SummaryRequest:
    conversation = _serialized(llm, opts)
    prompt = prompts.build_turn_prefix_prompt(
        conversation, previous_summary=previous, summary_format=opts.summary_format,
        custom_instructions=opts.custom_instructions)
    # A prefix larger than the summarizer's window is summarised part by part
    # (router's chunked path).
    rechunk: Callable[[Sequence[Message], str | None], SummaryRequest] = (  # noqa: E731
        lambda chunk, prev: turn_prefix_request(chunk, opts, prev)
    )
    return _request("turn_prefix", llm, prompt, opts.turn_prefix_budget(),
                    opts, conversation, previous_summary=previous, rechunk=rechunk)


def short_request(llm: Sequence[Message], merged: str, opts: RequestOptions) -> SummaryRequest:
    conversation = _serialized(llm, opts)
    prompt = prompts.build_short_prompt(conversation, merged_summary=merged,
                                        extra_context=opts.extra_context)

    def rechunk(chunk: Sequence[Message], prev: str | None) -> SummaryRequest:
        # Recent messages too large for the window: each part sees the merged summary plus the
        # description of the parts before it; the last part's description is the short summary.
        context = merged if not prev or prev == merged else f"{merged}\n\n{prev}".strip()
        return short_request(chunk, context, opts)

    return _request("short", llm, prompt, prompts.short_max_tokens(opts.reserve), opts,
                    conversation, previous_summary=merged or None, rechunk=rechunk)


def branch_request(llm: Sequence[Message], opts: RequestOptions) -> SummaryRequest:
    conversation = _serialized(llm, opts)
    prompt = prompts.build_branch_prompt(conversation,
                                         custom_instructions=opts.custom_instructions,
                                         summary_format=opts.summary_format)
    return _request("branch", llm, prompt, opts.summary_max_tokens or prompts.BRANCH_MAX_TOKENS,
                    opts, conversation)


def options_for(preparation: Preparation, *, custom_instructions: str | None = None,
                prompt_override: str | None = None, extra_context: Sequence[str] = (),
                caches: PlanCaches | None = None, summary_format: SummaryFormat | None = None,
                summary_max_tokens: int | None = None,
                turn_prefix_max_tokens: int | None = None) -> RequestOptions:
    return RequestOptions(custom_instructions, prompt_override, tuple(extra_context),
                          preparation.settings.reserve_tokens, preparation.read_files,
                          preparation.modified_files, caches or PlanCaches(), summary_format,
                          summary_max_tokens, turn_prefix_max_tokens)


class _PairCancel:
    """The job's cancel token for one call of a pair, also set once the other call failed:
    the call still running stops instead of spending tokens on a job that has failed."""

    def __init__(self, job: CancelToken | None) -> None:
        self.job = job
        self.sibling_failed = threading.Event()

    def is_cancelled(self) -> bool:
        return self.sibling_failed.is_set() or (self.job is not None and self.job.is_cancelled())


def _history_result(prep: Preparation, summarizer: Summarizer, opts: RequestOptions,
                    cancel: CancelToken | None) -> SummaryResult | None:
    """The history call; None without messages to summarise (no call is made)."""
    if not prep.messages_to_summarize:
        return None
    return _call(summarizer, history_request(convert_to_llm(prep.messages_to_summarize),
                                             prep.previous_summary, opts), cancel)


def _history_text(prep: Preparation, result: SummaryResult | None) -> str:
    # Q6 for split turns; steps 2-3 of docs/compaction.md "Summary control flow" otherwise
    return result.text if result is not None else prep.previous_summary or NO_PRIOR_HISTORY


def _pair(prep: Preparation, summarizer: Summarizer, opts: RequestOptions,
          cancel: CancelToken | None) -> tuple[SummaryResult | None, SummaryResult]:
    """The history and turn prefix calls of a split turn, both in flight at once (as pi 0.73
    makes them). The first failure is raised as it would be alone; the other call is then
    cancelled, and waited for, so no thread outlives the job's step."""
    prefix_request = turn_prefix_request(convert_to_llm(prep.turn_prefix_messages), opts)
    if not prep.messages_to_summarize:
        return None, _call(summarizer, prefix_request, cancel)
    token = _PairCancel(cancel)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="compactor-summary") as pool:
        history = pool.submit(_history_result, prep, summarizer, opts, token)
        prefix = pool.submit(_call, summarizer, prefix_request, token)
        both: list[Future[Any]] = [history, prefix]
        wait(both, return_when=FIRST_EXCEPTION)
        for future in both:
            if future.done() and future.exception() is not None:
                token.sibling_failed.set()
                future.result()  # raises the failure
    return history.result(), prefix.result()


def _main_summary(prep: Preparation, summarizer: Summarizer, opts: RequestOptions,
                  cancel: CancelToken | None, calls: list[SummaryResult]) -> str:
    if not (prep.is_split_turn and prep.turn_prefix_messages):
        result = _history_result(prep, summarizer, opts, cancel)
        calls.extend(r for r in (result,) if r is not None)
        return _history_text(prep, result)
    history, prefix = _pair(prep, summarizer, opts, cancel)
    calls.extend(r for r in (history, prefix) if r is not None)
    return _history_text(prep, history) + SPLIT_TURN_SEPARATOR + prefix.text


def _short_summary(prep: Preparation, summarizer: Summarizer, summary: str,
                   opts: RequestOptions, cancel: CancelToken | None) -> SummaryResult | None:
    """Compactor's short summary, made after the main one (it reads it). A pi format makes no
    such call, as pi does not: it would keep the agent waiting one more model call for a
    field its extension never reads."""
    if opts.summary_format is not None:
        return None
    return _call(summarizer, short_request(convert_to_llm(prep.recent_messages), summary, opts),
                 cancel)


def compact(
    preparation: Preparation,
    summarizer: Summarizer,
    *,
    custom_instructions: str | None = None,
    prompt_override: str | None = None,
    extra_context: Sequence[str] = (),
    cancel: CancelToken | None = None,
    fact_budget_tokens: int | None = None,
    caches: PlanCaches | None = None,
    summary_format: SummaryFormat | None = None,
    summary_max_tokens: int | None = None,
    turn_prefix_max_tokens: int | None = None,
) -> CompactionOutcome:
    """Summaries for a prepared compaction: history ‖ turn prefix, then (Compactor's format)
    the short summary.
    ``caches``: the worker's (``PlanCaches``), else nothing is kept for the next job.
    ``summary_format``: the agent's prompts (None: Compactor's); the max-token overrides
    replace the budgets derived from the preparation's reserve."""
    if not preparation.first_kept_entry_id:
        raise SummarizationError("First kept entry has no ID - session may need migration")
    opts = options_for(preparation, custom_instructions=custom_instructions,
                       prompt_override=prompt_override, extra_context=extra_context,
                       caches=caches, summary_format=summary_format,
                       summary_max_tokens=summary_max_tokens,
                       turn_prefix_max_tokens=turn_prefix_max_tokens)
    calls: list[SummaryResult] = []
    summary = _main_summary(preparation, summarizer, opts, cancel, calls)
    short = _short_summary(preparation, summarizer, summary, opts, cancel)
    calls.extend(r for r in (short,) if r is not None)
    tags = format_file_operations(preparation.read_files, preparation.modified_files)
    ledger = compaction_ledger(preparation, summary + tags, fact_budget_tokens,
                               caches=opts.caches)
    details = {"readFiles": list(preparation.read_files),
               "modifiedFiles": list(preparation.modified_files),
               "facts": ledger.stats}
    return CompactionOutcome(
        summary=with_block(summary, tags, ledger),
        short_summary=short.text if short is not None else None,
        first_kept_entry_id=preparation.first_kept_entry_id,
        tokens_before=preparation.tokens_before,
        details=details,
        calls=tuple(calls),
    )


def branch_max_tokens(agent: AgentSettings | None) -> int | None:
    """A branch summary's max tokens for the agent: pi 1.6 asks every summary call for the
    model's output limit, which its extension sends as ``summaryMaxTokens``; pi 0.73 and
    Compactor ask :data:`prompts.BRANCH_MAX_TOKENS` (None)."""
    if agent is None or agent.summary_format != "pi-1.6":
        return None
    return agent.summary_max_tokens


def summarize_branch(
    entries: Sequence[Entry],
    summarizer: Summarizer,
    *,
    tokenizer: Tokenizer,
    context_window: int | None = DEFAULT_CONTEXT_WINDOW,
    reserve_tokens: int = 16_384,
    custom_instructions: str | None = None,
    cancel: CancelToken | None = None,
    fact_budget_tokens: int | None = None,
    caches: PlanCaches | None = None,
    summary_format: SummaryFormat | None = None,
    max_tokens: int | None = None,
) -> BranchOutcome:
    """docs/compaction.md "Branch summaries": None as summary when there is nothing to summarise
    (not an error).
    ``summary_format``: the agent's prompt and preamble (None: Compactor's); ``max_tokens``
    replaces the branch budget."""
    prep = prepare_branch_entries(entries, branch_budget(context_window, reserve_tokens), tokenizer)
    if not prep.messages:
        return BranchOutcome(None, (), (), ())
    llm = convert_to_llm(prep.messages)
    opts = RequestOptions(custom_instructions, None, (), reserve_tokens, prep.read_files,
                          prep.modified_files, caches or PlanCaches(), summary_format,
                          summary_max_tokens=max_tokens)
    result = _call(summarizer, branch_request(llm, opts), cancel)
    text = prompts.with_branch_preamble(result.text, summary_format)
    tags = format_file_operations(prep.read_files, prep.modified_files)
    ledger = branch_ledger(entries, prep.included_entry_ids, text + tags, fact_budget_tokens,
                           caches=opts.caches)
    return BranchOutcome(with_block(text, tags, ledger), prep.read_files, prep.modified_files,
                         (result,), ledger.stats)
