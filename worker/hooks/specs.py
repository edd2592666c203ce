"""The five hook events (docs/hooks.md "The five events") as pluggy hook specifications (project
name ``compactor``).

Implementations are plain functions or methods marked with :data:`hookimpl`; each may accept any
subset of the arguments of its specification, by name. Every input is read-only: entries are frozen
dataclasses whose JSON is a :class:`types.MappingProxyType`, lists are tuples. Hooks return
``None`` (no answer), a typed result from :mod:`worker.hooks.results`, or a plain dict with the
documented
keys (``cancel``, ``compaction``, ``context``, ``prompt``, ``preserveData``, ``summary``).

Unlike pluggy's own call loop, the :class:`~worker.hooks.runner.HookRunner` calls the
implementations itself, in load order, with the dispatch rules of docs/hooks.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

from api_client.contract.session import Entry

if TYPE_CHECKING:
    from worker.compaction import Preparation

__all__ = [
    "EVENTS",
    "PROJECT_NAME",
    "CancelSignal",
    "HookSpecs",
    "TreePreparation",
    "hookimpl",
    "hookspec",
]

PROJECT_NAME = "compactor"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

EVENTS = (
    "session_before_compact",
    "session_compacting",
    "session_compact",
    "session_before_tree",
    "session_tree",
)


class CancelSignal(Protocol):
    """The job's cancel token (the reference's ``signal``): hooks may poll it during long work."""

    def is_cancelled(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class TreePreparation:
    """docs/compaction.md "Branch navigation": what a tree navigation is about to do."""

    target_id: str
    old_leaf_id: str | None
    common_ancestor_id: str | None
    entries_to_summarize: tuple[Entry, ...]
    user_wants_summary: bool


class HookSpecs:
    """Hook specifications. Argument names are the contract; bodies are never called."""

    @hookspec
    def session_before_compact(
        self,
        preparation: Preparation,
        branch_entries: Sequence[Entry],
        custom_instructions: str | None,
        signal: CancelSignal | None,
        session_id: str | None,
    ) -> Any:
        """Before a compaction is summarised (docs/rules.md "Manual compaction").

        ``preparation`` is the plan of docs/compaction.md "Preparation" (file lists and the previous
        summary included),
        ``branch_entries`` the root→leaf path. Return ``{"cancel": True}`` to cancel the job, or
        ``{"compaction": {summary, shortSummary?, firstKeptEntryId, tokensBefore, details?,
        preserveData?}}`` to supply the compaction yourself: no model call is then made and the
        entry is stored with ``fromExtension: true`` (after validation).
        """

    @hookspec
    def session_compacting(
        self,
        session_id: str | None,
        messages: Sequence[Mapping[str, Any]],
        signal: CancelSignal | None,
    ) -> Any:
        """Before the model is asked for a summary (the reference's ``session.compacting``).

        ``messages`` are the messages to summarise followed by the turn prefix. Return
        ``{"context": [lines], "prompt": text, "preserveData": {...}}`` (every key optional):
        the lines become the ``<additional-context>`` block, ``prompt`` replaces the base
        history prompt and ``preserveData`` is stored on the entry. Not emitted when a
        ``session_before_compact`` hook supplied the compaction.
        """

    @hookspec
    def session_compact(
        self,
        compaction_entry: Mapping[str, Any],
        from_extension: bool,
        session_id: str | None,
    ) -> None:
        """Notification after the compaction entry was committed; ``compaction_entry`` is it."""

    @hookspec
    def session_before_tree(
        self,
        preparation: TreePreparation,
        signal: CancelSignal | None,
        session_id: str | None,
    ) -> Any:
        """Before a tree navigation (docs/compaction.md "Branch navigation"), fired even without a
        summary request.

        Return ``{"cancel": True}`` to leave the session as it is, or
        ``{"summary": {summary, details?}}`` to supply the branch summary (used only when the
        caller asked for one; stored with ``fromExtension: true``).
        """

    @hookspec
    def session_tree(
        self,
        new_leaf_id: str | None,
        old_leaf_id: str | None,
        summary_entry: Mapping[str, Any] | None,
        from_extension: bool | None,
        session_id: str | None,
    ) -> None:
        """Notification after a tree navigation was committed
        (docs/compaction.md "Branch navigation")."""
