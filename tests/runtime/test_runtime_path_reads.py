"""A job's read of a session (``worker.store.paths``) against a real Redis: the leaf's path in
bounded pages, back only as far as asked, each line parsed once, the same entries a full load
gives; a corrupt path fails as a full load does."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from api_client import CompactionClient
from api_client.contract.errors import DanglingParentError
from api_client.contract.session import Entry
from helpers.sessions import assistant, user
from worker.store import paths
from worker.store.entry_cache import EntryCache
from worker.store.paths import PathStore


@pytest.fixture
def client(redis_url: str) -> Iterator[CompactionClient]:
    with CompactionClient(redis_url) as c:
        yield c


def _session(client: CompactionClient, turns: int = 30) -> str:
    sid = client.sessions.create("p1")
    client.sessions.append_many(sid, [m for n in range(turns)
                                      for m in (user(f"q{n}"), assistant(f"a{n}"))])
    return sid


def _never(path: Sequence[Entry], pruned: str | None) -> bool:
    return False


def test_the_whole_path_in_pages_is_the_path_a_load_gives(
        client: CompactionClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "PAGE_LINES", 7)
    sid = _session(client)
    client.sessions.navigate(sid, client.sessions.load(sid).session.entries[40].id)
    snap = PathStore(client.redis, client.layout).load_path(sid, _never)
    full = client.sessions.load(sid)
    expected = full.session.tree().path_to(full.leaf_id)
    assert [e.raw for e in snap.path] == [e.raw for e in expected] and len(snap.path) == 41
    assert snap.complete and snap.leaf_id == full.leaf_id and snap.revision == full.revision
    assert snap.rewrites == 1 and snap.pruned_through is None  # the create's import counted


def test_the_read_stops_where_the_plan_has_enough_and_reuses_parsed_entries(
        client: CompactionClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths, "PAGE_LINES", 5)
    sid = _session(client)
    cache = EntryCache()
    store = PathStore(client.redis, client.layout, cache)
    asked: list[int] = []

    def ten(path: Sequence[Entry], pruned: str | None) -> bool:
        asked.append(len(path))
        return len(path) >= 10

    first = store.load_path(sid, ten)
    assert len(first.path) == 10 and not first.complete and asked == [5, 10]
    assert first.parsed_chars == first.stored_chars > 0
    client.sessions.append(sid, user("one more"))
    again = store.load_path(sid, ten)
    assert again.path[:9] == first.path[1:] and all(
        a is b for a, b in zip(again.path[:9], first.path[1:], strict=True))
    assert 0 < again.parsed_chars < again.stored_chars  # only the new entry was parsed


def test_a_dangling_parent_fails_as_a_full_load_does(client: CompactionClient) -> None:
    sid = _session(client, 3)
    entries = client.sessions.load(sid).session.entries
    client.redis.hdel(client.layout.session(sid).entries, entries[1].id)
    with pytest.raises(DanglingParentError, match=rf"redis:{sid}:4: entry {entries[2].id} has "
                                                  rf"parentId '{entries[1].id}'"):
        PathStore(client.redis, client.layout).load_path(sid, _never)
