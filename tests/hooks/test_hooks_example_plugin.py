"""The installed example plugin, loaded through its entry point, steered in-process and by env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api_client.contract.session import Entry
from worker.compaction import Preparation
from worker.hooks import HookRunner, HookSettings, load_hook_runner


@pytest.fixture
def runner(example_plugin: Any) -> HookRunner:
    return load_hook_runner(HookSettings(entry_points=["example"], timeout_s=0.5))


def test_unconfigured_plugin_answers_nothing(runner: HookRunner, example_plugin: Any,
                                             path: list[Entry],
                                             preparation: Preparation) -> None:
    assert runner.before_compact(preparation, path, "ci", None, session_id="s") is None
    assert runner.compacting("s", [{"role": "user", "content": "x"}]) is None
    assert runner.before_tree({"targetId": "u1", "userWantsSummary": True}, None) is None
    assert [call["event"] for call in example_plugin.CALLS] == [
        "session_before_compact", "session_compacting", "session_before_tree"]
    assert example_plugin.CALLS[0] == {"event": "session_before_compact", "session_id": "s",
                                       "path_length": 5, "first_kept_entry_id": "u2",
                                       "custom_instructions": "ci"}


@pytest.mark.parametrize(
    ("config", "check"),
    [
        ({"before_compact": "cancel"}, lambda r: r.cancel),
        ({"before_compact": {"compaction": {"summary": "mine"}}},
         lambda r: r.compaction == {"summary": "mine", "firstKeptEntryId": "u2",
                                    "tokensBefore": 1234,
                                    "fromExtension": True}),
        ({"before_compact": "raise"}, lambda r: r is None),
        ({"before_compact": {"sleep": 2}}, lambda r: r is None),
    ],
    ids=["cancel", "compaction", "raise", "slow"],
)
def test_before_compact_behaviours(runner: HookRunner, example_plugin: Any, path: list[Entry],
                                   preparation: Preparation, config: dict[str, Any],
                                   check: Any) -> None:
    example_plugin.configure(**config)
    assert check(runner.before_compact(preparation, path, None, None))


def test_compacting_and_tree_behaviours(runner: HookRunner, example_plugin: Any) -> None:
    example_plugin.configure(compacting={"context": ["c"], "prompt": "P", "preserveData": {"a": 1}},
                             before_tree="cancel")
    result = runner.compacting("s", [])
    assert result is not None and (result.context, result.prompt, result.preserve_data) == (
        ["c"], "P", {"a": 1})
    tree = runner.before_tree({"targetId": "u1", "userWantsSummary": False}, None)
    assert tree is not None and tree.cancel


def test_notifications_are_recorded_to_a_file(runner: HookRunner, example_plugin: Any,
                                              tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("COMPACTOR_EXAMPLE_PLUGIN_LOG", str(log))
    runner.compact_done({"id": "c1", "details": {"readFiles": ["a"]}}, True, session_id="s")
    runner.tree_done("n", "o", None, None, session_id="s")
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [
        {"event": "session_compact", "session_id": "s",
         "entry": {"id": "c1", "details": {"readFiles": ["a"]}}, "from_extension": True},
        {"event": "session_tree", "session_id": "s", "new_leaf_id": "n", "old_leaf_id": "o",
         "summary_entry": None, "from_extension": None},
    ]
    assert lines == example_plugin.CALLS


def test_configuration_from_environment(runner: HookRunner, monkeypatch: pytest.MonkeyPatch,
                                        example_plugin: Any) -> None:
    monkeypatch.setenv("COMPACTOR_EXAMPLE_PLUGIN",
                       json.dumps({"before_tree": {"summary": {"summary": "env"}}}))
    result = runner.before_tree({"targetId": "u1", "userWantsSummary": True}, None)
    assert result is not None and result.summary == {"summary": "env", "fromExtension": True}
