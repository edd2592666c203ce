"""File-operation tracking and the file-list tag block (docs/rules.md "File operations")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.tokens.jsjson import js_sort_key

__all__ = [
    "FileOps",
    "add_details_file_ops",
    "compute_file_lists",
    "extract_all_file_ops",
    "extract_file_ops",
    "file_lists",
    "format_file_operations",
    "strip_file_operation_tags",
    "tagged_paths",
]

_TOOL_TO_SET = {"read": "read", "write": "written", "edit": "edited"}
_READ_TAG = "read-files"
_MODIFIED_TAG = "modified-files"


@dataclass
class FileOps:
    """Three insertion-ordered sets of paths (dicts with ``None`` values keep the order)."""

    read: dict[str, None] = field(default_factory=dict)
    written: dict[str, None] = field(default_factory=dict)
    edited: dict[str, None] = field(default_factory=dict)

    def add(self, kind: str, path: str) -> None:
        """Add ``path`` to the set named ``kind`` (``read``, ``written`` or ``edited``)."""
        target: dict[str, None] = getattr(self, kind)
        target.setdefault(path, None)


def file_lists(details: Any,
               messages: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """``(read_files, modified_files)`` of the operations in ``details`` (a previous
    compaction's; None: none), then of ``messages``."""
    ops = FileOps()
    add_details_file_ops(details, ops)
    extract_all_file_ops(messages, ops)
    return compute_file_lists(ops)


def extract_file_ops(message: Mapping[str, Any], ops: FileOps) -> None:
    """Record the paths of ``read``/``write``/``edit`` tool calls of an assistant message."""
    extract_all_file_ops((message,), ops)


def extract_all_file_ops(messages: Iterable[Mapping[str, Any]], ops: FileOps) -> None:
    """Record the ``read``/``write``/``edit`` paths of ``messages``' assistant messages, in
    order."""
    for message in messages:
        if message.get("role") == "assistant":
            for kind, path in _file_ops_of(message):
                ops.add(kind, path)


def _file_ops_of(message: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    content = message.get("content")
    if not isinstance(content, list):
        return ()
    found: list[tuple[str, str]] = []
    for block in content:
        if not isinstance(block, Mapping) or block.get("type") != "toolCall":
            continue
        name = block.get("name")
        kind = _TOOL_TO_SET.get(name) if isinstance(name, str) else None
        arguments = block.get("arguments")
        if kind is None or not isinstance(arguments, Mapping):
            continue
        path = arguments.get("path")
        if isinstance(path, str) and path:
            found.append((kind, path))
    return tuple(found)


def add_details_file_ops(details: Any, ops: FileOps) -> None:
    """Fold the lists stored in a compaction's or branch summary's ``details`` into ``ops``.

    ``readFiles`` go to ``read`` and ``modifiedFiles`` to ``edited``, each only when it is a
    list. The caller decides whether the entry qualifies (not ``fromExtension``). Non-string
    items are skipped: they cannot be paths and would break the UTF-16 sort.
    """
    if not isinstance(details, Mapping):
        return
    for key, kind in (("readFiles", "read"), ("modifiedFiles", "edited")):
        paths = details.get(key)
        if isinstance(paths, list):
            for path in paths:
                if isinstance(path, str):
                    ops.add(kind, path)


def compute_file_lists(ops: FileOps) -> tuple[list[str], list[str]]:
    """``(read_files, modified_files)``: read-only paths and edited ∪ written, UTF-16 sorted."""
    modified = {**ops.edited, **ops.written}
    read_only = [path for path in ops.read if path not in modified]
    return sorted(read_only, key=js_sort_key), sorted(modified, key=js_sort_key)


def format_file_operations(read: Iterable[str], modified: Iterable[str]) -> str:
    """The tag block appended to a summary: Compactor's documented layout (Q8).

    A blank line, then a ``<read-files>`` and/or a ``<modified-files>`` block with one path per
    line, the two separated by a blank line; ``""`` when both lists are empty.
    """
    blocks = [
        f"<{tag}>\n" + "\n".join(paths) + f"\n</{tag}>"
        for tag, paths in ((_READ_TAG, list(read)), (_MODIFIED_TAG, list(modified)))
        if paths
    ]
    return "\n\n" + "\n\n".join(blocks) if blocks else ""


def strip_file_operation_tags(summary: str) -> str:
    """Remove trailing file-operation tag blocks from a previous summary (Q20).

    Handles Compactor's layout and the reference's glued one, and repeats because the reference
    can leave several blocks behind.
    """
    text = summary
    while True:
        before = text
        for tag in (_MODIFIED_TAG, _READ_TAG):
            text = _cut_block(text, tag)
        if text == before:
            return text


def _cut_block(text: str, tag: str) -> str:
    if not text.endswith(f"</{tag}>"):
        return text
    start = text.rfind(f"<{tag}>")
    if start < 0:
        return text
    text = text[:start]
    return text[:-2] if text.endswith("\n\n") else text


def tagged_paths(summary: str) -> list[str]:
    """The paths the trailing tag blocks of ``summary`` list, in their order (no tags: [])."""
    tail = summary[len(strip_file_operation_tags(summary)):]
    tags = (_READ_TAG, _MODIFIED_TAG)
    markers = {f"<{t}>" for t in tags} | {f"</{t}>" for t in tags}
    return [line for line in tail.split("\n") if line and line not in markers]

