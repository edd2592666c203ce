"""The snapshot decoder reuses parsed entries whose stored text is unchanged."""

from __future__ import annotations

import pytest

from api_client.contract.errors import SessionFormatError
from api_client.contract.session import dump_record
from api_client.contract.snapshots import build_snapshot
from worker.store.entry_cache import EntryCache


def _replies(texts: dict[str, str]) -> list[object]:
    header = dump_record({"type": "session", "version": 3, "id": "s1", "timestamp": "t", "cwd": ""})
    order = list(texts)
    return [header, "1", order[-1], order, texts]


def _message(entry_id: str, parent: str | None, text: str) -> str:
    return dump_record({"type": "message", "id": entry_id, "parentId": parent,
                        "timestamp": "2025-01-01T00:00:00.000Z",
                        "message": {"role": "user", "content": text, "timestamp": 0}})


def test_unchanged_entries_are_the_same_objects_changed_ones_are_parsed_again() -> None:
    cache = EntryCache()
    stored = {"a": _message("a", None, "one"), "b": _message("b", "a", "two")}
    first = build_snapshot("s1", _replies(stored), cache).session.entries
    stored["b"] = _message("b", "a", "two, edited")
    stored["c"] = _message("c", "b", "three")
    second = build_snapshot("s1", _replies(stored), cache).session.entries
    assert second[0] is first[0]
    assert second[1] is not first[1] and second[1].raw["message"]["content"] == "two, edited"
    assert (cache.hits, cache.misses) == (1, 4)


def test_other_sessions_and_a_zero_size_share_nothing() -> None:
    stored = {"a": _message("a", None, "one")}
    cache = EntryCache()
    first = build_snapshot("s1", _replies(stored), cache).session.entries[0]
    assert build_snapshot("s2", _replies(stored), cache).session.entries[0] is not first
    off = EntryCache(0)
    one = build_snapshot("s1", _replies(stored), off).session.entries[0]
    assert build_snapshot("s1", _replies(stored), off).session.entries[0] is not one
    assert len(off) == 0


def test_a_snapshot_says_how_much_stored_json_it_parsed_anew() -> None:
    # The worker primes token counts only for a session that is mostly new to the process.
    cache = EntryCache()
    stored = {"a": _message("a", None, "one"), "b": _message("b", "a", "two")}
    first = build_snapshot("s1", _replies(stored), cache)
    assert first.parsed_chars == len(stored["a"]) + len(stored["b"])
    stored["c"] = _message("c", "b", "three")
    grown = build_snapshot("s1", _replies(stored), cache)
    assert grown.parsed_chars == len(stored["c"])
    assert grown.stored_chars == sum(map(len, stored.values()))  # of all it holds
    assert build_snapshot("s1", _replies(stored), cache).parsed_chars == 0
    assert build_snapshot("s1", _replies(stored)).parsed_chars == sum(map(len, stored.values()))


def test_an_entry_stored_again_with_other_text_of_the_same_length_is_parsed_again() -> None:
    # The texts themselves are compared, not their lengths or a prefix.
    cache = EntryCache()
    stored = {"a": _message("a", None, "one 😀"), "b": _message("b", "a", "two")}
    first = build_snapshot("s1", _replies(stored), cache).session.entries
    stored["b"] = _message("b", "a", "tw0")
    stored["a"] = _message("a", None, "one 😀")  # equal again: kept
    second = build_snapshot("s1", _replies(stored), cache).session.entries
    assert second[0] is first[0]
    assert second[1] is not first[1] and second[1].raw["message"]["content"] == "tw0"


def test_an_entry_rewritten_between_ascii_and_other_text_is_parsed_again() -> None:
    # ASCII texts are kept as str, others as UTF-8: a change of kind is a change of text.
    cache = EntryCache()
    stored = {"a": _message("a", None, "cafe")}
    first = build_snapshot("s1", _replies(stored), cache).session.entries[0]
    stored["a"] = _message("a", None, "café")  # one character more in UTF-8, the same in str
    second = build_snapshot("s1", _replies(stored), cache).session.entries[0]
    stored["a"] = _message("a", None, "cafe")
    third = build_snapshot("s1", _replies(stored), cache).session.entries[0]
    assert second is not first and second.raw["message"]["content"] == "café"
    assert third is not second and third.raw["message"]["content"] == "cafe"
    assert build_snapshot("s1", _replies(stored), cache).session.entries[0] is third


def test_an_entry_moved_to_another_line_is_parsed_again() -> None:
    cache = EntryCache()
    stored = {"a": _message("a", None, "one"), "b": _message("b", None, "two")}
    first = build_snapshot("s1", _replies(stored), cache).session.entries
    moved = build_snapshot("s1", _replies({"b": stored["b"], "a": stored["a"]}), cache)
    assert moved.session.entries[0] is not first[1] and moved.session.entries[0].line == 2


def test_an_entry_listed_but_no_longer_stored_is_a_format_error_with_a_cache_too() -> None:
    cache = EntryCache()
    stored = {"a": _message("a", None, "one"), "b": _message("b", "a", "two")}
    build_snapshot("s1", _replies(stored), cache)
    replies = _replies(stored)
    del stored["b"]  # the order list still names it
    with pytest.raises(SessionFormatError, match="entry b is in the order list but not stored"):
        build_snapshot("s1", replies, cache)
    assert (cache.hits, cache.misses) == (0, 2)  # the first load's: the order is checked first
