"""Typed hook results and the normalisation of plain-dict results onto them
(docs/hooks.md "The five events").

Hooks may return these classes or dicts with the documented keys; the runner turns both into the
classes below. A result that carries nothing (no cancel, no compaction, ...) is no answer: it does
not replace an earlier hook's result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.hooks._frozen import thaw
from worker.hooks.errors import HookValidationError

__all__ = [
    "BeforeCompactResult",
    "BeforeTreeResult",
    "CompactingResult",
    "HookBranchSummary",
    "HookCompaction",
    "normalise_before_compact",
    "normalise_before_tree",
    "normalise_compacting",
]


@dataclass(frozen=True, slots=True)
class HookCompaction:
    """Typed form of the ``compaction`` a ``session_before_compact`` hook may supply."""

    summary: str
    first_kept_entry_id: str
    tokens_before: int
    short_summary: str | None = None
    details: Any = None
    preserve_data: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "summary": self.summary,
            "firstKeptEntryId": self.first_kept_entry_id,
            "tokensBefore": self.tokens_before,
        }
        optional = {
            "shortSummary": self.short_summary,
            "details": self.details,
            "preserveData": self.preserve_data,
        }
        out.update({key: thaw(value) for key, value in optional.items() if value is not None})
        return out


@dataclass(frozen=True, slots=True)
class HookBranchSummary:
    """Typed form of the ``summary`` a ``session_before_tree`` hook may supply."""

    summary: str
    details: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"summary": self.summary}
        if self.details is not None:
            out["details"] = thaw(self.details)
        return out


@dataclass(frozen=True, slots=True, init=False)
class BeforeCompactResult:
    """``{cancel}`` or ``{compaction}``; ``compaction`` is JSON (camelCase keys)."""

    cancel: bool
    compaction: dict[str, Any] | None

    def __init__(
        self, cancel: bool = False, compaction: Mapping[str, Any] | HookCompaction | None = None
    ) -> None:
        object.__setattr__(self, "cancel", cancel)
        object.__setattr__(self, "compaction", _as_json(compaction))

    def __bool__(self) -> bool:
        return bool(self.cancel) or self.compaction is not None


@dataclass(frozen=True, slots=True)
class CompactingResult:
    """``context`` lines, a replacement history ``prompt`` and ``preserve_data`` for the entry."""

    context: list[str] = field(default_factory=list)
    prompt: str | None = None
    preserve_data: dict[str, Any] | None = None

    def __bool__(self) -> bool:
        return bool(self.context) or bool(self.prompt) or self.preserve_data is not None


@dataclass(frozen=True, slots=True, init=False)
class BeforeTreeResult:
    """``{cancel}`` or ``{summary}``; ``summary`` is JSON ``{summary, details?}``."""

    cancel: bool
    summary: dict[str, Any] | None

    def __init__(
        self, cancel: bool = False, summary: Mapping[str, Any] | HookBranchSummary | None = None
    ) -> None:
        object.__setattr__(self, "cancel", cancel)
        object.__setattr__(self, "summary", _as_json(summary))

    def __bool__(self) -> bool:
        return bool(self.cancel) or self.summary is not None


def _as_json(value: Mapping[str, Any] | HookCompaction | HookBranchSummary | None) -> Any:
    if value is None:
        return None
    if isinstance(value, (HookCompaction, HookBranchSummary)):
        return value.to_json()
    return thaw(value)


class _Shape:
    """Type checks of one raw result, failing with the event and plugin named."""

    def __init__(self, event: str, plugin: str | None) -> None:
        self.event = event
        self.plugin = plugin

    def fail(self, problem: str) -> HookValidationError:
        return HookValidationError(self.event, problem, plugin=self.plugin)

    def mapping(self, value: Any, expected: type[Any]) -> Mapping[str, Any] | None:
        if value is None or isinstance(value, expected):
            return None
        if not isinstance(value, Mapping):
            raise self.fail(f"expected None, a {expected.__name__} or a dict, "
                            f"got {type(value).__name__}")
        return value

    def cancel(self, value: Any) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(f"cancel must be true or false, got {value!r}")
        return value

    def object(self, value: Any, key: str, typed: type[Any]) -> Any:
        if value is None or isinstance(value, (Mapping, typed)):
            return value
        raise self.fail(f"{key} must be an object, got {type(value).__name__}")


def normalise_before_compact(value: Any, plugin: str | None = None) -> BeforeCompactResult | None:
    shape = _Shape("session_before_compact", plugin)
    raw = shape.mapping(value, BeforeCompactResult)
    if raw is not None:
        compaction = shape.object(raw.get("compaction"), "compaction", HookCompaction)
        value = BeforeCompactResult(cancel=shape.cancel(raw.get("cancel")), compaction=compaction)
    elif isinstance(value, BeforeCompactResult):
        shape.cancel(value.cancel)
    return value if value else None


def normalise_compacting(value: Any, plugin: str | None = None) -> CompactingResult | None:
    shape = _Shape("session_compacting", plugin)
    raw = shape.mapping(value, CompactingResult)
    if raw is not None:
        value = CompactingResult(
            context=raw.get("context") or [], prompt=raw.get("prompt"),
            preserve_data=raw.get("preserveData"),
        )
    if value is None:
        return None
    context = value.context
    if isinstance(context, str) or not isinstance(context, Sequence) or not all(
        isinstance(line, str) for line in context
    ):
        raise shape.fail("context must be a list of strings")
    if value.prompt is not None and not isinstance(value.prompt, str):
        raise shape.fail("prompt must be a string")
    preserve = shape.object(value.preserve_data, "preserveData", dict)
    result = CompactingResult(
        context=list(context), prompt=value.prompt or None,
        preserve_data=thaw(preserve) if preserve is not None else None,
    )
    return result if result else None


def normalise_before_tree(value: Any, plugin: str | None = None) -> BeforeTreeResult | None:
    shape = _Shape("session_before_tree", plugin)
    raw = shape.mapping(value, BeforeTreeResult)
    if raw is not None:
        summary = shape.object(raw.get("summary"), "summary", HookBranchSummary)
        value = BeforeTreeResult(cancel=shape.cancel(raw.get("cancel")), summary=summary)
    elif isinstance(value, BeforeTreeResult):
        shape.cancel(value.cancel)
    return value if value else None
