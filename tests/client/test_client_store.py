"""SessionStore / AsyncSessionStore against a real Redis."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis

from api_client import (
    AsyncCompactionClient,
    CompactionClient,
    EntryExistsError,
    EntryNotFoundError,
    InvalidIdError,
    SessionExistsError,
    SessionFormatError,
    SessionNotFoundError,
)
from api_client.contract.session import load_session
from helpers.jobs import worker_jobs
from helpers.sessions import assistant, user


def counter_ids(used: set[str]) -> str:
    """Deterministic migration ids (the migration tracks every id it generates)."""
    return f"{len(used):08x}"


def stored_entry(raw: redis.Redis[str], sid: str, entry_id: str) -> dict[str, Any]:
    value = json.loads(raw.hget(f"compactor:session:{{{sid}}}:entries", entry_id) or "null")
    assert isinstance(value, dict)
    return value


def test_create_writes_a_v3_header_and_an_empty_session(client: CompactionClient) -> None:
    sid = client.sessions.create(cwd="/repo", title="T")
    snap = client.sessions.load(sid)
    header = snap.session.header
    assert (header["type"], header["version"], header["id"], header["cwd"], header["title"]) == (
        "session", 3, sid, "/repo", "T")
    assert header["timestamp"].endswith("Z")
    assert snap.session.entries == [] and snap.leaf_id is None and snap.revision == 1


def test_append_chains_entries_under_the_leaf(client: CompactionClient,
                                              raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("s1")
    a = client.sessions.append(sid, user("hello"))
    b = client.sessions.append(sid, {"type": "message", "message": assistant("hi")})
    snap = client.sessions.load(sid)
    assert [e.id for e in snap.session.entries] == [a, b]
    first, second = (e.raw for e in snap.session.entries)
    assert first["parentId"] is None and second["parentId"] == a
    assert snap.leaf_id == b
    assert len(a) == 8 and int(a, 16) >= 0
    # Stored JSON keeps pi's key order and the message exactly as given.
    assert list(first) == ["type", "id", "parentId", "timestamp", "message"]
    assert first["message"] == user("hello")
    assert stored_entry(raw, sid, a) == first


def test_append_keeps_caller_id_and_timestamp_but_not_parent(client: CompactionClient) -> None:
    sid = client.sessions.create("s1")
    root = client.sessions.append(sid, user("one"))
    entry = {"type": "custom", "id": "cafe0001", "parentId": "elsewhere",
             "timestamp": "2025-01-01T00:00:00.000Z", "customType": "x", "data": {"ü": 1.5}}
    assert client.sessions.append(sid, entry) == "cafe0001"
    stored = client.sessions.load(sid).session.entries[-1].raw
    assert stored == {**entry, "parentId": root}


def test_append_many_is_one_chain_and_one_revision(client: CompactionClient) -> None:
    sid = client.sessions.create("s1")
    ids = client.sessions.append_many(sid, [user("a"), assistant("b"), user("c")])
    snap = client.sessions.load(sid)
    assert [e.parent_id for e in snap.session.entries] == [None, ids[0], ids[1]]
    assert snap.revision == 2 and snap.leaf_id == ids[2] and len(set(ids)) == 3


def test_navigate_moves_the_leaf_and_next_append_branches(client: CompactionClient) -> None:
    sid = client.sessions.create("s1")
    a, b, c = client.sessions.append_many(sid, [user("a"), assistant("b"), user("c")])
    client.sessions.navigate(sid, a)
    snap = client.sessions.load(sid)
    assert snap.leaf_id == a and [e.id for e in snap.session.entries] == [a, b, c]
    d = client.sessions.append(sid, user("d"))
    snap = client.sessions.load(sid)
    assert snap.session.tree().by_id[d].parent_id == a and snap.leaf_id == d
    client.sessions.navigate(sid, None)  # reset: the next append is a new root
    e = client.sessions.append(sid, user("e"))
    assert client.sessions.load(sid).session.tree().by_id[e].parent_id is None


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (lambda s, sid: s.navigate(sid, "nope0000"), EntryNotFoundError),
        (lambda s, sid: s.append("missing", user("x")), SessionNotFoundError),
        (lambda s, sid: s.navigate("missing", None), SessionNotFoundError),
        (lambda s, sid: s.load("missing"), SessionNotFoundError),
        (lambda s, sid: s.export_jsonl("missing"), SessionNotFoundError),
        (lambda s, sid: s.append(sid, {"no": "type"}), SessionFormatError),
        (lambda s, sid: s.append(sid, ["not", "a", "dict"]), SessionFormatError),
        (lambda s, sid: s.append(sid, {"type": "message", "message": "text"}), SessionFormatError),
        (lambda s, sid: s.append(sid, {"type": "session", "id": "x"}), SessionFormatError),
        (lambda s, sid: s.append(sid, {"type": "custom", "id": "root0001"}), EntryExistsError),
        (lambda s, sid: s.append_many(sid, [{"type": "custom", "id": "dup00001"},
                                            {"type": "custom", "id": "dup00001"}]),
         EntryExistsError),
        (lambda s, sid: s.create(sid), SessionExistsError),
        (lambda s, sid: s.create("bad {id}"), InvalidIdError),
        (lambda s, sid: s.append("with space", user("x")), InvalidIdError),
    ],
)
def test_bad_requests_raise_typed_errors_and_change_nothing(client: CompactionClient, action: Any,
                                                            error: type[Exception]) -> None:
    sid = client.sessions.create("s1")
    client.sessions.append(sid, {"type": "custom", "id": "root0001", "customType": "x"})
    before = (client.sessions.export_jsonl(sid), client.sessions.load(sid).revision)
    with pytest.raises(error):
        action(client.sessions, sid)
    assert (client.sessions.export_jsonl(sid), client.sessions.load(sid).revision) == before


def test_revision_increments_on_every_mutation(client: CompactionClient) -> None:
    store = client.sessions
    sid = store.create("s1")
    seen = [store.load(sid).revision]
    a = store.append(sid, user("a"))
    seen.append(store.load(sid).revision)
    store.append_many(sid, [assistant("b"), user("c")])
    seen.append(store.load(sid).revision)
    store.navigate(sid, a)
    seen.append(store.load(sid).revision)
    store.import_jsonl(store.export_jsonl(sid), sid, replace=True)
    seen.append(store.load(sid).revision)
    assert seen == [1, 2, 3, 4, 5]
    assert store.revision(sid) == 5


def test_import_export_round_trip_of_reference_sessions(client: CompactionClient,
                                                        pi_file: Path) -> None:
    text = pi_file.read_text(encoding="utf-8")
    expected = load_session(text, new_id=counter_ids)
    sid = client.sessions.import_jsonl(text, new_id=counter_ids)
    assert sid == expected.id
    exported = client.sessions.export_jsonl(sid)
    assert [json.loads(x) for x in exported.splitlines()] == (
        [json.loads(x) for x in expected.to_jsonl().splitlines()])
    assert json.loads(exported.splitlines()[0])["version"] == 3
    snap = client.sessions.load(sid)
    assert snap.leaf_id == expected.entries[-1].id
    assert [e.raw for e in snap.session.entries] == [e.raw for e in expected.entries]
    # A v3 export imports back to the very same bytes.
    copy = client.sessions.import_jsonl(exported, "copy")
    assert client.sessions.export_jsonl(copy).splitlines()[1:] == exported.splitlines()[1:]


def test_import_refuses_an_existing_session_unless_replacing(client: CompactionClient) -> None:
    sid = client.sessions.create("s1")
    client.sessions.append(sid, user("kept"))
    text = client.sessions.export_jsonl(sid)
    with pytest.raises(SessionExistsError):
        client.sessions.import_jsonl(text)
    client.sessions.import_jsonl(text, replace=True)
    assert client.sessions.export_jsonl(sid) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        '{"type":"message"}\n',
        '{"type":"session","id":"s","version":3}\n{"type":"custom","id":"a","parentId":null}\n'
        '{"type":"custom","id":"a","parentId":null}\n',
        '{"type":"session","id":"s","version":3}\n{"type":"custom","id":7}\n',
    ],
    ids=["empty", "no-header", "duplicate-id", "bad-id-type"],
)
def test_import_rejects_unusable_files(client: CompactionClient, text: str) -> None:
    with pytest.raises(SessionFormatError):
        client.sessions.import_jsonl(text)
    assert client.redis.keys("compactor:*") == []


def test_every_session_key_carries_the_hash_tag(client: CompactionClient,
                                                raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("tagged")
    a = client.sessions.append(sid, user("x"))
    client.sessions.navigate(sid, a)
    handle = client.compact(sid)
    worker_jobs(client).acquire_lease(handle.id, "w", 10)
    client.jobs.finish(handle.id, "failed", error="no")
    # The broker's lists and their fair order's index are no session's keys; the tenant's own
    # keys carry its tag.
    keys = [k for k in raw.keys("compactor:*")
            if k not in ("compactor:events", "compactor:jobs:due")
            and not k.startswith((client.layout.broker, "compactor:fair:",
                                 "compactor:tenants:{default}:"))]
    assert len(keys) >= 6
    for key in keys:
        assert key.index("{") == key.index("{tagged}"), key


def test_delete_and_exists(client: CompactionClient) -> None:
    sid = client.sessions.create("s1")
    client.sessions.append(sid, user("x"))
    assert client.sessions.exists(sid)
    assert client.sessions.delete(sid)
    assert not client.sessions.exists(sid)
    assert client.redis.keys("compactor:session:{s1}:*") == []
    with pytest.raises(SessionNotFoundError):
        client.sessions.load(sid)


def test_load_reports_a_corrupt_stored_entry(client: CompactionClient,
                                             raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("s1")
    a = client.sessions.append(sid, user("x"))
    raw.hset("compactor:session:{s1}:entries", a, "{not json")
    with pytest.raises(SessionFormatError, match="redis:s1:2"):
        client.sessions.load(sid)


def test_async_store_mirrors_the_sync_one(redis_url: str, pi_file: Path) -> None:
    text = pi_file.read_text(encoding="utf-8")

    async def scenario() -> tuple[Any, ...]:
        async with AsyncCompactionClient(redis_url) as ac:
            store = ac.sessions
            sid = await store.create("as1", cwd="/w")
            a, b = await store.append_many(sid, [user("a"), assistant("b")])
            c = await store.append(sid, user("c"))
            await store.navigate(sid, a)
            snap = await store.load(sid)
            with pytest.raises(EntryNotFoundError):
                await store.navigate(sid, "nope0000")
            imported = await store.import_jsonl(text, "imp", new_id=counter_ids)
            exported = await store.export_jsonl(imported)
            existed = await store.delete(sid), await store.exists(sid)
            return snap, [a, b, c], exported, existed, await store.revision(imported)

    snap, ids, exported, existed, rev = asyncio.run(scenario())
    assert [e.id for e in snap.session.entries] == ids
    assert snap.leaf_id == ids[0] and snap.revision == 4
    expected = load_session(text, new_id=counter_ids).to_jsonl().splitlines()[1:]
    assert [json.loads(x) for x in exported.splitlines()[1:]] == [json.loads(x) for x in expected]
    assert existed == (True, False) and rev == 1
