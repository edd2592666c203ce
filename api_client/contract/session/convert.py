"""Entry → message mappings (docs/rules.md "Messages") and ``convertToLlm``
(docs/rules.md "Conversion for the model").

Messages stay JSON dicts: what the model receives is exactly what the session stores. The
reference normalises whitespace inside the context wrappers; Compactor inserts summaries
verbatim (Q9 of docs/differences.md).

The two context wrappers are the prompt templates ``compaction-summary-context`` and
``branch-summary-context`` (``prompts/*.md``, the one home of every prompt text). Installed wheels
carry copies under ``api_client/contract/session/_wrappers``; an editable install reads
``prompts/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template
from typing import Any

from api_client.contract.session._entries import (
    BranchSummaryEntry,
    CompactionEntry,
    CustomMessageEntry,
    Entry,
    Message,
    MessageEntry,
)

__all__ = [
    "PRUNED_PLACEHOLDER",
    "branch_context_intro",
    "compaction_context_intro",
    "compaction_summary_message",
    "convert_message",
    "convert_to_llm",
    "for_branch",
    "for_compaction",
    "for_context",
    "text_of_blocks",
    "wrap_branch_summary",
    "wrap_compaction_summary",
]

PRUNED_PLACEHOLDER = "[Output truncated]"


def text_of_blocks(content: Any) -> str:
    """The string content, or its text blocks concatenated without separator."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        b.get("text", "")
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def _custom_message(entry: CustomMessageEntry) -> Message:
    message: Message = {
        "role": "custom",
        "customType": entry.custom_type,
        "content": entry.content,
        "display": entry.raw.get("display", False),
        "timestamp": entry.timestamp_ms,
    }
    if "details" in entry.raw:
        message["details"] = entry.raw["details"]
    return message


def _branch_summary_message(entry: BranchSummaryEntry) -> Message:
    return {
        "role": "branchSummary",
        "summary": entry.summary,
        "fromId": entry.from_id,
        "timestamp": entry.timestamp_ms,
    }


def compaction_summary_message(entry: CompactionEntry) -> Message:
    message: Message = {
        "role": "compactionSummary",
        "summary": entry.summary,
        "tokensBefore": entry.tokens_before,
    }
    if entry.short_summary is not None:
        message["shortSummary"] = entry.short_summary
    message["timestamp"] = entry.timestamp_ms
    return message


def for_context(entry: Entry) -> Message | None:
    """Mapping (A): context building. Compactions are handled by the caller."""
    if isinstance(entry, MessageEntry):
        return entry.message
    if isinstance(entry, CustomMessageEntry):
        return _custom_message(entry)
    if isinstance(entry, BranchSummaryEntry) and entry.summary:
        return _branch_summary_message(entry)
    return None


def for_compaction(entry: Entry) -> Message | None:
    """Mapping (B): compaction inputs; a branch summary counts even when empty."""
    if isinstance(entry, MessageEntry):
        return entry.message
    if isinstance(entry, CustomMessageEntry):
        return _custom_message(entry)
    if isinstance(entry, BranchSummaryEntry):
        return _branch_summary_message(entry)
    return None


def for_branch(entry: Entry) -> Message | None:
    """Mapping (C): branch-summary inputs; tool results are skipped, compactions included."""
    if isinstance(entry, MessageEntry):
        return None if entry.role == "toolResult" else entry.message
    if isinstance(entry, CompactionEntry):
        return compaction_summary_message(entry)
    return for_compaction(entry)


def _wrap(intro: str, summary: str) -> str:
    return f"{intro}\n\n<summary>\n{summary}\n</summary>"


_REPO_PROMPTS = Path(__file__).resolve().parents[3] / "prompts"


@cache
def _wrapper_root() -> Traversable:
    packaged = resources.files("api_client.contract.session") / "_wrappers"
    return packaged if packaged.is_dir() else _REPO_PROMPTS


@cache
def _wrapper_text(name: str) -> str:
    # Rendered as worker.compaction.prompts renders templates: no variables, `$$` is a dollar,
    # trailing whitespace dropped.
    text = (_wrapper_root() / f"{name}.md").read_text(encoding="utf-8").rstrip()
    return Template(text).substitute()


