"""Speculative compaction (docs/instant-compaction.md): plan and summarize exactly as a
threshold compaction (hooks, models, chunking, fallback: :mod:`worker.service._compact_job`) on a
snapshot, then store a draft beside the session instead of committing. The session is never
written. The prune pass does not run: the draft is planned on the path as stored, and the
threshold compaction that applies it skips its own prune pass (``client.prune`` stays available).

Also the notify task of an applied draft: the client committed the entry, a worker runs the
``session_compact`` hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from api_client.contract.agent_settings import plan_key
from api_client.contract.errors import ConfigurationError
from api_client.contract.job_enums import EventType
from api_client.contract.session import Entry
from api_client.contract.wire import JobRecord, TokenUsage
from worker.compaction.agent_cut import PI_VERSIONS
from worker.compaction.extension import draft_is_exact
from worker.observability import metrics
from worker.service._compact_job import _draft, _plan, _tokens_after, draft_tokens
from worker.service._draft_join import keeps_everything
from worker.service._job_context import JobContext, JobSuccess, calls_summary
from worker.service._job_stops import JobCancelled
from worker.service._loop_guard import check_loop, fit_threshold, guard_threshold, observe_stall
from worker.service.ports import Drafts, Runtime
from worker.store.draft_store import draft_json

__all__ = ["count_discarded", "run_draft_applied", "run_speculative"]

log = logging.getLogger("worker.service")


def _drafts(rt: Runtime) -> Drafts:
    if rt.drafts is None:
        raise ConfigurationError("this worker's runtime has no draft store")
    return rt.drafts


def run_speculative(ctx: JobContext) -> JobSuccess:
    """Compute and store a draft; the job's result says what was stored (no entry). A stale
    draft of the session (stored, no longer fitting) is extended, not redone; with the agent's
    own cut, one whose cut the turns since did not move is stored again for the current state
    (``carriedDraft``, no model call) and one whose cut moved is extended over the gap."""
    ctx.publish_start()
    check_loop(ctx)  # a session in a compaction loop gets no more drafts: before any model call
    snap = ctx.rt.sessions.load(ctx.session_id)
    path = snap.session.tree().path_to(snap.leaf_id)
    if ctx.cut_version in PI_VERSIONS and snap.leaf_id is not None:
        _drafts(ctx.rt).planned_on(ctx.job_id, snap.leaf_id)  # a joining job reads it
    kept = _still_exact(ctx, path, snap.leaf_id)
    if kept is not None and snap.leaf_id is not None:
        return _carry(ctx, snap.leaf_id, snap.revision, path, kept)
    prep, base = _plan(ctx, path)
    if prep is None or snap.leaf_id is None or keeps_everything(prep):
        # Nothing to summarise: a draft would keep the whole context (pi 0.73's "No prior
        # history." draft) and bring the next compaction at once; none is stored.
        empty = {"draft": False, "durationMs": ctx.control.elapsed_ms()}
        return JobSuccess(result=empty, event={"result": empty, "will_retry": False})
    draft = _draft(ctx, prep, path)
    ctx.control.check()
    entry = {**draft.entry, "id": "draft", "parentId": snap.leaf_id}
    tokens_after = _tokens_after(ctx, path, entry)
    model, usage, calls = calls_summary(draft.calls)
    own = None if usage is None else TokenUsage(
        input=usage.input, output=usage.output, cache_read=usage.cache_read,
        cache_write=usage.cache_write)
    spent = draft_tokens(own, base.usage if base else None) or TokenUsage()
    own_usd = calls.get("costUsd")
    spent_usd = None if own_usd is None and base is None else round(
        (own_usd or 0.0) + (base.cost_usd if base else 0.0), 8)
    text = draft_json(ctx.job_id, snap.leaf_id, snap.revision, draft.entry,
                      from_extension=draft.from_extension, tokens_after=tokens_after,
                      snapshot_entries=len(path),
                      snapshot_tokens=int(draft.entry.get("tokensBefore") or 0),
                      threshold=fit_threshold(ctx), usage=spent.to_wire(),
                      lead_ms=_lead_ms(ctx.record), base_job_id=base.job_id if base else None,
                      ineffective_above=guard_threshold(ctx), cost_usd=spent_usd,
                      agent_key=plan_key(ctx.record.agent))
    saved = _drafts(ctx.rt).save(ctx.job_id, text)
    if saved == "cancelled":
        raise JobCancelled()
    metrics.observe_draft("computed")
    if base is not None:
        metrics.observe_draft("extended")
    metrics.observe_draft_tokens("computed", own)
    result: dict[str, Any] = {"draft": saved == "saved", "snapshotLeafId": snap.leaf_id,
              "snapshotRevision": snap.revision, "tokensBefore": draft.entry.get("tokensBefore"),
              "tokensAfter": tokens_after, "durationMs": ctx.control.elapsed_ms(), **calls}
    if base is not None:
        result["extendedDraft"] = base.job_id
    ctx.publish(EventType.DRAFT_SAVED, result=result, tokens_before=result["tokensBefore"])
    return JobSuccess(result=result, model=model, usage=usage, draft_usage=own,
                      draft_cost_usd=own_usd, event={
        "result": result, "will_retry": False, "tokens_before": result["tokensBefore"]})


def _still_exact(ctx: JobContext, path: Sequence[Entry],
                 leaf: str | None) -> Mapping[str, Any] | None:
    """With the agent's own cut: the stored draft whose cut is still the agent's cut of
    ``path`` (planned on this state, or the turns since did not move it), else None."""
    drafts, version = ctx.rt.drafts, ctx.cut_version
    if drafts is None or version not in PI_VERSIONS or ctx.record.instructions:
        return None
    draft = drafts.get(ctx.session_id)
    if not draft or draft.get("agentKey", "") != plan_key(ctx.record.agent) or leaf is None:
        return None
    exact = draft_is_exact(path, draft, ctx.compaction_settings, ctx.tokenizer, str(version))
    return draft if exact else None


def _carry(ctx: JobContext, leaf: str, revision: int, path: Sequence[Entry],
           kept: Mapping[str, Any]) -> JobSuccess:
    """The stored draft, its cut unmoved, stored again for the current state: no model call."""
    body = dict(kept["entry"])
    tokens_after = _tokens_after(ctx, path, {**body, "id": "draft", "parentId": leaf})
    usage, cost = kept.get("usage"), kept.get("costUsd")
    text = draft_json(ctx.job_id, leaf, revision, body,
                      from_extension=bool(kept.get("fromExtension")), tokens_after=tokens_after,
                      snapshot_entries=len(path),
                      snapshot_tokens=int(body.get("tokensBefore") or 0),
                      threshold=fit_threshold(ctx), usage=usage if isinstance(usage, dict) else {},
                      lead_ms=_lead_ms(ctx.record), base_job_id=str(kept.get("jobId") or ""),
                      ineffective_above=guard_threshold(ctx),
                      cost_usd=float(cost) if isinstance(cost, int | float) else None,
                      agent_key=plan_key(ctx.record.agent))
    if _drafts(ctx.rt).save(ctx.job_id, text) == "cancelled":
        raise JobCancelled()
    result: dict[str, Any] = {"draft": True, "snapshotLeafId": leaf, "snapshotRevision": revision,
                              "tokensBefore": body.get("tokensBefore"),
                              "tokensAfter": tokens_after, "carriedDraft": kept.get("jobId"),
                              "durationMs": ctx.control.elapsed_ms()}
    ctx.publish(EventType.DRAFT_SAVED, result=result, tokens_before=result["tokensBefore"])
    return JobSuccess(result=result, event={
        "result": result, "will_retry": False, "tokens_before": result["tokensBefore"]})


def _lead_ms(record: JobRecord) -> int | None:
    """Enqueue → now: how long the draft took to be ready, the queue included (observe starts
    the next one that much ahead)."""
    try:
        created = datetime.fromisoformat(record.created_at)
    except ValueError:
        return None
    return max(0, int((datetime.now(UTC) - created).total_seconds() * 1000))


def count_discarded(record: JobRecord) -> None:
    """A job the client ran because its draft was discarded: count the cause. A stale draft
    (``grown``, ``moved``) is kept for the job to extend: counted when it ends
    (``_compact_job``)."""
    if record.draft_discarded and record.draft_discarded not in ("grown", "moved"):
        metrics.observe_draft("discarded", record.draft_discarded)


def run_draft_applied(rt: Runtime, job_id: str) -> dict[str, object]:
    """The ``session_compact`` hooks of a draft a client applied (the record holds the entry)."""
    record = rt.jobs.get(job_id)
    if not record.entry or not (record.result or {}).get("fromDraft"):
        return {"jobId": job_id, "state": "ignored"}
    rt.hooks.compact_done(record.entry, bool(record.entry.get("fromExtension")),
                          session_id=record.session_id)
    metrics.observe_draft("applied")
    metrics.observe_draft_tokens("used", record.draft_usage)
    observe_stall(record, "draft")
    if (record.result or {}).get("ineffective"):
        metrics.observe_loop_guard("ineffective", record.reason)
    log.info("job %s: session_compact hooks ran for an applied draft", job_id)
    return {"jobId": job_id, "state": "notified"}
