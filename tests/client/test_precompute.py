"""should_precompute: the band just below the threshold (pure, table-driven)."""

from __future__ import annotations

import pytest

from api_client import ClientSettings, should_compact, should_precompute
from api_client.client.thresholds import precompute_band, precompute_horizon, precompute_lead

S = ClientSettings(redis_url="redis://127.0.0.1:1/0")


@pytest.mark.parametrize(("threshold", "band"), [
    (10_000, 8_192),      # 0.125 × 10 000 = 1 250 → the 8 192 floor
    (65_536, 8_192),      # exactly the floor
    (100_000, 12_500),
    (183_616, 22_952),    # a 200k window with the default reserve
    (500_000, 32_000),    # the 32 000 cap
])
def test_band_is_clamped(threshold: int, band: int) -> None:
    assert precompute_band(threshold) == band


@pytest.mark.parametrize(("tokens", "window", "settings", "expected"), [
    (100_000, 200_000, S, False),                  # below the band
    (160_664, 200_000, S, False),                  # the band's lower edge is exclusive
    (160_665, 200_000, S, True),
    (183_616, 200_000, S, True),                   # the threshold itself: not yet compact
    (183_617, 200_000, S, False),                  # above: should_compact instead
    (170_000, 0, S, False),                        # unknown window
    (170_000, 200_000, S.model_copy(update={"precompute_enabled": False}), False),
    (170_000, 200_000, S.model_copy(update={"compaction_enabled": False}), False),
    (170_000, 200_000, None, True),                # the default settings
    # the band follows the threshold: reserve 40 000 → threshold 160 000, band 20 000
    (150_000, 200_000, S.model_copy(update={"reserve_tokens": 40_000}), True),
    (139_999, 200_000, S.model_copy(update={"reserve_tokens": 40_000}), False),
    (10_000, 16_000, S, False),                    # window under the reserve
])
def test_should_precompute(tokens: int, window: int, settings: ClientSettings | None,
                           expected: bool) -> None:
    assert should_precompute(tokens, window, settings) is expected
    if expected:
        assert not should_compact(tokens, window, settings)


# precompute_lead: a 200k window's threshold (183 616): band 22 952, horizon 91 808.
@pytest.mark.parametrize(("rate", "draft_s", "settings", "lead"), [
    (0.0, None, S, 22_952),          # no pace measured yet: the band
    (4_000.0, 2.0, S, 22_952),       # 4k/s × 2 s × 1.5 = 12k: the band is the floor
    (4_000.0, 5.0, S, 30_000),       # 4k/s × 5 s × 1.5: earlier than the band
    (50_000.0, 5.0, S, 91_808),      # never more than half the threshold below it
    (4_000.0, None, S, 22_952),      # no draft measured, precompute_draft_s 0: the band
    (4_000.0, None, S.model_copy(update={"precompute_draft_s": 10.0}), 60_000),
    (-5.0, 9.0, S, 22_952),          # a shrinking context projects nothing
])
def test_precompute_lead(rate: float, draft_s: float | None, settings: ClientSettings,
                         lead: int) -> None:
    assert precompute_lead(183_616, rate, draft_s, settings) == lead
    assert precompute_horizon(183_616) == 91_808
