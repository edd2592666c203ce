"""A branch-summary job: navigateTree (docs/compaction.md "Branch navigation") from the current leaf
to a target, with summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api_client.contract.errors import InvalidRequestError
from api_client.contract.job_enums import EventType
from api_client.contract.session import JsonObject
from worker.compaction import (
    branch_destination,
    collect_entries_for_branch_summary,
    summarize_branch,
)
from worker.compaction.summarize import branch_max_tokens
from worker.hooks import TreePreparation
from worker.llm import SummaryResult
from worker.observability import metrics
from worker.service._job_context import JobContext, JobSuccess, branch_summary_entry, calls_summary
from worker.service._job_stops import JobCancelled
from worker.service._outage import ride_out
from worker.service._replan import settle, with_replans
from worker.store import CommitOutcome

__all__ = ["run_branch"]


@dataclass(frozen=True)
class Move:
    old_leaf: str | None
    destination: str | None
    entry: JsonObject | None          # the branch_summary to write, None: only move the leaf
    from_extension: bool | None
    calls: tuple[SummaryResult, ...] = ()
    noop: bool = False                # target == leaf: nothing happens, no hooks


def _context_window(ctx: JobContext) -> int:
    models = ctx.rt.settings.models
    window = models[0].context_window if models else None
    return window or ctx.rt.settings.context_window


def _summary(ctx: JobContext,
             prep: TreePreparation) -> tuple[str | None, Any, bool, tuple[SummaryResult, ...]]:
    """(text, details, fromExtension, model calls): a hook's summary first, else the model."""
    hook = ctx.rt.hooks.before_tree(prep, ctx.control, session_id=ctx.session_id)
    if hook is not None and hook.cancel:
        raise JobCancelled()
    if hook is not None and hook.summary is not None:
        return hook.summary["summary"], hook.summary.get("details"), True, ()
    if not prep.entries_to_summarize:
        return None, None, False, ()
    ctx.control.check()
    agent = ctx.record.agent  # the agent's summary format and max tokens (docs/compaction.md)
    outcome = summarize_branch(
        prep.entries_to_summarize, ctx.summarizer, tokenizer=ctx.tokenizer,
        context_window=_context_window(ctx), reserve_tokens=ctx.branch_reserve_tokens,
        custom_instructions=ctx.record.instructions, cancel=ctx.control,
        fact_budget_tokens=ctx.rt.settings.fact_budget_tokens, caches=ctx.rt.plan_caches,
        summary_format=agent.summary_format if agent else None,
        max_tokens=branch_max_tokens(agent))
    return outcome.summary, outcome.details(), False, outcome.calls


def _plan(ctx: JobContext, target: str) -> Move:
    snap = ctx.rt.sessions.load(ctx.session_id)
    tree, old_leaf = snap.session.tree(), snap.leaf_id
    tree.get(target)  # EntryNotFoundError: "Entry <id> not found"
    if target == old_leaf:
        return Move(old_leaf, old_leaf, None, None, noop=True)
    collected = collect_entries_for_branch_summary(tree, old_leaf, target)
    prep = TreePreparation(target, old_leaf, collected.common_ancestor_id, collected.entries, True)
    text, details, from_ext, calls = _summary(ctx, prep)
    destination = branch_destination(tree, target)
    entry = None
    if text:
        entry = branch_summary_entry(destination=destination, summary=text, details=details,
                                     from_extension=from_ext)
    return Move(old_leaf, destination, entry, from_ext if entry else None, calls)


def _result(ctx: JobContext, move: Move) -> dict[str, Any]:
    _, _, calls = calls_summary(move.calls)
    details = move.entry.get("details") if move.entry else None
    return {**calls, "oldLeafId": move.old_leaf, "newLeafId": move.destination,
            "facts": details.get("facts") if isinstance(details, dict) else None,
            "durationMs": ctx.control.elapsed_ms()}


def _round(ctx: JobContext, target: str, round_no: int) -> tuple[Move, CommitOutcome | None] | None:
    move = _plan(ctx, target)
    if move.destination == move.old_leaf and move.entry is None:
        return move, None  # already there: nothing changes
    ctx.control.check()
    result = _result(ctx, move)
    outcome = ride_out(ctx.control, "commit", lambda: ctx.rt.commits.branch(
        ctx.job_id, move.old_leaf, move.destination, move.entry, result))
    return (move, outcome) if settle(ctx, outcome, "branch summary", round_no) else None


def run_branch(ctx: JobContext) -> JobSuccess:
    target = ctx.record.target_id
    if not target:
        raise InvalidRequestError("a branch summary needs a target entry id")
    move, outcome = with_replans(ctx, "branch summary", lambda n: _round(ctx, target, n))
    entry = None
    if outcome is not None and outcome.entry_id:
        entry_id = outcome.entry_id
        entry = outcome.entry or ride_out(ctx.control, "read entry", lambda: ctx.rt.commits.entry(
            ctx.session_id, entry_id))
    new_leaf = outcome.entry_id if outcome is not None and outcome.entry_id else move.destination
    if entry is not None:
        done = entry
        ride_out(ctx.control, "publish", lambda: ctx.publish(
            EventType.BRANCH_SUMMARY, entry=done, from_extension=move.from_extension))
    if not move.noop:
        ctx.rt.hooks.tree_done(new_leaf, move.old_leaf, entry, move.from_extension,
                               session_id=ctx.session_id)
    model, usage, _ = calls_summary(move.calls)
    result = {**_result(ctx, move), "newLeafId": new_leaf}
    metrics.observe_facts("branch_summary", result["facts"])
    return JobSuccess(entry=entry, result=result, model=model, usage=usage, event={
        "old_leaf_id": move.old_leaf, "new_leaf_id": new_leaf,
        "from_extension": move.from_extension, "result": result,
    })
