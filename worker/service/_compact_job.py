"""A compaction job (docs/rules.md "Manual compaction", "Automatic compaction") on a Redis
session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from api_client.contract.agent_settings import plan_key
from api_client.contract.errors import (
    AlreadyCompactedError,
    JobTooLargeError,
    NothingToCompactError,
)
from api_client.contract.job_enums import CompactReason, EventType
from api_client.contract.session import Entry, JsonObject, SessionTree, parse_entry
from api_client.contract.wire import TokenUsage
from worker.compaction import (
    Preparation,
    build_session_context,
    compact,
    context_messages,
    no_plan_reason,
    prepare_compaction,
    prime_counts,
)
from worker.compaction.extension import DraftBase, prepare_extension
from worker.compaction.ledger import hook_compaction_with_facts
from worker.compaction.reach import compaction_reach
from worker.compaction.toolpairs import safe_first_kept_id
from worker.llm import SummaryResult
from worker.observability import metrics
from worker.service._draft_join import join_running_draft, joined_entry, stored_entry
from worker.service._job_context import JobContext, JobSuccess, calls_summary, compaction_entry
from worker.service._job_stops import JobCancelled
from worker.service._loop_guard import (
    check_loop,
    count_compaction,
    is_ineffective,
    observe_stall,
)
from worker.service._outage import ride_out
from worker.service._prune_job import PruneStep, prune_pass
from worker.service._replan import settle, with_replans
from worker.store import CommitOutcome
from worker.store.paths import PathSnapshot, Reach
from worker.tokens import worth_priming

__all__ = ["run_compact"]


@dataclass(frozen=True)
class Draft:
    """A compaction entry ready to commit, and how it was made."""

    entry: JsonObject
    from_extension: bool
    path: Sequence[Entry]
    calls: tuple[SummaryResult, ...] = ()
    base: DraftBase | None = None  # the stale draft it extends (or, ``joined``, commits as is)
    joined: bool = False  # a draft committed as it is: joined (_draft_join) or exact (stored)


@dataclass
class Progress:
    pruned: PruneStep = field(default_factory=PruneStep)
    joined: str | None = None  # the speculative job whose draft this one waited for


def _reason(ctx: JobContext) -> CompactReason:
    return ctx.record.reason or CompactReason.MANUAL


def _plan(ctx: JobContext,
          path: Sequence[Entry]) -> tuple[Preparation | None, DraftBase | None]:
    """The plan, built on the session's stale draft when there is one to extend."""
    extended = _on_draft(ctx, path)
    prep, base = extended or (prepare_compaction(path, ctx.compaction_settings, ctx.tokenizer,
                                                 version=ctx.cut_version), None)
    if prep is None and _reason(ctx) is CompactReason.MANUAL:
        # Automatic compaction ends quietly when there is nothing to do
        # (docs/rules.md "Automatic compaction").
        if no_plan_reason(path) == "already compacted":
            raise AlreadyCompactedError()
        raise NothingToCompactError()
    if prep is not None:
        _check_size(ctx, prep)
    return prep, base


def _on_draft(ctx: JobContext,
              path: Sequence[Entry]) -> tuple[Preparation, DraftBase] | None:
    """A job that may take a draft (speculative or automatic, without instructions) builds on
    the stored one that no longer fits: the update summarises the new span only, where a plan
    of the path alone would summarise the draft's span again (docs/instant-compaction.md)."""
    drafts = ctx.rt.drafts
    if drafts is None or ctx.record.instructions or _reason(ctx) is CompactReason.MANUAL:
        return None
    draft = drafts.get(ctx.session_id)
    if draft is not None and draft.get("agentKey", "") != plan_key(ctx.record.agent):
        return None  # planned with other agent settings: this job plans the path alone
    return prepare_extension(path, draft, ctx.compaction_settings, ctx.tokenizer,
                             ctx.cut_version)


