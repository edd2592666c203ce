"""serializeConversation over convert_to_llm output (docs/rules.md "Serialised conversation")."""

from __future__ import annotations

from typing import Any

import pytest

from worker.compaction.serialize import normalized_conversation, serialize_conversation
from worker.tokens.jsjson import js_property_order


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, "timestamp": 1}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks), "stopReason": "stop", "timestamp": 2}


def tool_result(*blocks: dict[str, Any], is_error: bool = False) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "bash",
        "content": list(blocks),
        "isError": is_error,
        "timestamp": 3,
    }


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def thinking(t: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": t, "thinkingSignature": "sig"}


def image() -> dict[str, Any]:
    return {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": "c1", "name": name, "arguments": arguments}


CASES: list[tuple[str, list[dict[str, Any]], str]] = [
    ("empty input", [], ""),
    ("user string", [user("hello")], "[User]: hello"),
    ("user blocks joined without separator", [user([text("a"), text("b")])], "[User]: ab"),
    ("user images ignored", [user([text("look"), image(), text(" here")])], "[User]: look here"),
    ("user empty string emits nothing", [user("")], ""),
    ("user only image emits nothing", [user([image()])], ""),
    ("user empty blocks emit nothing", [user([text(""), text("")])], ""),
    ("user unicode kept", [user("héllo 😀 日本")], "[User]: héllo 😀 日本"),
    ("user newlines kept verbatim", [user("a\n\nb")], "[User]: a\n\nb"),
    ("assistant text", [assistant(text("hi"))], "[Assistant]: hi"),
    (
        "assistant texts joined by newline",
        [assistant(text("one"), text("two"))],
        "[Assistant]: one\ntwo",
    ),
    (
        "assistant fixed part order regardless of block order",
        [assistant(call("ls", {}), text("done"), thinking("hmm"))],
        "[Assistant thinking]: hmm\n\n[Assistant]: done\n\n[Assistant tool calls]: ls()",
    ),
    (
        "thinking blocks joined by newline",
        [assistant(thinking("a"), text("x"), thinking("b"))],
        "[Assistant thinking]: a\nb\n\n[Assistant]: x",
    ),
    ("empty text block still creates its part", [assistant(text(""))], "[Assistant]: "),
    (
        "empty thinking block still creates its part",
        [assistant(thinking(""), text("ok"))],
        "[Assistant thinking]: \n\n[Assistant]: ok",
    ),
    ("assistant with no blocks emits nothing", [assistant()], ""),
    (
        "unknown assistant block ignored",
        [assistant({"type": "redacted"}, text("t"))],
        "[Assistant]: t",
    ),
    (
        "tool call string args are JSON-quoted",
        [assistant(call("read", {"path": "src/a.py"}))],
        '[Assistant tool calls]: read(path="src/a.py")',
    ),
    (
        "tool call arg separator and call separator",
        [assistant(call("read", {"path": "a", "offset": 10}), call("bash", {"command": "ls -la"}))],
        '[Assistant tool calls]: read(path="a", offset=10); bash(command="ls -la")',
    ),
    (
        "nested args compact JSON, insertion order inside",
        [
            assistant(
                call("edit", {"edits": [{"old": "x", "new": "y"}], "opts": {"z": 1, "a": None}})
            )
        ],
        '[Assistant tool calls]: edit(edits=[{"old":"x","new":"y"}], opts={"z":1,"a":null})',
    ),
    (
        "integer-like keys first ascending, then insertion order",
        [assistant(call("f", {"b": 1, "10": 2, "a": 3, "2": 4}))],
        "[Assistant tool calls]: f(2=4, 10=2, b=1, a=3)",
    ),
    (
        "integer-like keys inside nested values too",
        [assistant(call("f", {"m": {"x": 1, "1": 2}}))],
        '[Assistant tool calls]: f(m={"1":2,"x":1})',
    ),
    (
        "values: bool, null, integral float, small float",
        [assistant(call("f", {"a": True, "b": None, "c": 2.0, "d": 0.00001, "e": 1e21}))],
        "[Assistant tool calls]: f(a=true, b=null, c=2, d=0.00001, e=1e+21)",
    ),
    (
        "unicode not escaped, control characters escaped",
        [assistant(call("write", {"content": 'é😀\n\t"q"\\\x01'}))],
        '[Assistant tool calls]: write(content="é😀\\n\\t\\"q\\"\\\\\\u0001")',
    ),
    (
        "lone surrogate escaped",
        [assistant(call("f", {"s": "\ud800"}))],
        '[Assistant tool calls]: f(s="\\ud800")',
    ),
    (
        "tool call without arguments object",
        [assistant(call("noop", None))],
        "[Assistant tool calls]: noop()",
    ),
    ("tool result text", [tool_result(text("out"))], "[Tool result]: out"),
    (
        "tool result blocks concatenated, images ignored",
        [tool_result(text("a"), image(), text("b"))],
        "[Tool result]: ab",
    ),
    (
        "tool result error flag not shown",
        [tool_result(text("boom"), is_error=True)],
        "[Tool result]: boom",
    ),
    ("empty tool result emits nothing", [tool_result(image())], ""),
    ("non-LLM roles ignored", [{"role": "bashExecution", "command": "ls", "output": "x"}], ""),
    (
        "parts joined by blank line, empty ones skipped",
        [
            user("fix it"),
            assistant(thinking("plan"), text("on it"), call("read", {"path": "a.py"})),
            tool_result(text("print(1)")),
            user(""),
            assistant(text("fixed")),
        ],
        "[User]: fix it\n\n[Assistant thinking]: plan\n\n[Assistant]: on it\n\n"
        '[Assistant tool calls]: read(path="a.py")\n\n'
        "[Tool result]: print(1)\n\n[Assistant]: fixed",
    ),
    (
        "wrapped compaction summary appears as user text",
        [user([text("intro\n\n<summary>\nS\n</summary>")])],
        "[User]: intro\n\n<summary>\nS\n</summary>",
    ),
]


@pytest.mark.parametrize(
    ("messages", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_serialize_conversation(messages: list[dict[str, Any]], expected: str) -> None:
    assert serialize_conversation(messages) == expected


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["b", "a"], ["b", "a"]),
        (["x", "3", "1", "y"], ["1", "3", "x", "y"]),
        (["01", "1", "-1", "1.5", "0"], ["0", "1", "01", "-1", "1.5"]),
        (["4294967295", "4294967294"], ["4294967294", "4294967295"]),  # 2**32-1 is no index
        (["٣", "2"], ["2", "٣"]),  # non-ASCII digits are ordinary keys
    ],
)
def test_js_property_order(keys: list[str], expected: list[str]) -> None:
    assert js_property_order(dict.fromkeys(keys, 0)) == expected


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [user("")],  # no part at all
        [user("  a\n\n b\t"), user("c")],
        [assistant(thinking(" t "), text("x\ny"), {"type": "toolCall", "id": "1", "name": "ls",
                                                    "arguments": {"p": "a  b"}})],
        [tool_result(text("\n\n")), user("after an empty-looking result")],
        [user("same"), user("same")],
    ],
)
def test_normalized_conversation_is_the_whitespace_normalized_serialization(messages: list) -> None:
    # What the fact ledger looks facts up in: it must equal normalizing the whole text, twice
    # in a row (the second call answers from the per-message memo).
    expected = " ".join(serialize_conversation(messages).split())
    assert normalized_conversation(messages) == expected
    assert normalized_conversation(messages) == expected