def compaction_context_intro() -> str:
    return _wrapper_text("compaction-summary-context")


def branch_context_intro() -> str:
    return _wrapper_text("branch-summary-context")


def wrap_compaction_summary(summary: str) -> str:
    return _wrap(compaction_context_intro(), summary)


def wrap_branch_summary(summary: str) -> str:
    return _wrap(branch_context_intro(), summary)


def _user(text: str, timestamp: Any) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": timestamp}


def _exit_note(message: Message, cancelled_text: str, failed_text: str) -> str:
    if message.get("cancelled"):
        return f"\n\n{cancelled_text}"
    code = message.get("exitCode")
    if code is not None and code != 0:
        return f"\n\n{failed_text} {code}"
    return ""


def _meta_notice(message: Message) -> str:
    # Display detail (our own format: docs/rules.md "Conversion for the model"): one bracketed line
    # after a blank line.
    meta = message.get("meta")
    if not isinstance(meta, dict) or not meta:
        return ""
    truncation = meta.get("truncation")
    if isinstance(truncation, dict):
        shown, total = truncation.get("outputLines"), truncation.get("totalLines")
        if shown is not None and total is not None:
            return f"\n\n[Showing {shown} of {total} lines]"
    return "\n\n[Output truncated]" if message.get("truncated") else ""


def _bash_text(message: Message) -> str:
    output = str(message.get("output") or "")
    text = f"Ran `{message.get('command', '')}`\n"
    text += f"```\n{output}\n```" if output else "(no output)"
    return (
        text
        + _exit_note(message, "(command cancelled)", "Command exited with code")
        + _meta_notice(message)
    )


def _python_text(message: Message) -> str:
    output = str(message.get("output") or "")
    text = f"Ran Python:\n```python\n{message.get('code', '')}\n```\n"
    text += f"Output:\n```\n{output}\n```" if output else "(no output)"
    return (
        text
        + _exit_note(message, "(execution cancelled)", "Execution failed with code")
        + _meta_notice(message)
    )


def _file_mention(message: Message) -> Message:
    files = [f for f in message.get("files") or [] if isinstance(f, dict)]
    parts = []
    for f in files:
        content = f.get("content")
        body = f"\n{content}\n" if content else "\n"
        parts.append(f'<file path="{f.get("path", "")}">{body}</file>')
    blocks: list[Any] = [
        {
            "type": "text",
            "text": "<system-reminder>\n" + "\n\n".join(parts) + "\n</system-reminder>",
        }
    ]
    blocks += [f["image"] for f in files if isinstance(f.get("image"), dict)]
    return {"role": "user", "content": blocks, "timestamp": message.get("timestamp")}


def _pruned_tool_result(message: Message) -> Message:
    text = text_of_blocks(message.get("content")) or PRUNED_PLACEHOLDER
    return {**message, "content": [{"type": "text", "text": text}]}


def convert_message(message: Message) -> Message | None:
    """One message in the three LLM roles, or None when it is dropped."""
    role = message.get("role")
    stamp = message.get("timestamp")
    if role in ("user", "assistant"):
        return message
    if role == "toolResult":
        return _pruned_tool_result(message) if "prunedAt" in message else message
    if role in ("bashExecution", "pythonExecution"):
        if message.get("excludeFromContext"):
            return None
        return _user(
            _bash_text(message) if role == "bashExecution" else _python_text(message), stamp
        )
    if role in ("custom", "hookMessage"):
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        return {
            "role": "user",
            "content": blocks if isinstance(blocks, list) else [],
            "timestamp": stamp,
        }
    if role == "branchSummary":
        return _user(wrap_branch_summary(str(message.get("summary", ""))), stamp)
    if role == "compactionSummary":
        return _user(wrap_compaction_summary(str(message.get("summary", ""))), stamp)
    if role == "fileMention":
        return _file_mention(message)
    return None


def convert_to_llm(messages: Iterable[Message]) -> list[Message]:
    return [m for m in map(convert_message, messages) if m is not None]
