"""A compaction job (SPEC §12.2 manual, §12.4 automatic) on a Redis session."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.errors import AlreadyCompactedError, NothingToCompactError
from api_client.contract.session import Entry, JsonObject, SessionTree, parse_entry
from api_client.contract.snapshots import Snapshot
from api_client.contract.wire import CompactReason, EventType
from worker import metrics
from worker.compaction import (
    Preparation,
    build_session_context,
    compact,
    context_messages,
    no_plan_reason,
    prepare_compaction,
    prime_counts,
)
from worker.compaction.ledger import hook_compaction_with_facts
from worker.compaction.toolpairs import safe_first_kept_id
from worker.llm import SummaryResult
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
from worker.tokens import worth_priming

__all__ = ["run_compact"]


@dataclass(frozen=True)
class Draft:
    """A compaction entry ready to commit, and how it was made."""

    entry: JsonObject
    from_extension: bool
    path: Sequence[Entry]
    calls: tuple[SummaryResult, ...] = ()


@dataclass
class Progress:
    pruned: PruneStep = field(default_factory=PruneStep)


def _reason(ctx: JobContext) -> CompactReason:
    return ctx.record.reason or CompactReason.MANUAL


def _plan(ctx: JobContext, path: Sequence[Entry]) -> Preparation | None:
    prep = prepare_compaction(path, ctx.rt.compaction_settings, ctx.tokenizer)
    if prep is None and _reason(ctx) is CompactReason.MANUAL:
        # Automatic compaction ends quietly when there is nothing to do (SPEC §12.4 step 2).
        if no_plan_reason(path) == "already compacted":
            raise AlreadyCompactedError()
        raise NothingToCompactError()
    return prep


def _draft(ctx: JobContext, prep: Preparation, path: Sequence[Entry]) -> Draft:
    """Hooks, then the model (SPEC §12.2 steps 4-6)."""
    hooks, sid = ctx.rt.hooks, ctx.session_id
    before = hooks.before_compact(prep, path, ctx.record.instructions, ctx.control, session_id=sid)
    if before is not None and before.cancel:
        raise JobCancelled()
    if before is not None and before.compaction is not None:
        c = before.compaction
        summary, details, _ = hook_compaction_with_facts(
            prep, c["summary"], c.get("details"), ctx.rt.settings.fact_budget_tokens)
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
    outcome = compact(
        prep, ctx.summarizer, custom_instructions=ctx.record.instructions,
        prompt_override=extra.prompt if extra else None,
        extra_context=tuple(extra.context) if extra else (), cancel=ctx.control,
        fact_budget_tokens=ctx.rt.settings.fact_budget_tokens)
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
    }


def _prime(ctx: JobContext, snap: Snapshot) -> None:
    """A session this process has not seen: the text its plan will tokenize is counted ahead
    on several threads (``prime_counts``): its messages, the tool results before the last
    compaction for the prune pass (automatic reasons; before-compaction's cold plan 309-329 →
    240-270 ms), and the long parts of the summary prompt's conversation (median of 8 cold
    plans: large-session 250 → 209 ms, before-compaction 341 → 276 ms). Counts another
    worker stored for the session are loaded first, and what this job had to tokenize is
    stored for the next (``Runtime.token_counts``). A session seen before is counted as the
    plan goes unless at least half of it is new (``worth_priming``)."""
    if not worth_priming(snap.parsed_chars, snap.stored_chars):
        return
    shared = ctx.rt.token_counts if ctx.tokenizer.shares_counts else None
    loaded = shared.load(ctx.session_id) if shared is not None else []
    ctx.tokenizer.preload(loaded)
    counted: list[tuple[bytes, int]] = []
    prime_counts(ctx.tokenizer, snap.session.tree().path_to(snap.leaf_id),
                 prune=_reason(ctx) is not CompactReason.MANUAL, counted=counted)
    if shared is not None and counted:
        shared.save(ctx.session_id, counted)
    metrics.observe_cold_counts(len(loaded), len(counted))


def _round(ctx: JobContext, progress: Progress,
           round_no: int) -> tuple[Draft | None, CommitOutcome | None] | None:
    """One snapshot: prune pass (automatic reasons), plan, summarize, commit. None = stale."""
    snap: Snapshot = ctx.rt.sessions.load(ctx.session_id)
    _prime(ctx, snap)
    if _reason(ctx) is not CompactReason.MANUAL:
        step = prune_pass(ctx, snap, round_no, own_effect=False)
        if step.stale:
            return None
        if step.pruned_entry_ids:
            progress.pruned = step
            snap = ctx.rt.sessions.load(ctx.session_id)
    path = snap.session.tree().path_to(snap.leaf_id)
    prep = _plan(ctx, path)
    if prep is None:
        return (None, None)
    draft = _draft(ctx, prep, path)
    ctx.control.check()
    result = _result(ctx, progress, draft)
    outcome = ride_out(ctx.control, "commit", lambda: ctx.rt.commits.append_entry(
        ctx.job_id, snap.leaf_id, draft.entry, result))
    return (draft, outcome) if settle(ctx, outcome, "compaction", round_no) else None


def run_compact(ctx: JobContext) -> JobSuccess:
    ctx.publish(EventType.COMPACTION_START)
    check_loop(ctx)  # before any model call
    progress = Progress()
    draft, outcome = with_replans(ctx, "compaction", lambda n: _round(ctx, progress, n))
    if draft is None or outcome is None:
        # Nothing to compact: the reference ends with no result and no retry (§12.4 step 2).
        result = {**progress.pruned.to_result(), "durationMs": ctx.control.elapsed_ms()}
        return JobSuccess(result=result, event={"result": result, "will_retry": False})
    ride_out(ctx.control, "count", lambda: count_compaction(ctx))
    entry = outcome.entry or ride_out(ctx.control, "read entry", lambda: ctx.rt.commits.entry(
        ctx.session_id, outcome.entry_id or "")) or {}
    tokens_after = _tokens_after(ctx, draft.path, entry) if entry else None
    ineffective = is_ineffective(ctx, tokens_after)
    observe_stall(ctx.record, "job")
    ctx.rt.hooks.compact_done(entry, draft.from_extension, session_id=ctx.session_id)
    ride_out(ctx.control, "publish", lambda: ctx.publish(
        EventType.SESSION_COMPACT, entry=entry, from_extension=draft.from_extension,
        tokens_before=entry.get("tokensBefore"), tokens_after=tokens_after,
        ineffective=ineffective))
    model, usage, _ = calls_summary(draft.calls)
    result = {**_result(ctx, progress, draft), "tokensAfter": tokens_after,
              "ineffective": ineffective}
    metrics.observe_facts("compaction", result["facts"])
    return JobSuccess(entry=entry, result=result, model=model, usage=usage, event={
        "tokens_before": entry.get("tokensBefore"), "tokens_after": tokens_after,
        "from_extension": draft.from_extension, "ineffective": ineffective, "result": result,
    })
