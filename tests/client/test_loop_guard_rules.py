"""The client's parts of the loop guard that need no Redis (table-driven): the ineffective line
a request's window gives the draft apply script, and the window a request may name."""

from __future__ import annotations

import pytest

from api_client import ClientSettings
from api_client.client.draft_apply import ineffective_above
from api_client.client.jobs import check_context_window
from api_client.contract.errors import InvalidRequestError

S = ClientSettings(redis_url="redis://127.0.0.1:1/0")


@pytest.mark.parametrize(("window", "settings", "line"), [
    (200_000, S, 146_892),              # 0.8 × (200 000 - 16 384) = 146 892.8
    (116_384, S, 80_000),
    (116_384, S.model_copy(update={"loop_guard_share": 0.5}), 50_000),
    (116_384, S.model_copy(update={"reserve_tokens": 32_768}), 66_892),
    (16_384, S, None),                  # no room above the reserve: the worker's line decides
    (10_000, S, None),
    (None, S, None),                    # no window named
])
def test_ineffective_above(window: int | None, settings: ClientSettings,
                           line: int | None) -> None:
    assert ineffective_above(settings, window) == line


@pytest.mark.parametrize("value", [0, -5, "200000", 1.5, True])
def test_context_window_must_be_a_positive_int(value: object) -> None:
    with pytest.raises(InvalidRequestError, match="context_window"):
        check_context_window(value)


@pytest.mark.parametrize("value", [None, 1, 200_000])
def test_context_window_accepted(value: int | None) -> None:
    assert check_context_window(value) == value
