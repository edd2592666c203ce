"""Builders for the hook tests: a small path, a plan over it, runners over given plugins."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from api_client.contract.session import Entry, parse_entry
from worker.compaction import CompactionSettings, Preparation
from worker.hooks import HookRunner
from worker.hooks.loading import new_plugin_manager, register_plugin

TS = "2026-01-01T00:00:00.000Z"


def make_path() -> list[Entry]:
    """u1 → a1 (tool call) → t1 (tool result) → u2 → a2."""
    raws: list[dict[str, Any]] = [
        {"role": "user", "content": "fix the importer", "timestamp": 1},
        {"role": "assistant", "content": [{"type": "toolCall", "id": "c1", "name": "read",
                                           "arguments": {"path": "a.py"}}], "timestamp": 2},
        {"role": "toolResult", "toolCallId": "c1", "toolName": "read",
         "content": [{"type": "text", "text": "print(1)"}], "isError": False, "timestamp": 3},
        {"role": "user", "content": "now run it", "timestamp": 4},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}], "timestamp": 5},
    ]
    ids = ["u1", "a1", "t1", "u2", "a2"]
    entries = []
    parent = None
    for entry_id, message in zip(ids, raws, strict=True):
        entries.append(parse_entry({"type": "message", "id": entry_id, "parentId": parent,
                                    "timestamp": TS, "message": message}))
        parent = entry_id
    return entries


def make_preparation(path: list[Entry]) -> Preparation:
    messages = tuple(entry.raw["message"] for entry in path)
    return Preparation(
        first_kept_entry_id="u2", first_kept_entry_index=3, turn_start_index=-1,
        is_split_turn=False, tokens_before=1234, keep_recent_tokens=20000,
        messages_to_summarize=messages[:3], turn_prefix_messages=(), recent_messages=messages[3:],
        summarize_entry_ids=("u1", "a1", "t1"), turn_prefix_entry_ids=(),
        kept_entry_ids=("u2", "a2"),
        previous_summary=None, read_files=("a.py",), modified_files=(),
        settings=CompactionSettings(),
    )


def runner_with(*plugins: Any, timeout_s: float = 5.0, max_calls: int = 16) -> HookRunner:
    manager = new_plugin_manager()
    for number, plugin in enumerate(plugins):
        register_plugin(manager, plugin, getattr(plugin, "name", f"p{number}"))
    return HookRunner(manager, timeout_s=timeout_s, max_calls=max_calls)


class Token:
    """A cancel token the test flips."""

    def __init__(self) -> None:
        self.cancelled = False

    def is_cancelled(self) -> bool:
        return self.cancelled


RECEIVER = Path(__file__).resolve().parents[2] / "examples" / "webhook_receiver.py"


def load_receiver() -> ModuleType:
    """``examples/webhook_receiver.py`` (not a package) as a module."""
    spec = importlib.util.spec_from_file_location("webhook_receiver", RECEIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
