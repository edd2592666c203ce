"""An automatic compaction joins the session's draft still in flight (docs/instant-compaction.md,
"Instant compaction"), instead of starting over.

A threshold or overflow request without instructions finds no draft to apply while a worker
still computes one for the session (its speculative job is ``running``): its job waits for that
job to end (bounded by its own deadline and cancel), then commits the draft as it is when it fits
the request's line (no model call, no prune pass: as the client's apply), else builds on it (the
stale draft is extended over the span since its snapshot: ``worker.compaction.extension``).
A request with the agent's own cut (summaryFormat ``pi-*``) commits it as it is only when its
cut is the agent's cut of the current path (``draft_is_exact``: the same state, or a state whose
plan keeps from the same entry and splits the same turn), whether it fits or not (the agent's
own compaction would keep as much), else extends it; such a stored draft the client's apply
left (``moved``) is committed as it is by the job on the same condition (:func:`stored_entry`).
It waits only for a draft in flight that will be exact (its snapshot leaf, on the speculative
job's record: ``Drafts.planned_on``): waiting for one that will not would cost the wait and the
summary of the gap, slower than the agent alone.

A draft whose plan summarised nothing (the cut at the first message: pi 0.73's "No prior
history.") would keep the whole context: none is stored (:func:`keeps_everything`), so none is
ever applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from api_client.contract.agent_settings import plan_key
from api_client.contract.job_enums import CompactReason
from api_client.contract.session import CompactionEntry, Entry, JsonObject, parse_entry
from api_client.contract.session.context import context_messages, last_compaction_index
from api_client.contract.wire import now_iso
from worker.compaction import Preparation, prepare_compaction
from worker.compaction.agent_cut import PI_VERSIONS
from worker.compaction.extension import draft_is_exact, same_cut
from worker.service._job_context import JobContext
from worker.service._loop_guard import fit_threshold

__all__ = ["join_running_draft", "joined_entry", "keeps_everything", "stored_entry"]

log = logging.getLogger("worker.service")

_JOIN_POLL_S = 0.05  # how often a joining job looks whether the draft job ended


def keeps_everything(prep: Preparation) -> bool:
    """Nothing before the cut to summarise: a compaction of this plan keeps the whole context."""
    return not prep.messages_to_summarize and not prep.turn_prefix_messages


def _may_join(ctx: JobContext) -> bool:
    return (ctx.rt.drafts is not None and not ctx.record.instructions
            and ctx.record.reason in (CompactReason.THRESHOLD, CompactReason.OVERFLOW))


def join_running_draft(ctx: JobContext) -> str | None:
    """Wait for the session's speculative job a worker runs now; its id once it ended (None:
    there was none to wait for). The job's deadline or cancel ends the wait (and the job)."""
    drafts = ctx.rt.drafts
    if drafts is None or not _may_join(ctx):
        return None
    joined = drafts.running(ctx.session_id)
    if joined is None:
        return None
    if ctx.cut_version in PI_VERSIONS and not _will_be_exact(ctx, joined):
        log.info("job %s: does not wait for the draft job %s (planned on an earlier state: "
                 "its cut is not the agent's now)", ctx.job_id, joined)
        return None
    log.info("job %s: joins the draft job %s in flight", ctx.job_id, joined)
    while drafts.running(ctx.session_id) == joined:
        ctx.control.check()
        time.sleep(_JOIN_POLL_S)
    return joined


def _will_be_exact(ctx: JobContext, joined: str) -> bool:
    """With the agent's cut: will the draft in flight be exact for the session's state now? Its
    snapshot's plan keeps from the entry the plan of the current path keeps from and splits
    the same turn (one not said yet is planned on the state now: the agent appends nothing
    while it waits for its compaction). One that will not is not waited for: the job would
    wait for it and then summarise the gap all the same, slower than the agent alone."""
    drafts, version = ctx.rt.drafts, str(ctx.cut_version)
    leaf = drafts.snapshot_of(joined) if drafts is not None else None
    if leaf is None:
        return True
    snap = ctx.rt.sessions.load(ctx.session_id)
    if leaf == snap.leaf_id:
        return True
    path = snap.session.tree().path_to(snap.leaf_id)
    at = next((i for i in range(len(path) - 1, -1, -1) if path[i].id == leaf), None)
    if at is None:
        return False
    settings, tokenizer = ctx.compaction_settings, ctx.tokenizer
    then = prepare_compaction(path[:at + 1], settings, tokenizer, version=version)
    own = prepare_compaction(path, settings, tokenizer, version=version)
    return then is not None and own is not None and same_cut(then, own)


def joined_entry(ctx: JobContext, path: Sequence[Entry],
                 joined: str) -> tuple[JsonObject, Mapping[str, Any]] | None:
    """The compaction entry of the joined job's draft, and the draft, when it is stored and fits
    ``path`` as the client's apply would take it (its snapshot leaf on the path, no compaction
    since, the compacted context under the request's line; with the agent's cut: its cut the
    agent's cut of ``path``), else None (the job plans, building on it)."""
    drafts = ctx.rt.drafts
    draft = drafts.get(ctx.session_id) if drafts is not None else None
    if not draft or draft.get("jobId") != joined:
        return None
    return _as_is(ctx, path, draft)


def stored_entry(ctx: JobContext,
                 path: Sequence[Entry]) -> tuple[JsonObject, Mapping[str, Any]] | None:
    """With the agent's own cut: the session's stored draft as it is, when its cut is the agent's
    cut of ``path`` (the client's apply took it for ``moved``), else None."""
    drafts = ctx.rt.drafts
    if drafts is None or not _may_join(ctx) or ctx.cut_version not in PI_VERSIONS:
        return None
    draft = drafts.get(ctx.session_id)
    return None if not draft else _as_is(ctx, path, draft)


def _as_is(ctx: JobContext, path: Sequence[Entry],
           draft: Mapping[str, Any]) -> tuple[JsonObject, Mapping[str, Any]] | None:
    if not isinstance(draft.get("entry"), dict):
        return None
    if draft.get("agentKey", "") != plan_key(ctx.record.agent):
        return None  # planned with other agent settings than this request's
    ids = [e.id for e in path]
    leaf, first_kept = draft.get("snapshotLeafId"), draft["entry"].get("firstKeptEntryId")
    if leaf not in ids or first_kept not in ids[:ids.index(leaf) + 1]:
        return None
    if last_compaction_index(path) > ids.index(leaf):
        return None  # compacted since the snapshot
    body = {k: v for k, v in draft["entry"].items() if k not in ("type", "timestamp")}
    entry: JsonObject = {"type": "compaction", "timestamp": now_iso(), **body}
    version = ctx.cut_version
    if version in PI_VERSIONS:  # the agent's cut of this path, or not at all
        exact = draft_is_exact(path, draft, ctx.compaction_settings, ctx.tokenizer, str(version))
        return (entry, draft) if exact else None
    return (entry, draft) if _tokens_after(ctx, path, entry) <= _line(ctx, draft) else None


def _line(ctx: JobContext, draft: Mapping[str, Any]) -> int:
    """The request's line (its window named), else the one the draft was computed for."""
    own = draft.get("threshold")
    if ctx.record.context_window or not isinstance(own, int):
        return fit_threshold(ctx)
    return own


def _tokens_after(ctx: JobContext, path: Sequence[Entry], entry: JsonObject) -> int:
    laid = parse_entry({**entry, "id": "draft", "parentId": path[-1].id if path else None})
    assert isinstance(laid, CompactionEntry)
    return ctx.tokenizer.total(m.message for m in context_messages([*path, laid]))
