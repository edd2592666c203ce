"""A hook plugin for the draft tests: cancels compactions of the sessions in ``CANCEL`` and
records the session_compact notifications it sees."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from worker.hooks import hookimpl

CANCEL: set[str] = set()
COMPACTED: list[tuple[str | None, str]] = []


class Plugin:
    @hookimpl
    def session_before_compact(self, preparation: Any, branch_entries: Sequence[Any],
                               custom_instructions: str | None, signal: Any,
                               session_id: str | None) -> Any:
        return {"cancel": True} if session_id in CANCEL else None

    @hookimpl
    def session_compact(self, compaction_entry: Mapping[str, Any], from_extension: bool,
                        session_id: str | None) -> None:
        COMPACTED.append((session_id, str(compaction_entry.get("id"))))