def draft_tokens(*usages: Mapping[str, int] | TokenUsage | None) -> TokenUsage | None:
    """Model tokens summed (wire dicts or TokenUsage); None when there is none."""
    parts = [u if isinstance(u, TokenUsage) else TokenUsage.model_validate(u)
             for u in usages if u]
    if not parts:
        return None
    return TokenUsage(**{k: sum(getattr(p, k) for p in parts)
                         for k in ("input", "output", "cache_read", "cache_write")})


def _check_size(ctx: JobContext, prep: Preparation) -> None:
    """Before any hook or model call: the tokens the summaries would read stay within
    ``max_job_tokens`` (a longer session is chunked, one model call per chunk)."""
    limit = ctx.rt.settings.max_job_tokens
    tokens = ctx.tokenizer.total([*prep.messages_to_summarize, *prep.turn_prefix_messages,
                                  *prep.recent_messages])
    if tokens > limit:
        raise JobTooLargeError(tokens, limit)


def _reach(ctx: JobContext, prune: bool) -> Reach:
    """How far back the job reads the path (``worker.compaction.reach``): all of it when a hook
    gets the branch entries (``session_before_compact``)."""
    if ctx.rt.hooks.has_hooks("session_before_compact"):
        return lambda path, pruned_through: False

    def reach(path: Sequence[Entry], pruned_through: str | None) -> bool:
        return compaction_reach(path, pruned_through, prune=prune)

    return reach


def _draft(ctx: JobContext, prep: Preparation, path: Sequence[Entry]) -> Draft:
    """Hooks, then the model (docs/rules.md "Manual compaction")."""
    hooks, sid = ctx.rt.hooks, ctx.session_id
    before = hooks.before_compact(prep, path, ctx.record.instructions, ctx.control, session_id=sid)
    if before is not None and before.cancel:
        raise JobCancelled()
    if before is not None and before.compaction is not None:
        c = before.compaction
        summary, details, _ = hook_compaction_with_facts(
            prep, c["summary"], c.get("details"), ctx.rt.settings.fact_budget_tokens,
            caches=ctx.rt.plan_caches)
        entry = compaction_entry(
            summary=summary, short_summary=c.get("shortSummary"),
            # Q22: a hook's kept range, too, never starts between a tool call and its result.
            first_kept_entry_id=safe_first_kept_id(path, c["firstKeptEntryId"]),
            tokens_before=c["tokensBefore"],
            details=details, preserve_data=c.get("preserveData"), from_extension=True)
        return Draft(entry, True, path)
    ctx.control.check()
    messages = [*prep.messages_to_summarize, *prep.turn_prefix_messages]
    extra = hooks.compacting(sid, messages, cancel=ctx.control)
    ctx.control.check()
    agent = ctx.record.agent  # the agent's summary format and max tokens (docs/compaction.md)
    outcome = compact(
        prep, ctx.summarizer, custom_instructions=ctx.record.instructions,
        prompt_override=extra.prompt if extra else None,
        extra_context=tuple(extra.context) if extra else (), cancel=ctx.control,
        fact_budget_tokens=ctx.rt.settings.fact_budget_tokens, caches=ctx.rt.plan_caches,
        summary_format=agent.summary_format if agent else None,
        summary_max_tokens=agent.summary_max_tokens if agent else None,
        turn_prefix_max_tokens=agent.turn_prefix_max_tokens if agent else None)
    entry = compaction_entry(
        summary=outcome.summary, short_summary=outcome.short_summary,
        first_kept_entry_id=outcome.first_kept_entry_id, tokens_before=outcome.tokens_before,
        details=outcome.details, preserve_data=extra.preserve_data if extra else None,
        from_extension=False)
    return Draft(entry, False, path, outcome.calls)


