"""What the store refuses before anything reaches Redis (pure; append and import call it).

Two kinds of checks, each raising its own :class:`~api_client.contract.errors.InvalidEntryError`:

* **the value is JSON** that every reader can parse: only objects with string keys, arrays,
  strings, finite numbers, booleans and null (:class:`UnserializableValueError`,
  :class:`NonFiniteNumberError`); strings encodable as UTF-8, so no lone surrogates
  (:class:`InvalidTextError`); at most :data:`MAX_NESTING` levels of objects and arrays
  (:class:`NestingTooDeepError`). The walk is iterative, so depth never becomes a
  ``RecursionError``.
* **the entry follows the reference agent's schema** where the planner and the models rely on
  it (docs/rules.md "Messages"): a message has a string ``role``; ``user`` / ``custom`` /
  ``hookMessage`` content is
  a string or a list of blocks, ``assistant`` content a list of blocks, ``toolResult`` has a
  non-empty ``toolCallId`` and content; every block is an object with a string ``type``, text
  blocks carry string ``text``, tool calls a string ``id`` and ``name``
  (:class:`MessageSchemaError`); entry ids (``id``, ``parentId`` and the ids an entry refers to)
  match :data:`SAFE_ID` (:class:`UnsafeEntryIdError`).

Roles and entry types this version does not know pass (they round-trip untouched).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from api_client.contract.errors import (
    InvalidTextError,
    MessageSchemaError,
    NestingTooDeepError,
    NonFiniteNumberError,
    UnsafeEntryIdError,
    UnserializableValueError,
)

__all__ = ["MAX_NESTING", "SAFE_ID", "check_entry", "check_entry_id", "check_json_value",
           "check_message"]

# Objects and arrays nested deeper than this are refused (pi's own entries nest about 5 deep;
# tool-call arguments leave plenty of room below 64).
MAX_NESTING = 64
# pi writes 8 hex digits; migrated and imported sessions may carry UUIDs. Nothing that needs
# quoting in JSON, Lua patterns, shells or log lines.
SAFE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Fields of an entry that name other entries.
_ID_FIELDS = ("id", "parentId", "firstKeptEntryId", "fromId", "targetId")


def _where(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "<entry>"


def _check_text(text: str, path: tuple[str | int, ...], source: str, line: int | None) -> None:
    if not text.isascii() and _SURROGATE.search(text):
        raise InvalidTextError(f"{_where(path)}: a lone surrogate is not valid text (not UTF-8)",
                               source=source, line=line)


def _check_scalar(value: object, path: tuple[str | int, ...], source: str,
                  line: int | None) -> None:
    if isinstance(value, str):
        _check_text(value, path, source, line)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise NonFiniteNumberError(f"{_where(path)}: {value} is not a JSON number",
                                       source=source, line=line)
    elif not (value is None or isinstance(value, (bool, int))):
        raise UnserializableValueError(
            f"{_where(path)}: a {type(value).__name__} is not a JSON value (convert it first, "
            "e.g. a datetime to epoch ms or ISO text)", source=source, line=line)


def check_json_value(value: object, *, source: str = "<entry>", line: int | None = None) -> None:
    """Raise unless ``value`` is plain JSON within :data:`MAX_NESTING` (iterative walk)."""
    stack: list[tuple[object, tuple[str | int, ...], int]] = [(value, (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, (Mapping, list, tuple)):
            if depth >= MAX_NESTING:
                raise NestingTooDeepError(
                    f"{_where(path)}: nested deeper than {MAX_NESTING} levels",
                    source=source, line=line)
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise UnserializableValueError(
                            f"{_where(path)}: object key {key!r} is not a string",
                            source=source, line=line)
                    _check_text(key, (*path, key), source, line)
                    stack.append((child, (*path, key), depth + 1))
            else:
                stack.extend((child, (*path, i), depth + 1) for i, child in enumerate(item))
        else:
            _check_scalar(item, path, source, line)


def check_entry_id(value: object, *, what: str = "entry id", source: str = "<entry>",
                   line: int | None = None) -> str:
    if not isinstance(value, str) or not SAFE_ID.fullmatch(value):
        raise UnsafeEntryIdError(
            f"{what} {value!r} is not 1-128 characters of letters, digits, '_', '.', ':', '-'",
            source=source, line=line)
    return value


def _blocks_ok(content: object, allowed: frozenset[str] | None) -> str | None:
    """Why a block list breaks the schema, or None."""
    if not isinstance(content, list):
        return "must be a list of content blocks"
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if not isinstance(kind, str):
            return f"[{i}] is not a block (an object with a string 'type')"
        assert isinstance(block, Mapping)
        if allowed is not None and kind not in allowed:
            return f"[{i}] has type {kind!r} (allowed: {', '.join(sorted(allowed))})"
        if kind == "text" and not isinstance(block.get("text"), str):
            return f"[{i}] is a text block without string 'text'"
        if kind == "toolCall" and not (isinstance(block.get("id"), str)
                                       and isinstance(block.get("name"), str)):
            return f"[{i}] is a toolCall block without string 'id' and 'name'"
    return None


_USER_BLOCKS = frozenset({"text", "image"})
_ASSISTANT_BLOCKS = frozenset({"text", "thinking", "toolCall"})


def _text_or_blocks(message: Mapping[str, Any]) -> str | None:
    content = message.get("content")
    if "content" not in message:
        return "has no 'content'"
    if isinstance(content, str):
        return None
    problem = _blocks_ok(content, None)
    return None if problem is None else f"content {problem}"


def _assistant(message: Mapping[str, Any]) -> str | None:
    if "content" not in message:
        return "has no 'content'"
    problem = _blocks_ok(message["content"], _ASSISTANT_BLOCKS)
    return None if problem is None else f"content {problem}"


def _tool_result(message: Mapping[str, Any]) -> str | None:
    call_id = message.get("toolCallId")
    if not isinstance(call_id, str) or not call_id:
        return "has no 'toolCallId' (the id of the toolCall it answers)"
    return _text_or_blocks(message)


def _user(message: Mapping[str, Any]) -> str | None:
    problem = _text_or_blocks(message)
    if problem is None and isinstance(message["content"], list):
        problem = _blocks_ok(message["content"], _USER_BLOCKS)
        problem = None if problem is None else f"content {problem}"
    return problem


_ROLE_CHECKS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {
    "user": _user,
    "assistant": _assistant,
    "toolResult": _tool_result,
    "custom": _text_or_blocks,
    "hookMessage": _text_or_blocks,
}


def check_message(message: object, *, source: str = "<entry>", line: int | None = None) -> None:
    """Raise :class:`MessageSchemaError` when a message breaks the reference agent's schema."""
    if not isinstance(message, Mapping):
        raise MessageSchemaError("a message must be a JSON object", source=source, line=line)
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise MessageSchemaError("message has no string 'role'", source=source, line=line)
    check = _ROLE_CHECKS.get(role)
    problem = check(message) if check is not None else None
    if problem is not None:
        raise MessageSchemaError(f"{role} message {problem}", source=source, line=line)


def check_entry(raw: Mapping[str, Any], *, source: str = "<entry>",
                line: int | None = None) -> None:
    """Every check above for one entry (a JSON object with a ``type``)."""
    check_json_value(raw, source=source, line=line)
    for field in _ID_FIELDS:
        value = raw.get(field)
        if value is not None:
            check_entry_id(value, what=f"'{field}'", source=source, line=line)
    if raw.get("type") == "message":
        check_message(raw.get("message"), source=source, line=line)
