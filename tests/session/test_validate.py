"""The store's refusals (api_client.contract.session.validate): one typed error per misuse."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path
from typing import Any

import pytest

from api_client.contract.errors import (
    InvalidEntryError,
    InvalidTextError,
    MessageSchemaError,
    NestingTooDeepError,
    NonFiniteNumberError,
    SessionFormatError,
    UnsafeEntryIdError,
    UnserializableValueError,
)
from api_client.contract.session import load_session
from api_client.contract.session.validate import (
    MAX_NESTING,
    check_entry,
    check_entry_id,
    check_json_value,
    check_message,
)


def msg(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "message", "id": "a1b2c3d4", "parentId": None, "message": message, **extra}


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for i in range(depth):
        value = {"k": value} if i % 2 else [value]
    return value


USER = {"role": "user", "content": "hi", "timestamp": 1}
ASSISTANT = {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                              {"type": "toolCall", "id": "c1", "name": "read",
                                               "arguments": {"path": "a"}}]}
TOOL = {"role": "toolResult", "toolCallId": "c1", "toolName": "read",
        "content": [{"type": "text", "text": "x"}]}


@pytest.mark.parametrize(
    ("raw", "error", "words"),
    [
        (msg({**USER, "timestamp": datetime.datetime(2024, 1, 1)}), UnserializableValueError,
         "message.timestamp: a datetime"),
        (msg({**USER, "content": b"bytes"}), UnserializableValueError, "a bytes"),
        (msg({**USER, "meta": {1: "int key"}}), UnserializableValueError, "key 1"),
        (msg({**USER, "meta": {"x": {1, 2}}}), UnserializableValueError, "message.meta.x"),
        (msg({**USER, "n": decimal.Decimal("1.5")}), UnserializableValueError, "Decimal"),
        (msg({**USER, "timestamp": float("nan")}), NonFiniteNumberError, "nan is not a JSON"),
        (msg({**USER, "x": [1.0, float("-inf")]}), NonFiniteNumberError, "message.x[1]"),
        (msg({**USER, "content": "bad \ud800 text"}), InvalidTextError, "lone surrogate"),
        (msg({**USER, "k\udfff": 1}), InvalidTextError, "lone surrogate"),
        (msg({**USER, "deep": nested(MAX_NESTING)}), NestingTooDeepError, "deeper than 64"),
        (msg({**USER, "deep": nested(100_000)}), NestingTooDeepError, "deeper than 64"),
        (msg({"content": "no role"}), MessageSchemaError, "no string 'role'"),
        (msg({"role": "", "content": "x"}), MessageSchemaError, "no string 'role'"),
        (msg({"role": "user"}), MessageSchemaError, "user message has no 'content'"),
        (msg({"role": "user", "content": 5}), MessageSchemaError, "must be a list"),
        (msg({"role": "user", "content": [{"type": "toolCall", "id": "a", "name": "b"}]}),
         MessageSchemaError, "allowed: image, text"),
        (msg({"role": "user", "content": ["plain"]}), MessageSchemaError, "[0] is not a block"),
        (msg({"role": "assistant", "content": "plain text"}), MessageSchemaError,
         "assistant message content must be a list"),
        (msg({"role": "assistant"}), MessageSchemaError, "assistant message has no 'content'"),
        (msg({"role": "assistant", "content": [{"type": "text"}]}), MessageSchemaError,
         "text block without string 'text'"),
        (msg({"role": "assistant", "content": [{"type": "toolCall", "name": "x"}]}),
         MessageSchemaError, "toolCall block without"),
        (msg({k: v for k, v in TOOL.items() if k != "toolCallId"}), MessageSchemaError,
         "no 'toolCallId'"),
        (msg({**TOOL, "toolCallId": ""}), MessageSchemaError, "no 'toolCallId'"),
        (msg({k: v for k, v in TOOL.items() if k != "content"}), MessageSchemaError,
         "toolResult message has no 'content'"),
        (msg({"role": "custom", "customType": "x"}), MessageSchemaError, "no 'content'"),
        ({"type": "message", "message": "hi"}, MessageSchemaError, "must be a JSON object"),
        (msg(USER, id='a"b'), UnsafeEntryIdError, "'id' 'a\"b'"),
        (msg(USER, id="a\nb"), UnsafeEntryIdError, "'id'"),
        (msg(USER, id=""), UnsafeEntryIdError, "'id'"),
        (msg(USER, id="x" * 129), UnsafeEntryIdError, "'id'"),
        (msg(USER, parentId="p p"), UnsafeEntryIdError, "'parentId'"),
        ({"type": "compaction", "id": "c", "summary": "s", "firstKeptEntryId": "a'b",
          "tokensBefore": 1}, UnsafeEntryIdError, "'firstKeptEntryId'"),
        ({"type": "label", "id": "l", "targetId": "a{b}"}, UnsafeEntryIdError, "'targetId'"),
    ],
)
def test_refused(raw: dict[str, Any], error: type[InvalidEntryError], words: str) -> None:
    with pytest.raises(error) as caught:
        check_entry(raw, source="append to s1")
    assert words in str(caught.value)
    assert str(caught.value).startswith("append to s1: ")
    assert isinstance(caught.value, SessionFormatError)  # the CLI's exit-2 family


@pytest.mark.parametrize(
    "raw",
    [
        msg(USER),
        msg({**USER, "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "x",
                                                                  "mimeType": "image/png"}]}),
        msg(ASSISTANT),
        msg({**ASSISTANT, "content": []}),
        msg(TOOL),
        msg({**TOOL, "content": "string content counts too"}),
        msg({"role": "bashExecution", "command": "ls", "output": "", "exitCode": None}),
        msg({"role": "somethingNew", "whatever": [1, 2]}),  # unknown roles round-trip
        msg({**USER, "deep": nested(MAX_NESTING - 3)}),
        msg({**USER, "n": 1.5, "big": 10**30, "flag": True, "none": None}),
        msg({**USER, "content": "émoji 🎉 and 中文"}),
        msg(USER, id="0b2f-uuid_like.1:2"),
        {"type": "branch_summary", "id": "b1", "fromId": "root", "summary": ""},
        {"type": "weird_future_type", "id": "w1", "payload": {"a": [1]}},
    ],
)
def test_accepted(raw: dict[str, Any]) -> None:
    check_entry(raw)


@pytest.mark.parametrize("value", [[nested(MAX_NESTING - 1)], {"a": nested(MAX_NESTING - 1)}])
def test_depth_limit_counts_containers(value: Any) -> None:
    check_json_value(nested(MAX_NESTING))  # exactly MAX_NESTING levels below the top is fine
    with pytest.raises(NestingTooDeepError):
        check_json_value([value])


@pytest.mark.parametrize("bad", [None, 5, "a b", "ü", "a/b"])
def test_entry_id(bad: Any) -> None:
    with pytest.raises(UnsafeEntryIdError):
        check_entry_id(bad)
    assert check_entry_id("3848ab95") == "3848ab95"


def test_message_alone() -> None:
    check_message(TOOL)
    with pytest.raises(MessageSchemaError, match=r"^f\.jsonl:7: toolResult"):
        check_message({"role": "toolResult", "content": []}, source="f.jsonl", line=7)


def test_reference_sessions_pass(pi_dir: Path) -> None:
    for path in sorted(pi_dir.glob("*.jsonl")):
        session = load_session(path.read_text(encoding="utf-8"), source=str(path))
        for entry in session.entries:
            check_entry(entry.raw, source=str(path), line=entry.line)
