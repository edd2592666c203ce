"""Validation of hook-supplied compactions and branch summaries (pure; table-driven)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from api_client.contract.errors import HookError
from api_client.contract.session import Entry
from worker.hooks import HookValidationError, validate_branch_summary, validate_compaction

OK = {"summary": "S", "firstKeptEntryId": "u2", "tokensBefore": 100}


@pytest.mark.parametrize(
    ("compaction", "expected"),
    [
        (OK, {**OK, "fromExtension": True}),
        ({**OK, "tokensBefore": 0}, {**OK, "tokensBefore": 0, "fromExtension": True}),
        ({**OK, "tokensBefore": 12.0}, {**OK, "tokensBefore": 12, "fromExtension": True}),
        ({**OK, "shortSummary": "s", "details": {"readFiles": ("a",)}, "preserveData": {"k": 1}},
         {**OK, "shortSummary": "s", "details": {"readFiles": ["a"]}, "preserveData": {"k": 1},
          "fromExtension": True}),
        ({**OK, "details": None, "id": "evil", "parentId": "x", "fromExtension": False},
         {**OK, "fromExtension": True}),
        (MappingProxyType({**OK, "firstKeptEntryId": "a2"}),
         {**OK, "firstKeptEntryId": "a2", "fromExtension": True}),
        ({**OK, "firstKeptEntryId": "u1"}, {**OK, "firstKeptEntryId": "u1", "fromExtension": True}),
    ],
    ids=["minimal", "zero-tokens", "whole-float", "all-keys", "unknown-keys-dropped", "mapping",
         "first-entry"],
)
def test_valid_compactions(compaction: Any, expected: dict[str, Any], path: list[Entry]) -> None:
    assert validate_compaction(compaction, path) == expected


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"firstKeptEntryId": "t1"}, "t1 is a tool result"),
        ({"firstKeptEntryId": "nope"}, "nope is not on the session path"),
        ({"firstKeptEntryId": ""}, "firstKeptEntryId must be a non-empty string"),
        ({"firstKeptEntryId": 3}, "firstKeptEntryId must be a non-empty string"),
        ({"firstKeptEntryId": None}, "firstKeptEntryId must be a non-empty string"),
        ({"tokensBefore": -1}, "tokensBefore must be a non-negative integer"),
        ({"tokensBefore": 1.5}, "tokensBefore must be a non-negative integer"),
        ({"tokensBefore": "100"}, "tokensBefore must be a non-negative integer"),
        ({"tokensBefore": True}, "tokensBefore must be a non-negative integer"),
        ({"tokensBefore": float("nan")}, "tokensBefore must be a non-negative integer"),
        ({"tokensBefore": None}, "tokensBefore must be a non-negative integer"),
        ({"summary": ""}, "summary must be non-empty text"),
        ({"summary": " \n"}, "summary must be non-empty text"),
        ({"summary": ["S"]}, "summary must be non-empty text"),
        ({"summary": None}, "summary must be non-empty text"),
        ({"shortSummary": 5}, "shortSummary must be a string"),
        ({"preserveData": [1]}, "preserveData must be an object"),
        ({"details": {"x": object()}}, "details must be JSON"),
        ({"preserveData": {"x": float("inf")}}, "preserveData must be JSON"),
    ],
)
def test_invalid_compactions(change: dict[str, Any], problem: str, path: list[Entry]) -> None:
    with pytest.raises(HookValidationError, match=problem) as caught:
        validate_compaction({**OK, **change}, path, plugin="acme")
    assert isinstance(caught.value, HookError)
    assert "from acme" in str(caught.value)


def test_off_path_entry_is_refused(path: list[Entry]) -> None:
    # a2 exists in the session but not on the path up to u2.
    with pytest.raises(HookValidationError, match="not on the session path"):
        validate_compaction({**OK, "firstKeptEntryId": "a2"}, path[:4])


def test_compaction_must_be_an_object(path: list[Entry]) -> None:
    with pytest.raises(HookValidationError, match="compaction must be an object"):
        validate_compaction("S", path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        ({"summary": "T"}, {"summary": "T", "fromExtension": True}),
        ({"summary": "T", "details": {"readFiles": ["a"]}},
         {"summary": "T", "details": {"readFiles": ["a"]}, "fromExtension": True}),
        ({"summary": "T", "details": None, "fromId": "x"}, {"summary": "T", "fromExtension": True}),
    ],
)
def test_valid_branch_summaries(summary: dict[str, Any], expected: dict[str, Any]) -> None:
    assert validate_branch_summary(summary) == expected


@pytest.mark.parametrize(
    ("summary", "problem"),
    [({"summary": ""}, "non-empty"), ({}, "non-empty"), ({"summary": 1}, "non-empty"),
     ({"summary": "T", "details": {1j}}, "details must be JSON"), ("T", "must be an object")],
)
def test_invalid_branch_summaries(summary: Any, problem: str) -> None:
    with pytest.raises(HookValidationError, match=problem) as caught:
        validate_branch_summary(summary)
    assert caught.value.event == "session_before_tree"
