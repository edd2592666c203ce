"""File-operation tracking, the tag block and its stripping (docs/rules.md "File operations")."""

from __future__ import annotations

from typing import Any

import pytest

from worker.compaction.fileops import (
    FileOps,
    add_details_file_ops,
    compute_file_lists,
    extract_all_file_ops,
    extract_file_ops,
    format_file_operations,
    strip_file_operation_tags,
)


def call(name: Any, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    block = {"type": "toolCall", "id": "c", "name": name, "arguments": arguments}
    block.update(extra)
    return block


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks), "stopReason": "toolUse"}


def ops_of(ops: FileOps) -> tuple[list[str], list[str], list[str]]:
    return list(ops.read), list(ops.written), list(ops.edited)


EXTRACT_CASES: list[tuple[str, list[dict[str, Any]], tuple[list[str], list[str], list[str]]]] = [
    ("read", [assistant(call("read", {"path": "a"}))], (["a"], [], [])),
    ("write", [assistant(call("write", {"path": "w", "content": "x"}))], ([], ["w"], [])),
    ("edit", [assistant(call("edit", {"path": "e", "oldText": "a"}))], ([], [], ["e"])),
    (
        "other tools ignored",
        [assistant(call("bash", {"path": "x"}), call("grep", {"path": "y"}))],
        ([], [], []),
    ),
    ("tool name is case-sensitive", [assistant(call("Read", {"path": "a"}))], ([], [], [])),
    ("empty path ignored", [assistant(call("read", {"path": ""}))], ([], [], [])),
    (
        "non-string path ignored",
        [assistant(call("read", {"path": 7}), call("edit", {"path": ["a"]}))],
        ([], [], []),
    ),
    ("missing path ignored", [assistant(call("read", {"file": "a"}))], ([], [], [])),
    ("null arguments ignored", [assistant(call("read", None))], ([], [], [])),
    ("list arguments ignored", [assistant(call("read", ["a"]))], ([], [], [])),
    (
        "text and thinking blocks ignored",
        [assistant({"type": "text", "text": "read a"})],
        ([], [], []),
    ),
    (
        "user message ignored",
        [{"role": "user", "content": [call("read", {"path": "a"})]}],
        ([], [], []),
    ),
    (
        "tool result ignored",
        [{"role": "toolResult", "toolName": "read", "content": [call("read", {"path": "a"})]}],
        ([], [], []),
    ),
    ("string content ignored", [{"role": "assistant", "content": "read a"}], ([], [], [])),
    (
        "insertion order kept, duplicates collapse",
        [
            assistant(call("read", {"path": "z"}), call("read", {"path": "a"})),
            assistant(call("read", {"path": "z"}), call("read", {"path": "m"})),
        ],
        (["z", "a", "m"], [], []),
    ),
    (
        "same path in several sets",
        [
            assistant(
                call("read", {"path": "f"}),
                call("edit", {"path": "f"}),
                call("write", {"path": "f"}),
            )
        ],
        (["f"], ["f"], ["f"]),
    ),
]


@pytest.mark.parametrize(
    ("messages", "expected"), [c[1:] for c in EXTRACT_CASES], ids=[c[0] for c in EXTRACT_CASES]
)
def test_extract_file_ops(messages: list[dict[str, Any]], expected: tuple[list[str], ...]) -> None:
    ops = FileOps()
    for message in messages:
        extract_file_ops(message, ops)
    assert ops_of(ops) == expected
    together = FileOps()
    extract_all_file_ops(iter(messages), together)  # the plan's one call for all messages
    assert ops_of(together) == expected


DETAILS_CASES: list[tuple[str, Any, tuple[list[str], list[str], list[str]]]] = [
    ("both lists", {"readFiles": ["r1", "r2"], "modifiedFiles": ["m"]}, (["r1", "r2"], [], ["m"])),
    ("modified go to edited, not written", {"modifiedFiles": ["m1", "m2"]}, ([], [], ["m1", "m2"])),
    ("non-list fields ignored", {"readFiles": "r", "modifiedFiles": {"m": 1}}, ([], [], [])),
    ("non-string items skipped", {"readFiles": ["ok", 3, None, ["x"]]}, (["ok"], [], [])),
    ("details not an object", ["readFiles"], ([], [], [])),
    ("details null", None, ([], [], [])),
    ("empty object", {}, ([], [], [])),
]


@pytest.mark.parametrize(
    ("details", "expected"), [c[1:] for c in DETAILS_CASES], ids=[c[0] for c in DETAILS_CASES]
)
def test_add_details_file_ops(details: Any, expected: tuple[list[str], ...]) -> None:
    ops = FileOps()
    add_details_file_ops(details, ops)
    assert ops_of(ops) == expected


def test_details_accumulate_with_extracted_ops() -> None:
    ops = FileOps()
    add_details_file_ops({"readFiles": ["old-read", "shared"], "modifiedFiles": ["old-mod"]}, ops)
    extract_file_ops(
        assistant(call("read", {"path": "new"}), call("write", {"path": "shared"})), ops
    )
    assert compute_file_lists(ops) == (["new", "old-read"], ["old-mod", "shared"])


