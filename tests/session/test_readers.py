"""JSONL readers: split at \\n only, self-parent cycles, a broken header named as line 1."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api_client.contract.errors import SessionCycleError, SessionFormatError
from api_client.contract.session import dump_record, jsonl_lines, load_session

HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z",
          "cwd": "/"}


def entry(entry_id: str, parent: str | None, text: str) -> dict[str, Any]:
    return {"type": "message", "id": entry_id, "parentId": parent,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": text, "timestamp": 1}}


def jsonl(*records: dict[str, Any], newline: str = "\n") -> str:
    # raw non-ASCII, like JSON.stringify
    return newline.join(dump_record(r) for r in records) + newline


# Raw in JSON strings (JSON.stringify and dump_record do not escape them); \x1c-\x1e, \x0b
# and \x0c are control characters, always escaped, so they cannot break a line.
@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_line_separators_inside_strings_stay_in_their_entry(char: str, newline: str) -> None:
    records = [HEADER, entry("a", None, f"one{char}two"), entry("b", "a", f"child {char}")]
    text = jsonl(*records, newline=newline)
    assert char in text and len(text.splitlines()) > len(records)  # what splitlines() would break
    session = load_session(text, source="f.jsonl")
    assert session.warnings == [] and [e.id for e in session.entries] == ["a", "b"]
    assert session.entries[0].raw["message"]["content"] == f"one{char}two"
    assert [e.id for e in session.tree().path_to("b")] == ["a", "b"]
    again = load_session(session.to_jsonl())
    assert [json.loads(x) for x in again.to_jsonl().split("\n") if x] == records  # JSON-equal


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a\nb", [(1, "a"), (2, "b")]),
        ("a\r\nb\r\n", [(1, "a"), (2, "b"), (3, "")]),
        ("a\u2028b\rc", [(1, "a\u2028b\rc")]),  # a lone CR is not a line break either
    ],
)
def test_jsonl_lines(text: str, expected: list[tuple[int, str]]) -> None:
    assert jsonl_lines(text) == expected


def test_self_parent_is_a_cycle() -> None:
    session = load_session(jsonl(HEADER, entry("a", None, "x"), entry("b", "b", "y")),
                           source="f.jsonl")
    with pytest.raises(SessionCycleError,
                       match=r"f.jsonl:3: parentId cycle: entry b is its own parent"):
        session.tree().path_to("b")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"type":"session","id":"s1","vers\n' + dump_record(entry("a", None, "x")) + "\n",
         "f.jsonl:1: first line is not a session header: it is not JSON (Unterminated string"),
        ("\n\n[1, 2]\n" + dump_record(entry("a", None, "x")) + "\n",
         "f.jsonl:3: first line is not a session header: it is not a JSON object"),
        (dump_record(entry("a", None, "x")) + "\n",
         "f.jsonl:1: first line is not a session header"),
        ("\n \n", "f.jsonl: empty session: no JSON lines"),
    ],
)
def test_a_broken_first_line_is_named_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SessionFormatError) as info:
        load_session(text, source="f.jsonl")
    assert str(info.value).startswith(message)
