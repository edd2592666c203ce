"""Typed views over session entries (docs/rules.md "Session file", "Messages").

An entry keeps the JSON object it was read from (``raw``) so that unknown types and unknown
fields survive a load/export round trip untouched; the typed properties only read from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeAlias, cast

from api_client.contract.errors import SessionFormatError

__all__ = [
    "KNOWN_ENTRY_TYPES",
    "MESSAGE_ROLES",
    "BranchSummaryEntry",
    "CompactionEntry",
    "CustomEntry",
    "CustomMessageEntry",
    "Entry",
    "EntryType",
    "JsonObject",
    "LabelEntry",
    "Message",
    "MessageEntry",
    "MessageRole",
    "ModeChangeEntry",
    "ModelChangeEntry",
    "SessionInitEntry",
    "ThinkingLevelChangeEntry",
    "TtsrInjectionEntry",
    "UnknownEntry",
    "iso_to_epoch_ms",
    "parse_entry",
]

JsonObject: TypeAlias = dict[str, Any]
# Messages stay JSON objects: they are sent to models and stored verbatim.
Message: TypeAlias = dict[str, Any]

EntryType = Literal[
    "message",
    "thinking_level_change",
    "model_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "ttsr_injection",
    "session_init",
    "mode_change",
]
KNOWN_ENTRY_TYPES: frozenset[str] = frozenset(EntryType.__args__)  # type: ignore[attr-defined]

MessageRole = Literal[
    "user",
    "assistant",
    "toolResult",
    "bashExecution",
    "pythonExecution",
    "custom",
    "hookMessage",
    "branchSummary",
    "compactionSummary",
    "fileMention",
]
MESSAGE_ROLES: frozenset[str] = frozenset(MessageRole.__args__)  # type: ignore[attr-defined]


def iso_to_epoch_ms(value: Any) -> int:
    """ISO-8601 (``Z`` suffix allowed) to epoch ms, as ``Date.parse`` does; 0 when unparsable."""
    if not isinstance(value, str) or not value:
        return 0
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return 0
    if parsed.tzinfo is None:
        return int(parsed.timestamp() * 1000)  # pragma: no cover - pi always writes Z
    delta = parsed - datetime(1970, 1, 1, tzinfo=parsed.tzinfo)
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


@dataclass(frozen=True, slots=True)
class Entry:
    """One non-header line of a session. ``line`` is its 1-based line in the source (0: none)."""

    raw: JsonObject
    line: int = 0
    # Read once: the tree walks and the planner ask for them thousands of times per job, and an
    # entry's ``raw`` is never changed after it is parsed.
    id: str = field(init=False, repr=False, compare=False)
    parent_id: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        entry_id, parent = self.raw.get("id"), self.raw.get("parentId")
        object.__setattr__(self, "id", entry_id if isinstance(entry_id, str) else "")
        object.__setattr__(self, "parent_id", parent if isinstance(parent, str) else None)

    @property
    def type(self) -> str:
        return cast(str, self.raw.get("type"))

    @property
    def timestamp(self) -> str:
        value = self.raw.get("timestamp")
        return value if isinstance(value, str) else ""

    @property
    def timestamp_ms(self) -> int:
        return iso_to_epoch_ms(self.raw.get("timestamp"))


@dataclass(frozen=True, slots=True)
class MessageEntry(Entry):
    # Read once, as ``id``: a warm plan of a 1 000-entry session asked ~8 000 times per job.
    message: Message = field(init=False, repr=False, compare=False)
    role: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Entry.__post_init__(self)  # zero-argument super() fails in a slots dataclass
        message = cast(Message, self.raw["message"])
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "role", cast(str, message.get("role", "")))


@dataclass(frozen=True, slots=True)
class ThinkingLevelChangeEntry(Entry):
    @property
    def thinking_level(self) -> str:
        return str(self.raw.get("thinkingLevel", "off"))


@dataclass(frozen=True, slots=True)
class ModelChangeEntry(Entry):
    @property
    def model(self) -> str | None:
        value = self.raw.get("model")
        return value if isinstance(value, str) and value else None

    @property
    def role(self) -> str:
        value = self.raw.get("role")
        return value if isinstance(value, str) and value else "default"


@dataclass(frozen=True, slots=True)
class CompactionEntry(Entry):
    @property
    def summary(self) -> str:
        return cast(str, self.raw.get("summary", ""))

    @property
    def short_summary(self) -> str | None:
        value = self.raw.get("shortSummary")
        return value if isinstance(value, str) else None

    @property
    def first_kept_entry_id(self) -> str:
        value = self.raw.get("firstKeptEntryId")
        return value if isinstance(value, str) else ""

    @property
    def tokens_before(self) -> int:
        value = self.raw.get("tokensBefore", 0)
        return int(value) if isinstance(value, (int, float)) else 0

    @property
    def details(self) -> Any:
        return self.raw.get("details")

    @property
    def from_extension(self) -> bool:
        return bool(self.raw.get("fromExtension"))


@dataclass(frozen=True, slots=True)
class BranchSummaryEntry(Entry):
    @property
    def summary(self) -> str:
        return cast(str, self.raw.get("summary", ""))

    @property
    def from_id(self) -> str:
        return str(self.raw.get("fromId", ""))

    @property
    def details(self) -> Any:
        return self.raw.get("details")

    @property
    def from_extension(self) -> bool:
        return bool(self.raw.get("fromExtension"))


@dataclass(frozen=True, slots=True)
class CustomEntry(Entry):
    @property
    def custom_type(self) -> str:
        return str(self.raw.get("customType", ""))


@dataclass(frozen=True, slots=True)
class CustomMessageEntry(Entry):
    @property
    def custom_type(self) -> str:
        return str(self.raw.get("customType", ""))

    @property
    def content(self) -> Any:
        return self.raw.get("content", "")


@dataclass(frozen=True, slots=True)
class LabelEntry(Entry):
    @property
    def target_id(self) -> str:
        return str(self.raw.get("targetId", ""))

    @property
    def label(self) -> str | None:
        value = self.raw.get("label")
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class TtsrInjectionEntry(Entry):
    @property
    def injected_rules(self) -> list[str]:
        value = self.raw.get("injectedRules")
        return [r for r in value if isinstance(r, str)] if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class SessionInitEntry(Entry):
    pass


@dataclass(frozen=True, slots=True)
class ModeChangeEntry(Entry):
    @property
    def mode(self) -> str:
        return str(self.raw.get("mode", "none"))

    @property
    def data(self) -> Any:
        return self.raw.get("data")


@dataclass(frozen=True, slots=True)
class UnknownEntry(Entry):
    """An entry type this version does not know: kept and round-tripped, never in context."""


_CLASSES: dict[str, type[Entry]] = {
    "message": MessageEntry,
    "thinking_level_change": ThinkingLevelChangeEntry,
    "model_change": ModelChangeEntry,
    "compaction": CompactionEntry,
    "branch_summary": BranchSummaryEntry,
    "custom": CustomEntry,
    "custom_message": CustomMessageEntry,
    "label": LabelEntry,
    "ttsr_injection": TtsrInjectionEntry,
    "session_init": SessionInitEntry,
    "mode_change": ModeChangeEntry,
}

# Fields whose type the algorithms rely on; a wrong type is a corrupt session, not a quirk.
_FIELD_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "compaction": {"summary": (str,), "firstKeptEntryId": (str,), "tokensBefore": (int, float)},
    "branch_summary": {"summary": (str,), "fromId": (str,)},
    "label": {"targetId": (str,)},
    "model_change": {"model": (str,)},
    "thinking_level_change": {"thinkingLevel": (str,)},
    "custom_message": {"customType": (str,)},
}


def _fail(problem: str, source: str, line: int) -> SessionFormatError:
    return SessionFormatError(problem, source=source, line=line or None)


def _check_base(raw: JsonObject, source: str, line: int) -> str:
    kind = raw.get("type")
    if not isinstance(kind, str):
        raise _fail("entry has no string 'type'", source, line)
    if "id" in raw and not isinstance(raw["id"], str):
        raise _fail(f"entry 'id' must be a string, got {type(raw['id']).__name__}", source, line)
    parent = raw.get("parentId")
    if parent is not None and not isinstance(parent, str):
        raise _fail(f"'parentId' must be a string or null, got {type(parent).__name__}",
                    source, line)
    return kind


def _check_message(raw: JsonObject, source: str, line: int) -> None:
    message = raw.get("message")
    if not isinstance(message, dict):
        raise _fail("'message' must be an object", source, line)
    if not isinstance(message.get("role"), str):
        raise _fail("message has no string 'role'", source, line)
    content = message.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise _fail("message 'content' must be a string or a list", source, line)


def parse_entry(raw: JsonObject, *, source: str = "<session>", line: int = 0) -> Entry:
    """Wrap a JSON object in its typed view, rejecting fields of the wrong type."""
    kind = _check_base(raw, source, line)
    if kind == "message":
        _check_message(raw, source, line)
    for name, types in _FIELD_TYPES.get(kind, {}).items():
        if name in raw and raw[name] is not None and not isinstance(raw[name], types):
            got = type(raw[name]).__name__
            raise _fail(f"{kind} field '{name}' has the wrong type ({got})", source, line)
    return _CLASSES.get(kind, UnknownEntry)(raw, line)
