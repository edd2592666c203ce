"""An example Compactor hook plugin, loaded through the ``compactor.hooks`` entry point.

Each hook answers what it is configured to answer (nothing by default):

``before_compact``  ``"cancel"`` | ``{"compaction": {...}}`` (``firstKeptEntryId`` and
                    ``tokensBefore`` default to the plan's) | ``"raise"`` | ``{"sleep": s}``
``compacting``      ``{"context": [...], "prompt": "...", "preserveData": {...}}`` | ``"raise"`` |
                    ``{"sleep": s}``
``before_tree``     ``"cancel"`` | ``{"summary": {...}}`` | ``"raise"`` | ``{"sleep": s}``

Configuration comes from :func:`configure` (same process) or from the JSON object in the
environment variable ``COMPACTOR_EXAMPLE_PLUGIN`` (worker processes).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from api_client.contract.session import Entry
from worker.hooks import (
    BeforeCompactResult,
    BeforeTreeResult,
    HookCompaction,
    TreePreparation,
    hookimpl,
)

__all__ = ["CALLS", "configure", "reset"]

ENV_CONFIG = "COMPACTOR_EXAMPLE_PLUGIN"
ENV_LOG = "COMPACTOR_EXAMPLE_PLUGIN_LOG"

CALLS: list[dict[str, Any]] = []
_config: dict[str, Any] = {}
_lock = threading.Lock()


def configure(**settings: Any) -> None:
    """Set the answers of this process (``before_compact=``, ``compacting=``, ``before_tree=``)."""
    _config.clear()
    _config.update(settings)


def reset() -> None:
    _config.clear()
    CALLS.clear()


def _setting(event: str) -> Any:
    if _config:
        return _config.get(event)
    text = os.environ.get(ENV_CONFIG)
    return json.loads(text).get(event) if text else None


def _record(event: str, **data: Any) -> None:
    # Inputs are read-only views (tuples, mapping proxies): keep plain JSON copies.
    call = json.loads(json.dumps({"event": event, **data}, default=_plain))
    with _lock:
        CALLS.append(call)
    path = os.environ.get(ENV_LOG)
    if path:
        with _lock, open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(call) + "\n")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(type(value).__name__)


def _misbehave(answer: Any) -> None:
    """Let tests exercise the dispatch rules for raising and slow hooks."""
    if answer == "raise":
        raise RuntimeError("example plugin configured to raise")
    if isinstance(answer, Mapping) and "sleep" in answer:
        time.sleep(float(answer["sleep"]))


@hookimpl
def session_before_compact(
    preparation: Any, branch_entries: Sequence[Entry], custom_instructions: str | None,
    session_id: str | None,
) -> BeforeCompactResult | None:
    _record("session_before_compact", session_id=session_id, path_length=len(branch_entries),
            first_kept_entry_id=preparation.first_kept_entry_id,
            custom_instructions=custom_instructions)
    answer = _setting("before_compact")
    _misbehave(answer)
    if answer == "cancel":
        return BeforeCompactResult(cancel=True)
    if isinstance(answer, Mapping) and "compaction" in answer:
        given = answer["compaction"]
        return BeforeCompactResult(compaction=HookCompaction(
            summary=given.get("summary", ""),
            first_kept_entry_id=given.get("firstKeptEntryId", preparation.first_kept_entry_id),
            tokens_before=given.get("tokensBefore", preparation.tokens_before),
            short_summary=given.get("shortSummary"),
            details=given.get("details"),
            preserve_data=given.get("preserveData"),
        ))
    return None


@hookimpl
def session_compacting(session_id: str | None, messages: Sequence[Mapping[str, Any]]) -> Any:
    _record("session_compacting", session_id=session_id, messages=len(messages))
    answer = _setting("compacting")
    _misbehave(answer)
    # A plain dict with the documented keys (docs/hooks.md "The five events") is as good as the
    # typed result.
    return dict(answer) if isinstance(answer, Mapping) and "sleep" not in answer else None


@hookimpl
def session_compact(compaction_entry: Mapping[str, Any], from_extension: bool, session_id: str | None) -> None:
    _record("session_compact", session_id=session_id, entry=compaction_entry,
            from_extension=from_extension)


@hookimpl
def session_before_tree(preparation: TreePreparation, session_id: str | None) -> Any:
    _record("session_before_tree", session_id=session_id, target_id=preparation.target_id,
            old_leaf_id=preparation.old_leaf_id,
            entries=[entry.id for entry in preparation.entries_to_summarize],
            user_wants_summary=preparation.user_wants_summary)
    answer = _setting("before_tree")
    _misbehave(answer)
    if answer == "cancel":
        return BeforeTreeResult(cancel=True)
    if isinstance(answer, Mapping) and "summary" in answer:
        return {"summary": dict(answer["summary"])}
    return None


@hookimpl
def session_tree(
    new_leaf_id: str | None, old_leaf_id: str | None, summary_entry: Mapping[str, Any] | None,
    from_extension: bool | None, session_id: str | None,
) -> None:
    _record("session_tree", session_id=session_id, new_leaf_id=new_leaf_id,
            old_leaf_id=old_leaf_id,
            summary_entry=summary_entry,
            from_extension=from_extension)
