"""When should a platform enqueue a compaction? Pure, stdlib only (no settings import needed)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["precompute_band", "precompute_horizon", "precompute_lead", "should_compact",
           "should_precompute"]

_DEFAULT_RESERVE = 16_384


class _CompactionPolicy(Protocol):
    @property
    def reserve_tokens(self) -> int: ...


def should_compact(context_tokens: int, context_window: int,
                   settings: _CompactionPolicy | None = None) -> bool:
    """docs/rules.md "Threshold and overflow checks": threshold compaction is due when the context
    holds strictly
    more than ``context_window - reserve_tokens`` tokens.

    A window ≤ 0 (unknown) never triggers, and neither do disabled settings
    (``compaction_enabled`` / ``enabled`` false). ``settings`` is a :class:`ClientSettings` or
    anything with ``reserve_tokens``; None uses the default of
    docs/rules.md "Settings and constants" (16 384). The caller still
    applies the Q17 guards it alone can see (no threshold check right after a compaction).
    """
    if settings is not None:
        enabled = getattr(settings, "compaction_enabled", getattr(settings, "enabled", True))
        if not enabled:
            return False
    if context_window <= 0:
        return False
    reserve = _DEFAULT_RESERVE if settings is None else settings.reserve_tokens
    return context_tokens > context_window - reserve


# oh-my-pi's band, which the pi extension computes too (integrations/pi/src/precompute.ts).
BAND_SHARE, BAND_MIN_TOKENS, BAND_MAX_TOKENS = 0.125, 8_192, 32_000
# The farthest below the threshold a draft starts, as a share of it (or the band, if wider).
LEAD_MAX_SHARE = 0.5


def precompute_band(threshold: int) -> int:
    """Width of the precompute band below ``threshold``: clamp(0.125 × threshold, 8 192,
    32 000) tokens."""
    return int(max(BAND_MIN_TOKENS, min(BAND_MAX_TOKENS, BAND_SHARE * threshold)))


def should_precompute(context_tokens: int, context_window: int,
                      settings: _CompactionPolicy | None = None) -> bool:
    """Is it time for a speculative compaction? True inside the band just below the threshold
    (``threshold - band < context_tokens <= threshold``, threshold = window - reserve): above
    it :func:`should_compact` holds instead. Off with ``precompute_enabled`` false, disabled
    compaction or an unknown window (≤ 0)."""
    if settings is not None:
        enabled = getattr(settings, "compaction_enabled", getattr(settings, "enabled", True))
        if not enabled or not getattr(settings, "precompute_enabled", True):
            return False
    if context_window <= 0:
        return False
    reserve = _DEFAULT_RESERVE if settings is None else settings.reserve_tokens
    threshold = context_window - reserve
    if threshold <= 0:
        return False
    return threshold - precompute_band(threshold) < context_tokens <= threshold


# A draft's time varies with the span it summarises and the queue it waits in: start it half
# as early again as the last one took, so a slower one still lands before the threshold.
LEAD_MARGIN = 1.5


def precompute_horizon(threshold: int) -> int:
    """The farthest below ``threshold`` a draft may start: max(band, 0.5 × threshold) tokens.
    Below it observe needs no round trip."""
    return max(precompute_band(threshold), int(LEAD_MAX_SHARE * threshold))


def precompute_lead(threshold: int, rate: float, draft_s: float | None,
                    settings: object | None = None) -> int:
    """How far below ``threshold`` a draft starts, in tokens: what the context grows (``rate``,
    tokens/s) while a draft is computed (``draft_s``: the session's last one took; None: the
    ``precompute_draft_s`` setting, 0 by default), × :data:`LEAD_MARGIN`; never less than the
    oh-my-pi band (its floor), never more than :func:`precompute_horizon`."""
    if draft_s is None:
        draft_s = getattr(settings, "precompute_draft_s", 0.0)
    projected = int(max(0.0, rate) * draft_s * LEAD_MARGIN)
    return max(precompute_band(threshold), min(projected, precompute_horizon(threshold)))
