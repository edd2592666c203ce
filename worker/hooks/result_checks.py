"""Validation of hook-supplied results, which the reference agent stores unchecked (docs/hooks.md).

Pure functions: the hook runner calls them on every hook-supplied compaction and branch summary,
and the service may call them again right before it commits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from api_client.contract.session import Entry
from worker.hooks._frozen import thaw
from worker.hooks.errors import HookValidationError

__all__ = ["validate_branch_summary", "validate_compaction"]

_BEFORE_COMPACT = "session_before_compact"
_BEFORE_TREE = "session_before_tree"


def validate_compaction(
    compaction: Mapping[str, Any], path: Sequence[Entry], *, plugin: str | None = None
) -> dict[str, Any]:
    """Check a hook's ``compaction`` against the path; return it as plain JSON.

    The result keeps only the documented keys and is marked ``fromExtension: true``.
    Raises :class:`HookValidationError` naming the first problem found.
    """

    def fail(problem: str) -> HookValidationError:
        return HookValidationError(_BEFORE_COMPACT, problem, plugin=plugin)

    if not isinstance(compaction, Mapping):
        raise fail(f"compaction must be an object, got {type(compaction).__name__}")
    summary = _summary_text(compaction.get("summary"), fail)
    first_kept = compaction.get("firstKeptEntryId")
    if not isinstance(first_kept, str) or not first_kept:
        raise fail("firstKeptEntryId must be a non-empty string")
    _check_first_kept(first_kept, path, fail)
    tokens = compaction.get("tokensBefore")
    if not _is_count(tokens):
        raise fail(f"tokensBefore must be a non-negative integer, got {tokens!r}")
    result: dict[str, Any] = {
        "summary": summary,
        "firstKeptEntryId": first_kept,
        "tokensBefore": int(tokens),  # type: ignore[arg-type]
    }
    short = compaction.get("shortSummary")
    if short is not None:
        if not isinstance(short, str):
            raise fail("shortSummary must be a string")
        result["shortSummary"] = short
    for key in ("details", "preserveData"):
        if compaction.get(key) is not None:
            result[key] = _json_value(compaction[key], key, fail)
    if "preserveData" in result and not isinstance(result["preserveData"], dict):
        raise fail("preserveData must be an object")
    result["fromExtension"] = True
    return result


def validate_branch_summary(
    summary: Mapping[str, Any], *, plugin: str | None = None
) -> dict[str, Any]:
    """Check a hook's tree ``summary`` object; return ``{summary, details?, fromExtension}``."""

    def fail(problem: str) -> HookValidationError:
        return HookValidationError(_BEFORE_TREE, problem, plugin=plugin)

    if not isinstance(summary, Mapping):
        raise fail(f"summary must be an object, got {type(summary).__name__}")
    result: dict[str, Any] = {"summary": _summary_text(summary.get("summary"), fail)}
    if summary.get("details") is not None:
        result["details"] = _json_value(summary["details"], "details", fail)
    result["fromExtension"] = True
    return result


def _summary_text(value: Any, fail: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise fail("summary must be non-empty text")
    return value


def _check_first_kept(first_kept: str, path: Sequence[Entry], fail: Any) -> None:
    for entry in path:
        if entry.id != first_kept:
            continue
        message = entry.raw.get("message") if entry.type == "message" else None
        if isinstance(message, Mapping) and message.get("role") == "toolResult":
            raise fail(f"firstKeptEntryId {first_kept} is a tool result, which cannot start the "
                       "kept context")
        return
    raise fail(f"firstKeptEntryId {first_kept} is not on the session path")


def _is_count(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    # JSON from webhooks may carry 1200.0; accept whole floats only.
    return isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer()


def _json_value(value: Any, key: str, fail: Any) -> Any:
    plain = thaw(value)
    try:
        json.dumps(plain, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise fail(f"{key} must be JSON: {err}") from err
    return plain
