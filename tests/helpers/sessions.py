"""Tiny builders for synthetic sessions: short to write, exact in the numbers they produce."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from api_client.contract.session import Entry, Session, SessionTree, parse_entry

TS = "2026-01-01T00:00:00.000Z"


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1, **extra}


def assistant(text: str = "", *, tools: list[tuple[str, dict[str, Any]]] = (),
              usage: dict[str, Any] | None = None,
              stop: str = "stop", provider: str = "p", model: str = "m") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "toolCall", "id": f"c{i}", "name": n, "arguments": a}
                for i, (n, a) in enumerate(tools)]
    message = {"role": "assistant", "content": content, "provider": provider, "model": model,
               "stopReason": stop, "timestamp": 1}
    if usage is not None:
        message["usage"] = usage
    return message


def tool_result(text: str, tool: str = "bash", **extra: Any) -> dict[str, Any]:
    return {"role": "toolResult", "toolCallId": "c0", "toolName": tool,
            "content": [{"type": "text", "text": text}], "isError": False, "timestamp": 1, **extra}


def chain(*items: dict[str, Any], start: int = 0) -> list[Entry]:
    """Entries e<N> in a single chain; a bare message dict becomes a ``message`` entry."""
    entries = []
    parent = None
    for number, item in enumerate(items, start=start):
        raw = dict(item) if "type" in item else {"type": "message", "message": item}
        raw.setdefault("id", f"e{number}")
        raw.setdefault("parentId", parent)
        raw.setdefault("timestamp", TS)
        parent = raw["id"]
        entries.append(parse_entry(raw))
    return entries


def turns_jsonl(session_id: str, texts: Sequence[str]) -> str:
    """A JSONL session of one chain of plain turns: a user message of each even text, an
    assistant's of each odd one (no tools); entry ids are the index in hex (``0000000a``)."""
    lines = [json.dumps({"type": "session", "version": 3, "id": session_id, "timestamp": TS,
                         "cwd": "/"})]
    parent = None
    for i, text in enumerate(texts):
        entry_id = f"{i:08x}"
        lines.append(json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                 "timestamp": TS,
                                 "message": user(text) if i % 2 == 0 else assistant(text)}))
        parent = entry_id
    return "\n".join(lines) + "\n"


def tree(entries: list[Entry]) -> SessionTree:
    return SessionTree(entries)


def session(entries: list[Entry]) -> Session:
    return Session({"type": "session", "version": 3, "id": "s1", "timestamp": TS, "cwd": "/"},
                   entries)


def chars(n: int) -> str:
    """A text of n chars = ceil(n/4) estimated tokens."""
    return "x" * n
