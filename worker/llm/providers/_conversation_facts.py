"""Facts the extractive summarizer reads off a conversation of LLM messages
(docs/rules.md "Conversion for the model")."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from api_client.contract.session import Message

__all__ = ["Facts", "ToolStep", "clip", "collect_facts", "first_line", "parse_sections"]

_TARGET_KEYS = ("path", "file_path", "command", "pattern", "query", "url", "name")
_FILE_TOOLS = {"read": "read", "write": "modified", "edit": "modified"}
_WRAPPED = re.compile(r"<summary>\n(.*)\n</summary>\s*$", re.DOTALL)


def clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def first_line(text: str, limit: int = 200) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return clip(line, limit)
    return ""


@dataclass
class ToolStep:
    name: str
    target: str
    error: str | None = None

    def describe(self) -> str:
        what = f"`{self.name}` {self.target}".rstrip()
        return f"{what} — failed: {self.error}" if self.error else what


@dataclass
class Facts:
    requests: list[str] = field(default_factory=list)
    # compaction/branch summaries in context
    embedded_summaries: list[str] = field(default_factory=list)
    steps: list[ToolStep] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    read: dict[str, None] = field(default_factory=dict)
    modified: dict[str, None] = field(default_factory=dict)
    last_assistant_text: str = ""
    open_request: str | None = None  # the last request no final answer followed
    pending_question: str | None = None  # the assistant's closing question to the user


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content
                       if isinstance(b, dict) and b.get("type") == "text"
                       and isinstance(b.get("text"), str))
    return ""


def _target(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return ""
    for key in _TARGET_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            # a command's whole first line: its head may follow a long `cd DIR &&`
            limit = 240 if key == "command" else 160
            return clip(first_line(value, limit), limit) if key != "path" else value
    return clip(json.dumps(arguments, ensure_ascii=False), 80) if arguments else ""


class _Collector:
    def __init__(self) -> None:
        self.facts = Facts()
        self.by_call: dict[str, ToolStep] = {}

    def user(self, message: Message) -> None:
        text = _text_of(message.get("content"))
        if not text.strip():
            return
        wrapped = _WRAPPED.search(text)
        if wrapped and text.lstrip().find("<summary>") > 0:
            self.facts.embedded_summaries.append(wrapped.group(1))
        elif text.startswith(("Ran `", "Ran Python:")):  # a command the user ran
            self.facts.steps.append(ToolStep("user command", clip(first_line(text[4:]), 160)))
            for marker in ("Command exited with code", "Execution failed with code"):
                if marker in text:
                    self.facts.errors.append(first_line(text[text.index(marker):]))
        else:
            self.facts.requests.append(text)
            self.facts.open_request = text
            self.facts.pending_question = None

    def assistant(self, message: Message) -> None:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        texts, calls = [], 0
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str) \
                    and block["text"].strip():
                texts.append(block["text"])
            elif block.get("type") == "toolCall":
                calls += 1
                self._tool_call(block)
        if message.get("stopReason") == "error" and isinstance(message.get("errorMessage"), str):
            self.facts.errors.append(first_line(message["errorMessage"]))
        if texts:
            self.facts.last_assistant_text = "\n".join(texts)
        if texts and not calls and message.get("stopReason") in (None, "stop"):
            self.facts.open_request = None  # answered
            closing = texts[-1].strip()
            self.facts.pending_question = closing if closing.endswith("?") else None

    def _tool_call(self, block: dict[str, Any]) -> None:
        name = str(block.get("name") or "tool")
        arguments = block.get("arguments")
        step = ToolStep(name, _target(arguments))
        self.facts.steps.append(step)
        if isinstance(block.get("id"), str):
            self.by_call[block["id"]] = step
        path = arguments.get("path") if isinstance(arguments, dict) else None
        if name in _FILE_TOOLS and isinstance(path, str) and path:
            (self.facts.read if _FILE_TOOLS[name] == "read" else self.facts.modified)[path] = None

    def tool_result(self, message: Message) -> None:
        if not message.get("isError"):
            return
        step = self.by_call.get(str(message.get("toolCallId")))
        reason = first_line(_text_of(message.get("content"))) or "error"
        if step is not None:
            step.error = reason
        # A long command is cut here so that the error line itself stays whole.
        label = (f"{step.name} {clip(step.target, 80)}".strip() if step
                 else str(message.get("toolName") or "tool"))
        self.facts.errors.append(f"{label}: {reason}")


def collect_facts(messages: Iterable[Message]) -> Facts:
    collector = _Collector()
    for message in messages:
        role = message.get("role")
        if role == "user":
            collector.user(message)
        elif role == "assistant":
            collector.assistant(message)
        elif role == "toolResult":
            collector.tool_result(message)
    return collector.facts


def parse_sections(summary: str) -> dict[str, list[str]]:
    """A markdown summary as ``{"Goal": lines, "Progress/Done": lines, ...}``.

    Text before the first heading is kept under ``"Additional Notes"``.
    """
    sections: dict[str, list[str]] = {}
    top, key = "Additional Notes", "Additional Notes"
    for line in summary.splitlines():
        if line.startswith("## "):
            top = key = line[3:].strip()
        elif line.startswith("### "):
            key = f"{top}/{line[4:].strip()}"
        elif line.strip():
            sections.setdefault(key, []).append(line.rstrip())
            continue
        else:
            continue
        sections.setdefault(key, [])
    return sections


def dedup(lines: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(lines))