def _tokens_after(ctx: JobContext, path: Sequence[Entry], entry: JsonObject) -> int:
    """Tokens of the context the compacted path sends to the model (before later appends)."""
    compaction = parse_entry(dict(entry))
    if path and compaction.parent_id == path[-1].id:  # appended at the planned leaf: no tree
        messages = context_messages([*path, compaction])
    else:
        tree = SessionTree([*path, compaction])
        messages = list(build_session_context(tree, compaction.id, strict=False).messages)
    return ctx.tokenizer.total(m.message for m in messages)


def _result(ctx: JobContext, progress: Progress, draft: Draft) -> dict[str, Any]:
    _, _, calls = calls_summary(draft.calls)
    details = draft.entry.get("details")
    return {
        **progress.pruned.to_result(), **calls,
        "tokensBefore": draft.entry.get("tokensBefore"),
        "facts": details.get("facts") if isinstance(details, dict) else None,
        "durationMs": ctx.control.elapsed_ms(),
        **({_draft_key(progress, draft): draft.base.job_id} if draft.base else {}),
    }


def _draft_key(progress: Progress, draft: Draft) -> str:
    """How the job used a draft: waited for and committed (``joinedDraft``), a stored one whose
    cut is the agent's cut of the path committed as it is (``exactDraft``), or extended."""
    if not draft.joined:
        return "extendedDraft"
    return "joinedDraft" if progress.joined else "exactDraft"


def _prime(ctx: JobContext, snap: PathSnapshot) -> None:
    """A session this process has not seen: the text its plan will tokenize is counted ahead
    on several threads (``prime_counts``): its messages, the tool results before the last
    compaction for the prune pass (automatic reasons), and the long parts of the summary
    prompt's conversation: both shorten a cold plan (``make bench``). Counts another
    worker stored for the session are loaded first, and what this job had to tokenize is
    stored for the next (``Runtime.token_counts``). A session seen before is counted as the
    plan goes unless at least half of it is new (``worth_priming``)."""
    if not worth_priming(snap.parsed_chars, snap.stored_chars):
        return
    shared = ctx.rt.token_counts if ctx.tokenizer.shares_counts else None
    loaded = shared.load(ctx.session_id) if shared is not None else []
    ctx.tokenizer.preload(loaded)
    counted: list[tuple[bytes, int]] = []
    prime_counts(ctx.tokenizer, snap.path, prune=_reason(ctx) is not CompactReason.MANUAL,
                 counted=counted, caches=ctx.rt.plan_caches)
    if shared is not None and counted:
        shared.save(ctx.session_id, counted)
    metrics.observe_cold_counts(len(loaded), len(counted))


def _round(ctx: JobContext, progress: Progress,
           round_no: int) -> tuple[Draft | None, CommitOutcome | None] | None:
    """One snapshot: prune pass (automatic reasons), plan, summarize, commit. None = stale.
    The snapshot is the end of the leaf's path the plan needs (``_reach``); the plan runs on it
    as pruned (appends since stay after the compaction: the commit goes under the current
    leaf)."""
    prune = _reason(ctx) is not CompactReason.MANUAL
    snap = ctx.load_path(_reach(ctx, prune))
    _prime(ctx, snap)
    path: Sequence[Entry] = snap.path
    joined = _joined(ctx, progress, path)
    if joined is not None:  # the joined draft fits: committed as it is (no prune pass)
        return _commit(ctx, progress, snap.leaf_id, joined, round_no)
    if prune:
        step = prune_pass(ctx, snap, round_no, own_effect=False)
        if step.stale:
            return None
        if step.pruned_entry_ids:
            progress.pruned = step
            path = step.path or path
    prep, base = _plan(ctx, path)
    if prep is None:
        return (None, None)
    draft = replace(_draft(ctx, prep, path), base=base)
    return _commit(ctx, progress, snap.leaf_id, draft, round_no)


def _commit(ctx: JobContext, progress: Progress, leaf_id: str | None, draft: Draft,
            round_no: int) -> tuple[Draft | None, CommitOutcome | None] | None:
    ctx.control.check()
    result = _result(ctx, progress, draft)
    outcome = ride_out(ctx.control, "commit", lambda: ctx.rt.commits.append_entry(
        ctx.job_id, leaf_id, draft.entry, result))
    return (draft, outcome) if settle(ctx, outcome, "compaction", round_no) else None


