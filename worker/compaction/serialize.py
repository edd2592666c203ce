"""Conversation serialization for summary prompts (docs/rules.md "Serialised conversation").

The input is the output of ``convert_to_llm`` (docs/rules.md "Conversion for the model"): only
``user``, ``assistant`` and
``toolResult`` messages reach the model, so any other role is ignored here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from worker.tokens.jsjson import js_json, js_property_order
from worker.tokens.memo import IdentityMemo

__all__ = [
    "PART_SEPARATOR",
    "conversation_parts",
    "normalized_conversation",
    "prompt_parts",
    "serialize_conversation",
]

PART_SEPARATOR = "\n\n"
Parts = IdentityMemo[Mapping[str, Any], tuple[str, ...]]


def serialize_conversation(llm_messages: Iterable[Mapping[str, Any]]) -> str:
    """Render LLM messages as the ``[User]: …`` text the summary prompts embed."""
    return PART_SEPARATOR.join(conversation_parts(llm_messages))


def conversation_parts(llm_messages: Iterable[Mapping[str, Any]],
                       known: Parts | None = None) -> list[str]:
    """The parts :func:`serialize_conversation` joins with :data:`PART_SEPARATOR`, each one
    starting with its ``[Role]:`` label; with ``known`` (``PlanCaches.parts``) the same string
    objects for the same message."""
    return [part for parts in _parts(llm_messages, known) for part in parts]


def prompt_parts(llm_messages: Iterable[Mapping[str, Any]], min_chars: int = 0,
                 known: Parts | None = None) -> list[str]:
    """The parts :func:`serialize_conversation` joins (those longer than ``min_chars``), each
    followed by the separator as it stands in a prompt: what a cold job primes besides the
    messages (a tool call reads ``name(k=…)`` there, not JSON; a short part is counted
    whole, separator included)."""
    return [part + PART_SEPARATOR for parts in _parts(llm_messages, known)
            for part in parts if len(part) > min_chars]


def normalized_conversation(llm_messages: Iterable[Mapping[str, Any]],
                            known: Parts | None = None) -> str:
    """``" ".join(serialize_conversation(llm_messages).split())``."""
    return " ".join(PART_SEPARATOR.join(conversation_parts(llm_messages, known)).split())


def _parts(llm_messages: Iterable[Mapping[str, Any]],
           known: Parts | None) -> Iterable[tuple[str, ...]]:
    if known is None:
        return map(_message_parts, llm_messages)
    return known.get_many(llm_messages, _message_parts)


def _message_parts(message: Mapping[str, Any]) -> tuple[str, ...]:
    role = message.get("role")
    if role == "user":
        text = _user_text(message.get("content"))
        return ("[User]: " + text,) if text else ()
    if role == "assistant":
        return tuple(_assistant_parts(message.get("content")))
    if role == "toolResult":
        text = _joined_text(message.get("content"))
        return ("[Tool result]: " + text,) if text else ()
    return ()


def _user_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return _joined_text(content)


def _joined_text(content: Any) -> str:
    """Text blocks concatenated without a separator; images and other blocks are ignored."""
    if not isinstance(content, list):
        return ""
    return "".join(_str(block.get("text")) for block in _blocks(content, "text"))


def _assistant_parts(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[str] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(_str(block.get("text")))
        elif kind == "thinking":
            thinking.append(_str(block.get("thinking")))
        elif kind == "toolCall":
            calls.append(_tool_call(block))
    # A present-but-empty block still yields its part: the test is "any block", not "any text".
    parts: list[str] = []
    if thinking:
        parts.append("[Assistant thinking]: " + "\n".join(thinking))
    if texts:
        parts.append("[Assistant]: " + "\n".join(texts))
    if calls:
        parts.append("[Assistant tool calls]: " + "; ".join(calls))
    return parts


def _tool_call(block: Mapping[str, Any]) -> str:
    arguments = block.get("arguments")
    rendered = ""
    if isinstance(arguments, Mapping):
        rendered = ", ".join(
            f"{key}={js_json(arguments[key])}" for key in js_property_order(arguments)
        )
    return f"{_str(block.get('name'))}({rendered})"


def _blocks(content: list[Any], kind: str) -> Iterable[Mapping[str, Any]]:
    return (b for b in content if isinstance(b, Mapping) and b.get("type") == kind)


def _str(value: Any) -> str:
    # A missing or non-string field renders as nothing rather than failing the whole prompt.
    return value if isinstance(value, str) else ""
