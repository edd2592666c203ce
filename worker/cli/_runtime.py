"""Runtime subcommands (worker, flower, session import/export, compact, ...). Filled by the runtime work."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    _ = argparse  # placeholder until the runtime commands land