def _joined(ctx: JobContext, progress: Progress, path: Sequence[Entry]) -> Draft | None:
    """The draft of the speculative job this one joined, as it is, when it fits the path (with
    the agent's cut: when its cut is the agent's cut of the path); or, with the agent's cut, the
    stored draft the client left (``moved``) when its cut still is."""
    if progress.joined is None:
        found = stored_entry(ctx, path)
    else:
        found = joined_entry(ctx, path, progress.joined)
    if found is None:
        return None
    entry, stored = found
    usage, cost = stored.get("usage"), stored.get("costUsd")
    base = DraftBase(job_id=str(stored.get("jobId") or ""),
                     usage=usage if isinstance(usage, dict) else {},
                     path=tuple(path), usage_start=0,
                     cost_usd=float(cost) if isinstance(cost, int | float) else 0.0)
    return Draft(entry, bool(entry.get("fromExtension")), path, base=base, joined=True)


def run_compact(ctx: JobContext) -> JobSuccess:
    ctx.publish_start()
    check_loop(ctx)  # before any model call
    progress = Progress(joined=join_running_draft(ctx))  # a draft in flight: wait for it
    if progress.joined is not None:
        ctx.first_read = None  # read before the wait: the draft fits the session as it is now
    draft, outcome = with_replans(ctx, "compaction", lambda n: _round(ctx, progress, n))
    if draft is None or outcome is None:
        # Nothing to compact: the reference ends with no result and no retry.
        result = {**progress.pruned.to_result(), "durationMs": ctx.control.elapsed_ms()}
        return JobSuccess(result=result, event={"result": result, "will_retry": False})
    ride_out(ctx.control, "count", lambda: count_compaction(ctx))
    entry = outcome.entry or ride_out(ctx.control, "read entry", lambda: ctx.rt.commits.entry(
        ctx.session_id, outcome.entry_id or "")) or {}
    tokens_after = _tokens_after(ctx, draft.path, entry) if entry else None
    ineffective = is_ineffective(ctx, tokens_after)
    observe_stall(ctx.record, "job")
    ctx.rt.hooks.compact_done(entry, draft.from_extension, session_id=ctx.session_id)
    announce = ctx.announce(
        EventType.SESSION_COMPACT, entry=entry, from_extension=draft.from_extension,
        tokens_before=entry.get("tokensBefore"), tokens_after=tokens_after,
        ineffective=ineffective)
    model, usage, _ = calls_summary(draft.calls)
    result = {**_result(ctx, progress, draft), "tokensAfter": tokens_after,
              "ineffective": ineffective}
    metrics.observe_facts("compaction", result["facts"])
    return JobSuccess(entry=entry, result=result, model=model, usage=usage, event={
        "tokens_before": entry.get("tokensBefore"), "tokens_after": tokens_after,
        "from_extension": draft.from_extension, "ineffective": ineffective, "result": result,
    }, draft_usage=_drafts_used(ctx, draft.base, joined=draft.joined),
        draft_cost_usd=draft.base.cost_usd if draft.base else None, announce=announce)


def _drafts_used(ctx: JobContext, base: DraftBase | None, *,
                 joined: bool = False) -> TokenUsage | None:
    """A committed compaction built on a stale draft (or committing a joined one as it is) used
    that draft's tokens (counted apart); a stale draft it could not build on was thrown away
    after all."""
    if base is None:
        if ctx.record.draft_discarded in ("grown", "moved"):
            metrics.observe_draft("discarded", ctx.record.draft_discarded)
        return None
    used = draft_tokens(base.usage)
    metrics.observe_draft("applied" if joined else "extended")
    metrics.observe_draft_tokens("used", used)
    return used
