"""A hook plugin for the runtime tests: runs the test's callables inside a job.

``ON_COMPACTING`` callables run (once each, in order) when a job reaches ``session.compacting``,
after its snapshot and plan and before the summary: the place where "the agent appends
meanwhile" is simulated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from worker.hooks import hookimpl

ON_COMPACTING: list[Callable[[str], None]] = []


class Plugin:
    @hookimpl
    def session_compacting(self, session_id: str | None,
                           messages: Sequence[Mapping[str, Any]]) -> None:
        if ON_COMPACTING and session_id is not None:
            ON_COMPACTING.pop(0)(session_id)
