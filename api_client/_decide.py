"""When should a platform enqueue a compaction? Pure, stdlib only (no settings import needed)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["should_compact"]

_DEFAULT_RESERVE = 16_384


class _CompactionPolicy(Protocol):
    @property
    def reserve_tokens(self) -> int: ...


def should_compact(context_tokens: int, context_window: int,
                   settings: _CompactionPolicy | None = None) -> bool:
    """SPEC §12.3 step 10 with Q16: threshold compaction is due when the context holds strictly
    more than ``context_window - reserve_tokens`` tokens.

    A window ≤ 0 (unknown) never triggers, and neither do disabled settings
    (``compaction_enabled`` / ``enabled`` false). ``settings`` is a :class:`ClientSettings` or
    anything with ``reserve_tokens``; None uses the SPEC §14 default (16 384). The caller still
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
