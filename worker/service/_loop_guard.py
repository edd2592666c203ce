"""The fleet-wide loop guard (claude-code#24179, codex#36664: 74 compactions in 6 h).

Two checks, both settings (``loop_guard_*``):

* a compaction whose context after (summary + kept messages, as the next request sends it)
  stays above ``share × threshold`` is ``ineffective`` (threshold = window - reserve_tokens,
  :func:`api_client.should_compact`'s; window = the first model's, else ``context_window``);
* an automatic compaction (threshold, overflow) of a session that already had ``max`` of them
  committed within ``window_s`` fails with :class:`CompactionLoopError` before any model call.
  The counts live in Redis (``SessionKeys.compactions``); manual compactions do not count.
"""

from __future__ import annotations

from api_client.errors import CompactionLoopError
from api_client.wire import CompactReason
from worker.service._context import JobContext

__all__ = ["check_loop", "count_compaction", "guard_threshold", "is_ineffective"]

COUNTED = (CompactReason.THRESHOLD, CompactReason.OVERFLOW)


def _counted(ctx: JobContext) -> bool:
    return ctx.record.reason in COUNTED


def check_loop(ctx: JobContext) -> None:
    """Raise :class:`CompactionLoopError` when this automatic compaction would be one too many."""
    if not _counted(ctx):
        return
    s = ctx.rt.settings
    count = ctx.rt.jobs.recent_compactions(ctx.session_id, ctx.rt.clock.time(),
                                           s.loop_guard_window_s)
    if count >= s.loop_guard_max:
        err = CompactionLoopError.tripped(ctx.session_id, count, s.loop_guard_max,
                                          s.loop_guard_window_s)
        err.job_id = ctx.job_id
        raise err


def count_compaction(ctx: JobContext) -> None:
    """Count a committed automatic compaction (idempotent per job)."""
    if _counted(ctx):
        ctx.rt.jobs.count_compaction(ctx.session_id, ctx.job_id, ctx.rt.clock.time(),
                                     ctx.rt.settings.loop_guard_window_s)


def guard_threshold(ctx: JobContext) -> int:
    """``share × (window - reserve_tokens)`` tokens: a context above it after a compaction is
    ineffective (the agent will be back at the threshold within a turn or two)."""
    s = ctx.rt.settings
    window = (s.models[0].context_window if s.models else None) or s.context_window
    return int(s.loop_guard_share * (window - s.reserve_tokens))


def is_ineffective(ctx: JobContext, tokens_after: int | None) -> bool | None:
    """None when the context after is unknown (nothing committed)."""
    return None if tokens_after is None else tokens_after > guard_threshold(ctx)
