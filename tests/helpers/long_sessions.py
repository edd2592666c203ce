"""Sessions of any length built from the reference sessions' turns (the long-session test,
``bench/bench_scale.py``).

The turns of ``large-session`` and ``before-compaction`` (their compaction entries left out)
follow each other, cycle after cycle, until the session holds the entries asked for. Every
cycle after the first rewrites each text's words in another order and renames the tool-call
ids: real words, as dense as the originals, that no token cache has seen (a copy of the same
text would be counted once and cost nothing after). Entry ids are fresh and sequential; the
parent chain is linear. With ``compacted`` a compaction entry stands where the last
``CONTEXT_AFTER`` tokens (chars/4) begin, keeping the ``KEPT`` tokens before it: the shape of a
session Compactor compacted once before it grew to the threshold again.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["FIXTURES", "build", "growth", "jsonl"]

FIXTURES = Path(os.environ.get("COMPACTOR_PI_FIXTURES",
                               Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "pi"))
NAMES = ("large-session", "before-compaction")
CONTEXT_AFTER = 150_000  # tokens after the earlier compaction: the next one is near
KEPT = 20_000  # tokens the earlier compaction kept (the default keep_recent_tokens)
_TEXTS = ("text", "thinking", "output")
_IDS = ("id", "toolCallId")
_WORDS_AND_SPACES = re.compile(r"\S+|\s+")
_TS = "2026-01-01T00:00:00.000Z"


def _turns(fixtures: Path) -> list[list[dict[str, Any]]]:
    """Each reference session's path as turns (a turn starts at a user message)."""
    from api_client.contract.session import load_session

    turns: list[list[dict[str, Any]]] = []
    for name in NAMES:
        session = load_session((fixtures / f"{name}.jsonl").read_text(encoding="utf-8"))
        tree = session.tree()
        for entry in tree.path_to(tree.leaf_id):
            raw = dict(entry.raw)
            if raw.get("type") == "compaction":
                continue
            message = raw.get("message")
            if not turns or (isinstance(message, dict) and message.get("role") == "user"):
                turns.append([])
            turns[-1].append(raw)
    return turns


def _changed(value: Any, salt: int) -> Any:
    if isinstance(value, dict):
        return {k: _changed_string(k, v, salt) if isinstance(v, str) else _changed(v, salt)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_changed(v, salt) for v in value]
    return value


def _changed_string(key: str, text: str, salt: int) -> str:
    if key in _IDS:
        return f"c{salt}-{text}"
    if key not in _TEXTS:
        return text
    tokens = _WORDS_AND_SPACES.findall(text)
    words = [t for t in tokens if not t.isspace()]
    random.Random(f"{salt}:{len(text)}").shuffle(words)
    shuffled = iter(words)
    return "".join(t if t.isspace() else next(shuffled) for t in tokens)


def _entries(fixtures: Path, first_salt: int) -> Iterator[dict[str, Any]]:
    """Entries without id and parentId, turn after turn, cycle after cycle (salt = cycle)."""
    turns = _turns(fixtures)
    salt = first_salt
    while True:
        for turn in turns:
            for raw in turn:
                body = {k: v for k, v in raw.items() if k not in ("id", "parentId")}
                yield body if salt == 0 else _changed(body, salt)
        salt += 1


def _estimate(raw: dict[str, Any]) -> int:
    message = raw.get("message")
    return len(json.dumps(message, ensure_ascii=False)) // 4 if isinstance(message, dict) else 0


def _is_user(raw: dict[str, Any]) -> bool:
    message = raw.get("message")
    return isinstance(message, dict) and message.get("role") == "user"


def _compaction_at(bodies: list[dict[str, Any]]) -> tuple[int, int]:
    """(index the compaction goes before, index of its first kept entry): both user messages."""
    tokens, at = 0, len(bodies)
    while at > 0 and (tokens < CONTEXT_AFTER or not _is_user(bodies[at])):
        at -= 1
        tokens += _estimate(bodies[at])
    tokens, kept = 0, at
    while kept > 0 and (tokens < KEPT or not _is_user(bodies[kept])):
        kept -= 1
        tokens += _estimate(bodies[kept])
    return at, kept


def _compaction(first_kept: str) -> dict[str, Any]:
    summary = ("## Goal\nKeep the importer working across locales.\n\n## Progress\n"
               + "The parser splits amounts by locale and the tests cover totals. " * 60)
    return {"type": "compaction", "timestamp": _TS, "summary": summary,
            "firstKeptEntryId": first_kept, "tokensBefore": 183_000,
            "details": {"readFiles": ["src/importer.ts"], "modifiedFiles": ["src/parser.ts"]},
            "fromExtension": False}


def build(entries: int, *, compacted: bool = False,
          fixtures: Path = FIXTURES) -> list[dict[str, Any]]:
    """``entries`` entries (plus one compaction entry with ``compacted``), ids and parents set."""
    source = _entries(fixtures, 0)
    bodies = [next(source) for _ in range(entries)]
    if compacted:
        at, kept = _compaction_at(bodies)
        bodies.insert(at, {"__kept": kept})
    out: list[dict[str, Any]] = []
    parent: str | None = None
    for n, body in enumerate(bodies):
        entry_id = f"{n:08x}"
        if "__kept" in body:
            body = _compaction(f"{body['__kept']:08x}")
        kind = body["type"]
        rest = {k: v for k, v in body.items() if k != "type"}
        out.append({"type": kind, "id": entry_id, "parentId": parent, **rest})
        parent = entry_id
    return out


def growth(tokens: int, salt: int, fixtures: Path = FIXTURES) -> list[dict[str, Any]]:
    """Entries (no ids: the append assigns them) of about ``tokens`` tokens (chars/4), whole
    turns, with words no earlier cycle used (``salt`` above the session's cycles)."""
    out: list[dict[str, Any]] = []
    total = 0
    for body in _entries(fixtures, salt):
        if total >= tokens and _is_user(body):
            break
        out.append(body)
        total += _estimate(body)
    return out


def jsonl(entries: list[dict[str, Any]], session_id: str = "scale") -> str:
    header = {"type": "session", "version": 3, "id": session_id, "timestamp": _TS, "cwd": "/"}
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in entries]
    return "\n".join(lines) + "\n"
