"""Tool-output pruning (docs/compaction.md "Pruning"): the prune job, and the prune pass of
automatic compactions."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from api_client.contract.session import Entry, dump_record, parse_entry
from worker.compaction import PrunePlan, apply_prune, plan_prune
from worker.compaction.reach import prune_reached
from worker.service._job_context import JobContext, JobSuccess
from worker.service._replan import settle, with_replans
from worker.store import CommitStatus
from worker.store.paths import PathSnapshot

__all__ = ["PruneStep", "prune_pass", "run_prune"]

# Another job is rewriting the session's lines in steps (a large prune takes tens of ms): wait
# this long before planning again on what it wrote.
_BUSY_PAUSE_S = 0.1


@dataclass(frozen=True)
class PruneStep:
    """What one prune pass did; ``stale`` when it must be planned again on a fresh snapshot.
    ``path``: the snapshot's path with the pruned results rewritten (a compaction plans on it
    without reading the session again)."""

    pruned_entry_ids: tuple[str, ...] = ()
    tokens_saved: int = 0
    stale: bool = False
    path: tuple[Entry, ...] = ()

    def to_result(self) -> dict[str, object]:
        return {"prunedEntryIds": list(self.pruned_entry_ids), "tokensSaved": self.tokens_saved}


def _rewrites(path: Sequence[Entry], plan: PrunePlan,
              now_ms: int) -> tuple[list[tuple[str, str]], dict[str, Entry]]:
    """(id, pruned line) per planned entry, and the pruned entries by id."""
    planned = set(plan.pruned_entry_ids)
    lines: list[tuple[str, str]] = []
    pruned: dict[str, Entry] = {}
    for entry in path:
        if entry.id in planned:
            raw = dict(entry.raw)
            raw["message"] = apply_prune(raw["message"], plan.token_counts[entry.id], now_ms)
            lines.append((entry.id, dump_record(raw)))
            pruned[entry.id] = parse_entry(raw)
    return lines, pruned


def prune_pass(ctx: JobContext, snap: PathSnapshot, round_no: int, *,
               own_effect: bool) -> PruneStep:
    """Plan on ``snap`` and rewrite the planned tool results as one (``Commits.rewrite``)."""
    plan = plan_prune(snap.path, ctx.tokenizer)
    if not plan.pruned_entry_ids:
        return PruneStep(path=tuple(snap.path))
    step = PruneStep(plan.pruned_entry_ids, plan.tokens_saved)
    now_ms = int(ctx.rt.clock.time() * 1000)  # one shared prunedAt, as the reference does
    rewrites, pruned = _rewrites(snap.path, plan, now_ms)
    ctx.control.check()
    result = {**step.to_result(), "durationMs": ctx.control.elapsed_ms()} if own_effect else None
    # The newest pruned result: no result up to it is left to prune (the next plan's reach).
    outcome = ctx.rt.commits.rewrite(ctx.job_id, rewrites, result, rewrites_seen=snap.rewrites,
                                     snapshot_leaf=snap.leaf_id,
                                     pruned_through=plan.pruned_entry_ids[-1])
    if outcome.status is CommitStatus.BUSY:
        time.sleep(_BUSY_PAUSE_S)
    if not settle(ctx, outcome, "prune", round_no):
        return PruneStep(stale=True)
    if outcome.status is CommitStatus.DUPLICATE:
        return _earlier(ctx, step)
    return PruneStep(step.pruned_entry_ids, step.tokens_saved,
                     path=tuple(pruned.get(e.id, e) for e in snap.path))


def _earlier(ctx: JobContext, planned: PruneStep) -> PruneStep:
    """An earlier delivery pruned already: report what it recorded."""
    record = ctx.rt.jobs.get(ctx.job_id)
    done = record.result or {}
    return PruneStep(tuple(done.get("prunedEntryIds", planned.pruned_entry_ids)),
                     int(done.get("tokensSaved", planned.tokens_saved)))


def run_prune(ctx: JobContext) -> JobSuccess:
    def attempt(round_no: int) -> PruneStep | None:
        snap = ctx.load_path(prune_reached)  # the first from what the start read
        step = prune_pass(ctx, snap, round_no, own_effect=True)
        return None if step.stale else step

    step = with_replans(ctx, "prune", attempt)
    result = {**step.to_result(), "durationMs": ctx.control.elapsed_ms()}
    return JobSuccess(result=result, event={"result": result})