LIST_CASES: list[tuple[str, FileOps, tuple[list[str], list[str]]]] = [
    ("empty", FileOps(), ([], [])),
    (
        "modified = edited ∪ written; read excludes modified",
        FileOps(
            read=dict.fromkeys(["a", "b", "c"]),
            written=dict.fromkeys(["b"]),
            edited=dict.fromkeys(["c", "d"]),
        ),
        (["a"], ["b", "c", "d"]),
    ),
    (
        "uppercase before lowercase",
        FileOps(read=dict.fromkeys(["b", "B", "a", "A", "_x", "1"])),
        (["1", "A", "B", "_x", "a", "b"], []),
    ),
    (
        # U+FF5E sorts after the surrogate pair of U+1F600 (0xD83D) in UTF-16, before it by code
        # point.
        "UTF-16 code unit order with astral characters",
        FileOps(edited=dict.fromkeys(["\uff5e.txt", "\U0001f600.txt", "z.txt"])),
        ([], ["z.txt", "\U0001f600.txt", "\uff5e.txt"]),
    ),
    (
        "prefix sorts first",
        FileOps(read=dict.fromkeys(["src/ab", "src/a", "src/a/b"])),
        (["src/a", "src/a/b", "src/ab"], []),
    ),
]


@pytest.mark.parametrize(
    ("ops", "expected"), [c[1:] for c in LIST_CASES], ids=[c[0] for c in LIST_CASES]
)
def test_compute_file_lists(ops: FileOps, expected: tuple[list[str], list[str]]) -> None:
    assert compute_file_lists(ops) == expected


FORMAT_CASES: list[tuple[str, list[str], list[str], str]] = [
    ("both empty", [], [], ""),
    ("read only", ["a", "b"], [], "\n\n<read-files>\na\nb\n</read-files>"),
    ("modified only", [], ["c"], "\n\n<modified-files>\nc\n</modified-files>"),
    (
        "both, read first, blank line between",
        ["a", "b"],
        ["c"],
        "\n\n<read-files>\na\nb\n</read-files>\n\n<modified-files>\nc\n</modified-files>",
    ),
    (
        "paths verbatim",
        ["dir with space/ü 😀.md"],
        [],
        "\n\n<read-files>\ndir with space/ü 😀.md\n</read-files>",
    ),
]


@pytest.mark.parametrize(
    ("read", "modified", "expected"),
    [c[1:] for c in FORMAT_CASES],
    ids=[c[0] for c in FORMAT_CASES],
)
def test_format_file_operations(read: list[str], modified: list[str], expected: str) -> None:
    assert format_file_operations(read, modified) == expected


REF_BOTH = "S<read-files>\na\\nb\n</read-files><modified-files>\nc\n</modified-files>"
OURS_BOTH = "S\n\n<read-files>\na\nb\n</read-files>\n\n<modified-files>\nc\n</modified-files>"

STRIP_CASES: list[tuple[str, str, str]] = [
    ("no tags", "## Goal\nfix it", "## Goal\nfix it"),
    ("empty", "", ""),
    ("ours, both blocks", OURS_BOTH, "S"),
    ("ours, read only", "S\n\n<read-files>\na\n</read-files>", "S"),
    ("ours, modified only", "S\n\n<modified-files>\nc\n</modified-files>", "S"),
    ("reference glued layout", REF_BOTH, "S"),
    ("reference read only", "S<read-files>\na\\nb\n</read-files>", "S"),
    (
        "reference twice (reused summary re-tagged)",
        REF_BOTH + "<read-files>\na\n</read-files><modified-files>\nc\n</modified-files>",
        "S",
    ),
    ("ours twice", OURS_BOTH + "\n\n<modified-files>\nd\n</modified-files>", "S"),
    ("reference then ours", REF_BOTH + "\n\n<read-files>\na\n</read-files>", "S"),
    ("only one blank line dropped", "S\n\n\n\n<read-files>\na\n</read-files>", "S\n\n"),
    ("single newline before tag kept", "S\n<read-files>\na\n</read-files>", "S\n"),
    ("trailing text after the block: untouched", OURS_BOTH + "\nmore", OURS_BOTH + "\nmore"),
    ("trailing newline after the block: untouched", OURS_BOTH + "\n", OURS_BOTH + "\n"),
    ("closing tag without opening: untouched", "S\n\n</read-files>", "S\n\n</read-files>"),
    ("tags in the middle stay", "a <read-files>x</read-files> b", "a <read-files>x</read-files> b"),
    (
        "modified before read: cuts both in one round",
        "S\n\n<modified-files>\nc\n</modified-files>\n\n<read-files>\na\n</read-files>",
        "S",
    ),
    (
        "cut at the last opening tag",
        "S\n\n<read-files>\nx\n</read-files> mid <read-files>\na\n</read-files>",
        "S\n\n<read-files>\nx\n</read-files> mid ",
    ),
    ("whole text is a block", "<read-files>\na\n</read-files>", ""),
]


@pytest.mark.parametrize(
    ("summary", "expected"), [c[1:] for c in STRIP_CASES], ids=[c[0] for c in STRIP_CASES]
)
def test_strip_file_operation_tags(summary: str, expected: str) -> None:
    assert strip_file_operation_tags(summary) == expected
    assert strip_file_operation_tags(expected) == expected  # idempotent


@pytest.mark.parametrize(
    ("read", "modified"),
    [([], []), (["a"], []), ([], ["m"]), (["a", "b"], ["c", "d"])],
)
@pytest.mark.parametrize("summary", ["## Goal\nx", "text\n", "No prior history."])
def test_strip_undoes_format(summary: str, read: list[str], modified: list[str]) -> None:
    assert strip_file_operation_tags(summary + format_file_operations(read, modified)) == summary


@pytest.mark.parametrize(
    ("summary", "paths"),
    [
        ("S", []),
        ("S" + format_file_operations(["a.py", "b c.py"], []), ["a.py", "b c.py"]),
        ("S" + format_file_operations(["r.py"], ["m.py"]), ["r.py", "m.py"]),
        ("S\n<read-files>\nx.py\n</read-files>\nmore text", []),  # not trailing: not tags
    ],
)
def test_tagged_paths_lists_the_trailing_tags(summary: str, paths: list[str]) -> None:
    from worker.compaction.fileops import tagged_paths

    assert tagged_paths(summary) == paths
