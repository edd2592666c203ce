"""The fleet-wide loop guard (claude-code#24179, codex#36664: 74 compactions in 6 h).

Two checks, both settings (``loop_guard_*``):

* a compaction whose context after (summary + kept messages, as the next request sends it)
  stays above ``share × threshold`` is ``ineffective`` (threshold = window - reserve_tokens,
  :func:`api_client.should_compact`'s; window = the first model's, else ``context_window``);
* an automatic compaction (threshold, overflow) of a session that already had ``max`` of them
  committed within ``window_s`` fails with :class:`CompactionLoopError` before any model call.
  The counts live in Redis (``SessionKeys.compactions``); manual compactions do not count.
  A draft a client applies is counted (and checked first) by apply_draft.lua in the same
  round trip; a speculative job of a session at the limit is refused here before its model
  calls.
"""

from __future__ import annotations

from datetime import UTC, datetime

from api_client.contract.errors import CompactionLoopError
from api_client.contract.job_enums import CompactReason
from api_client.contract.wire import JobRecord
from worker.observability import metrics
from worker.service._job_context import JobContext

__all__ = ["check_loop", "count_compaction", "fit_threshold", "guard_threshold", "is_ineffective",
           "observe_stall"]

COUNTED = (CompactReason.THRESHOLD, CompactReason.OVERFLOW)
# A speculative job of a looping session is refused too: its draft would be applied (counted)
# or refused at the client anyway, and it costs the model calls the guard exists to save.
REFUSED = (*COUNTED, CompactReason.SPECULATIVE)


def _counted(ctx: JobContext) -> bool:
    return ctx.record.reason in COUNTED


def check_loop(ctx: JobContext) -> None:
    """Raise :class:`CompactionLoopError` when this automatic compaction would be one too many."""
    if ctx.record.reason not in REFUSED:
        return
    s = ctx.rt.settings.client
    count = ctx.rt.jobs.recent_compactions(ctx.session_id, ctx.rt.clock.time(),
                                           s.loop_guard_window_s)
    if count >= s.loop_guard_max:
        err = CompactionLoopError.tripped(ctx.session_id, count, s.loop_guard_max,
                                          s.loop_guard_window_s)
        err.job_id = ctx.job_id
        metrics.observe_loop_guard("refused", ctx.record.reason)
        raise err


def count_compaction(ctx: JobContext) -> None:
    """Count a committed automatic compaction (idempotent per job)."""
    if _counted(ctx):
        ctx.rt.jobs.count_compaction(ctx.session_id, ctx.job_id, ctx.rt.clock.time(),
                                     ctx.rt.settings.client.loop_guard_window_s)


def fit_threshold(ctx: JobContext) -> int:
    """``window - reserve_tokens``: should_compact's threshold, the line a draft's context must
    stay under to be applied. The window is the agent's when the request named it
    (``compact(..., context_window=N)``; ``observe`` does), else the first model's, else
    ``context_window``; the reserve is the request's agent settings' when they name one."""
    s = ctx.rt.settings
    window = (ctx.record.context_window
              or (s.models[0].context_window if s.models else None) or s.context_window)
    return window - ctx.compaction_settings.reserve_tokens


def guard_threshold(ctx: JobContext) -> int:
    """``share × (window - reserve_tokens)`` tokens (:func:`fit_threshold`'s window): a context
    above it after a compaction is ineffective (the agent will be back at the threshold within
    a turn or two)."""
    return int(ctx.rt.settings.client.loop_guard_share * fit_threshold(ctx))


def is_ineffective(ctx: JobContext, tokens_after: int | None) -> bool | None:
    """None when the context after is unknown (nothing committed)."""
    if tokens_after is None:
        return None
    flag = tokens_after > guard_threshold(ctx)
    if flag:
        metrics.observe_loop_guard("ineffective", ctx.record.reason)
    return flag


def observe_stall(record: JobRecord, source: str, now: datetime | None = None) -> None:
    """The platform's wait (call → entry): a worker job's ``createdAt`` → its commit, or the
    client's measured ``stallMs`` of an applied draft."""
    if source == "draft":
        if record.stall_ms is not None:
            metrics.observe_stall(record.reason, source, record.stall_ms / 1000)
        return
    try:
        created = datetime.fromisoformat(record.created_at)
    except ValueError:
        return  # a record written by something else: no sample rather than a wrong one
    waited = ((now or datetime.now(UTC)) - created).total_seconds()
    metrics.observe_stall(record.reason, source, max(0.0, waited))
