"""Speculative compaction (README "Instant compaction"): plan and summarize exactly as a
threshold compaction (hooks, models, chunking, fallback: :mod:`worker.service._compact_job`) on a
snapshot, then store a draft beside the session instead of committing. The session is never
written. The prune pass does not run: the draft is planned on the path as stored, and the
threshold compaction that applies it skips its own prune pass (``client.prune`` stays available).

Also the notify task of an applied draft: the client committed the entry, a worker runs the
``session_compact`` hooks.
"""

from __future__ import annotations

import logging
from typing import Any

from api_client.contract.errors import ConfigurationError
from api_client.contract.wire import EventType, JobRecord
from worker import metrics
from worker.service._compact_job import _draft, _plan, _tokens_after
from worker.service._job_context import JobContext, JobSuccess, calls_summary
from worker.service._job_stops import JobCancelled
from worker.service._loop_guard import check_loop, guard_threshold, observe_stall
from worker.service.ports import Drafts, Runtime
from worker.store.draft_store import draft_json

__all__ = ["count_discarded", "run_draft_applied", "run_speculative"]

log = logging.getLogger("worker.service")


def _drafts(rt: Runtime) -> Drafts:
    if rt.drafts is None:
        raise ConfigurationError("this worker's runtime has no draft store")
    return rt.drafts


def run_speculative(ctx: JobContext) -> JobSuccess:
    """Compute and store a draft; the job's result says what was stored (no entry)."""
    ctx.publish(EventType.COMPACTION_START)
    check_loop(ctx)  # a session in a compaction loop gets no more drafts: before any model call
    snap = ctx.rt.sessions.load(ctx.session_id)
    path = snap.session.tree().path_to(snap.leaf_id)
    prep = _plan(ctx, path)
    if prep is None or snap.leaf_id is None:
        empty = {"draft": False, "durationMs": ctx.control.elapsed_ms()}
        return JobSuccess(result=empty, event={"result": empty, "will_retry": False})
    draft = _draft(ctx, prep, path)
    ctx.control.check()
    entry = {**draft.entry, "id": "draft", "parentId": snap.leaf_id}
    tokens_after = _tokens_after(ctx, path, entry)
    tokens = int(draft.entry.get("tokensBefore") or 0)
    text = draft_json(ctx.job_id, snap.leaf_id, snap.revision, draft.entry,
                      from_extension=draft.from_extension, tokens_after=tokens_after,
                      snapshot_entries=len(path), snapshot_tokens=tokens,
                      ineffective_above=guard_threshold(ctx))
    saved = _drafts(ctx.rt).save(ctx.job_id, text)
    if saved == "cancelled":
        raise JobCancelled()
    metrics.observe_draft("computed")
    model, usage, calls = calls_summary(draft.calls)
    result: dict[str, Any] = {"draft": saved == "saved", "snapshotLeafId": snap.leaf_id,
              "snapshotRevision": snap.revision, "tokensBefore": draft.entry.get("tokensBefore"),
              "tokensAfter": tokens_after, "durationMs": ctx.control.elapsed_ms(), **calls}
    ctx.publish(EventType.DRAFT_SAVED, result=result, tokens_before=result["tokensBefore"])
    return JobSuccess(result=result, model=model, usage=usage, event={
        "result": result, "will_retry": False, "tokens_before": result["tokensBefore"]})


def count_discarded(record: JobRecord) -> None:
    """A job the client ran because its draft was discarded: count the cause."""
    if record.draft_discarded:
        metrics.observe_draft("discarded", record.draft_discarded)


def run_draft_applied(rt: Runtime, job_id: str) -> dict[str, object]:
    """The ``session_compact`` hooks of a draft a client applied (the record holds the entry)."""
    record = rt.jobs.get(job_id)
    if not record.entry or not (record.result or {}).get("fromDraft"):
        return {"jobId": job_id, "state": "ignored"}
    rt.hooks.compact_done(record.entry, bool(record.entry.get("fromExtension")),
                          session_id=record.session_id)
    metrics.observe_draft("applied")
    observe_stall(record, "draft")
    if (record.result or {}).get("ineffective"):
        metrics.observe_loop_guard("ineffective", record.reason)
    log.info("job %s: session_compact hooks ran for an applied draft", job_id)
    return {"jobId": job_id, "state": "notified"}
