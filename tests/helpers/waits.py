"""Waiting for the condition a test checks (never for a time): poll until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float = 30.0, what: str = "the condition",
               step: float = 0.02) -> T:
    """Poll ``check`` until it returns something truthy and return it; ``timeout`` only bounds a
    test that would otherwise hang (AssertionError naming ``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)
