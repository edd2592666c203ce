"""Operator commands over session files (session migrate, inspect ...). Filled by the core work."""

from __future__ import annotations

from typing import Any


def register(commands: Any) -> None:
    return None
