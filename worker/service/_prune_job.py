"""Tool-output pruning (SPEC §8): the prune job, and the prune pass of automatic compactions."""

from __future__ import annotations

import json
from dataclasses import dataclass

from api_client.contract.session import dump_record
from api_client.contract.snapshots import Snapshot
from worker.compaction import PrunePlan, apply_prune, plan_prune
from worker.service._job_context import JobContext, JobSuccess
from worker.service._replan import settle, with_replans
from worker.store import CommitOutcome, CommitStatus, line_digest

__all__ = ["PruneStep", "prune_pass", "run_prune"]


@dataclass(frozen=True)
class PruneStep:
    """What one prune pass did; ``stale`` when it must be planned again on a fresh snapshot."""

    pruned_entry_ids: tuple[str, ...] = ()
    tokens_saved: int = 0
    stale: bool = False

    def to_result(self) -> dict[str, object]:
        return {"prunedEntryIds": list(self.pruned_entry_ids), "tokensSaved": self.tokens_saved}


def _rewrites(ctx: JobContext, snap: Snapshot,
              plan: PrunePlan) -> list[tuple[str, str, str]] | None:
    """(id, digest of the stored line, pruned line) per planned entry; None if a stored line no
    longer holds what was planned on (changed since the snapshot)."""
    by_id = snap.session.tree().by_id
    ids = list(plan.pruned_entry_ids)
    now_ms = int(ctx.rt.clock.time() * 1000)  # one shared prunedAt, as the reference does
    out: list[tuple[str, str, str]] = []
    for entry_id, line in zip(ids, ctx.rt.commits.lines(ctx.session_id, ids), strict=True):
        if line is None or json.loads(line) != by_id[entry_id].raw:
            return None
        raw = dict(by_id[entry_id].raw)
        raw["message"] = apply_prune(raw["message"], plan.token_counts[entry_id], now_ms)
        out.append((entry_id, line_digest(line), dump_record(raw)))
    return out


def prune_pass(ctx: JobContext, snap: Snapshot, round_no: int, *, own_effect: bool) -> PruneStep:
    """Plan on ``snap`` and rewrite the planned tool results in one atomic step."""
    path = snap.session.tree().path_to(snap.leaf_id)
    plan = plan_prune(path, ctx.tokenizer)
    if not plan.pruned_entry_ids:
        return PruneStep()
    step = PruneStep(plan.pruned_entry_ids, plan.tokens_saved)
    rewrites = _rewrites(ctx, snap, plan)
    if rewrites is None:
        settle(ctx, CommitOutcome(CommitStatus.STALE), "prune", round_no)
        return PruneStep(stale=True)
    ctx.control.check()
    result = {**step.to_result(), "durationMs": ctx.control.elapsed_ms()} if own_effect else None
    outcome = ctx.rt.commits.rewrite(ctx.job_id, rewrites, result, snapshot_leaf=snap.leaf_id)
    if not settle(ctx, outcome, "prune", round_no):
        return PruneStep(stale=True)
    if outcome.status is CommitStatus.DUPLICATE:
        return _earlier(ctx, step)
    return step


def _earlier(ctx: JobContext, planned: PruneStep) -> PruneStep:
    """An earlier delivery pruned already: report what it recorded."""
    record = ctx.rt.jobs.get(ctx.job_id)
    done = record.result or {}
    return PruneStep(tuple(done.get("prunedEntryIds", planned.pruned_entry_ids)),
                     int(done.get("tokensSaved", planned.tokens_saved)))


def run_prune(ctx: JobContext) -> JobSuccess:
    def attempt(round_no: int) -> PruneStep | None:
        step = prune_pass(ctx, ctx.rt.sessions.load(ctx.session_id), round_no, own_effect=True)
        return None if step.stale else step

    step = with_replans(ctx, "prune", attempt)
    result = {**step.to_result(), "durationMs": ctx.control.elapsed_ms()}
    return JobSuccess(result=result, event={"result": result})
