import itertools
import json

import pytest

from api_client.contract.errors import (
    DanglingParentError,
    EntryNotFoundError,
    SessionCycleError,
    SessionFormatError,
)
from api_client.contract.session import CompactionEntry, MessageEntry, UnknownEntry, load_session
from helpers.sessions import chain, tree, user

HEADER_V1 = {"type": "session", "id": "s", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/",
             "provider": "x"}


def jsonl(*records: dict) -> str:
    return "\n".join(json.dumps(r) for r in records) + "\n"


def counter() -> object:
    numbers = itertools.count()
    return lambda used: f"id{next(numbers)}"


def msg(text: str) -> dict:
    return {"type": "message", "timestamp": "2026-01-01T00:00:00.000Z", "message": user(text)}


def test_v1_becomes_a_linear_v3_chain_with_tracked_ids() -> None:
    s = load_session(jsonl(HEADER_V1, msg("a"), msg("b"), msg("c")),
                     new_id=counter())  # type: ignore[arg-type]
    assert s.original_version == 1 and s.header["version"] == 3
    assert [(e.id, e.parent_id) for e in s.entries] == [
        ("id0", None), ("id1", "id0"), ("id2", "id1")]
    assert s.header["provider"] == "x"  # legacy header fields kept


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (1, "id0"),
        (3, "id2"),
        # header index and out of range resolve to nothing
        (0, None),
        (9, None),
    ],
)
def test_v1_first_kept_entry_index_resolves_after_all_ids_exist(index: int,
                                                                expected: str | None) -> None:
    compaction = {"type": "compaction", "summary": "s", "firstKeptEntryIndex": index,
                  "tokensBefore": 1, "timestamp": "2026-01-01T00:00:00.000Z"}
    # The compaction sits on line 2 and index 3 points *forward*: Q13 resolves it anyway.
    s = load_session(jsonl(HEADER_V1, msg("a"), compaction, msg("b")),
                     new_id=counter())  # type: ignore[arg-type]
    entry = s.entries[1]
    assert isinstance(entry, CompactionEntry)
    assert "firstKeptEntryIndex" not in entry.raw
    assert entry.raw.get("firstKeptEntryId") == expected


def test_v2_keeps_ids_and_renames_hook_messages() -> None:
    header = {**HEADER_V1, "version": 2}
    hook = {"type": "message", "id": "h", "parentId": None, "timestamp": "t",
            "message": {"role": "hookMessage", "customType": "x", "content": "c", "display": True}}
    s = load_session(jsonl(header, hook))
    assert (s.entries[0].id == "h" and isinstance(s.entries[0], MessageEntry)
            and s.entries[0].role == "custom")


def test_v3_round_trip_keeps_unknown_types_and_fields() -> None:
    header = {**HEADER_V1, "version": 3, "future": {"x": 1}}
    odd = {"type": "hologram", "id": "z", "parentId": None, "timestamp": "t", "beam": [1, 2]}
    extra = {"type": "message", "id": "m", "parentId": "z", "timestamp": "t", "message": user("é"),
             "later": True}
    text = jsonl(header, odd, extra)
    s = load_session(text)
    assert isinstance(s.entries[0], UnknownEntry)
    assert [json.loads(line) for line in s.to_jsonl().splitlines()] == [
        json.loads(line) for line in text.splitlines()]


def test_broken_lines_are_skipped_with_a_warning() -> None:
    text = (jsonl({**HEADER_V1, "version": 3}) + "{not json\n\n"
            + jsonl(msg("a") | {"id": "a", "parentId": None}))
    s = load_session(text, source="f.jsonl")
    assert len(s.entries) == 1 and s.entries[0].line == 4
    assert s.warnings == ["f.jsonl:2: skipped a line that is not JSON "
                          "(Expecting property name enclosed in double quotes)"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "f:"),
        (jsonl(msg("a")), "f:1: first line is not a session header"),
        (jsonl({"type": "session", "id": 5}), "f:1: first line is not a session header"),
        (jsonl({**HEADER_V1, "version": 3}, {"type": "message", "id": 7, "message": user("a")}),
         "f:2: entry 'id' must be a string"),
        (jsonl({**HEADER_V1, "version": 3}, {"type": "message", "id": "a", "message": "hi"}),
         "f:2: 'message' must be an object"),
        (jsonl({**HEADER_V1, "version": 3},
               {"type": "message", "id": "a", "parentId": 3, "message": user("a")}),
         "f:2: 'parentId' must be"),
        (jsonl({**HEADER_V1, "version": 3}, {"type": "compaction", "id": "a", "summary": 1}),
         "f:2: compaction field 'summary'"),
    ],
)
def test_bad_input_names_file_line_and_problem(text: str, message: str) -> None:
    with pytest.raises(SessionFormatError) as info:
        load_session(text, source="f")
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_tree_paths_children_and_common_ancestor() -> None:
    entries = chain(user("a"), user("b"), user("c"))
    entries += chain({"type": "message", "message": user("d"), "parentId": "e0", "id": "d1",
                      "timestamp": "2025-01-01T00:00:00.000Z"}, start=10)
    t = tree(entries)
    assert [e.id for e in t.path_to("e2")] == ["e0", "e1", "e2"]
    assert t.leaf_id == "d1"
    assert [e.id for e in t.children("e0")] == ["d1", "e1"]  # sorted by timestamp
    assert t.common_ancestor("e2", "d1") == "e0"
    assert t.path_to("nope") == [] and t.path_to(None) == []
    with pytest.raises(EntryNotFoundError, match="Entry nope not found"):
        t.get("nope")


def test_cycle_and_dangling_parent_raise_typed_errors() -> None:
    cyclic = chain({"type": "message", "message": user("a"), "parentId": "e1"}, user("b"))
    with pytest.raises(SessionCycleError, match="cycle"):
        tree(cyclic).path_to("e1")
    dangling = chain({"type": "message", "message": user("a"), "parentId": "ghost"})
    with pytest.raises(DanglingParentError, match="ghost"):
        tree(dangling).path_to("e0")
    assert [e.id for e in tree(dangling).path_to("e0", strict=False)] == ["e0"]


def _side(entry_id: str, parent: str | None) -> dict:
    return {"type": "message", "message": user(entry_id), "id": entry_id, "parentId": parent}


@pytest.mark.parametrize(("extra", "error", "named"), [
    ([], None, None),                                          # a chain: fine
    ([_side("b1", "e0"), _side("b2", "b1")], None, None),      # a side branch: fine
    ([_side("x1", "ghost")], DanglingParentError, "ghost"),    # off the leaf's path, still found
    ([_side("c1", "c2"), _side("c2", "c1")], SessionCycleError, "cycle"),  # a cycle off the path
    ([_side("s1", "s1")], SessionCycleError, "own parent"),
])
def test_check_all_finds_what_any_path_would_meet(extra: list, error: type | None,
                                                  named: str | None) -> None:
    # Import checks every entry, not only the leaf's path: a later navigation must not fail.
    entries = chain(user("a"), user("b"))
    entries += chain(*extra, start=10)
    checked = tree(entries)
    if error is None:
        checked.check_all()
        return
    with pytest.raises(error, match=named):
        checked.check_all()


def test_labels_are_rebuilt_from_every_label_entry() -> None:
    entries = chain(user("a"), {"type": "label", "targetId": "e0", "label": "x"},
                    {"type": "label", "targetId": "e0", "label": "y"},
                    {"type": "label", "targetId": "e1", "label": "z"},
                    {"type": "label", "targetId": "e1"})
    assert tree(entries).labels() == {"e0": "y"}
