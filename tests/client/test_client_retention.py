"""Retention (issue 30): every key of a session expires once the session has been idle for
``session_ttl_s``; every client write refreshes them all in the same step; 0 keeps them forever.
And the stored sessions an operator lists and deletes (``sessions.list()``, ``delete()``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
import redis

from api_client import (
    AsyncCompactionClient,
    ClientSettings,
    CompactionClient,
    InvalidIdError,
    InvalidRequestError,
    SessionPage,
)
from api_client.client.session_listing import list_flow
from api_client.contract.keys import LEGACY_SESSION_SUFFIXES, KeyLayout
from helpers.retention import (
    SESSION_LONG,
    assert_retained,
    key_suffixes,
    lua_suffixes,
    session_ttls,
)

TTL = 1_800  # shorter than the job records' day and the pending jobs' hour: both get capped


def msg(text: str, role: str = "user") -> dict[str, object]:
    return {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1}


@pytest.fixture
def settings(redis_url: str) -> ClientSettings:
    return ClientSettings(redis_url=redis_url, send_sent_event=False, session_ttl_s=TTL)


@pytest.fixture
def client(settings: ClientSettings) -> Iterator[CompactionClient]:
    with CompactionClient(settings) as c:
        yield c


def retained(raw: redis.Redis[str], client: CompactionClient, sid: str) -> dict[str, int]:
    return assert_retained(raw, client.layout, sid, client.settings.session_ttl_s)


def test_the_lua_helper_names_every_key_of_a_session_once() -> None:
    # _retention.lua derives the keys from their suffixes: a key added to SessionKeys must be
    # added there too, in one of the two lists.
    long, capped = lua_suffixes("RETAIN_WITH_SESSION"), lua_suffixes("RETAIN_CAPPED")
    assert set(long).isdisjoint(capped) and len(set(long + capped)) == len(long + capped)
    legacy = set(LEGACY_SESSION_SUFFIXES)  # written by no version now: in neither list
    assert sorted(long + capped) == sorted(
        k for k in key_suffixes(KeyLayout("p").session("s")) if k not in legacy)
    assert set(long) == set(SESSION_LONG)


def test_default_is_thirty_days_and_zero_is_allowed() -> None:
    assert ClientSettings().session_ttl_s == 30 * 86_400
    assert ClientSettings(session_ttl_s=0).session_ttl_s == 0
    with pytest.raises(ValueError):
        ClientSettings(session_ttl_s=-1)


def test_session_writes_refresh_every_key(client: CompactionClient,
                                          raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("r1")
    retained(raw, client, sid)
    first = client.sessions.append(sid, msg("hello"))
    ttls = retained(raw, client, sid)
    assert 0 < ttls["appends"] <= 600_000  # its own, shorter lifetime stays
    client.sessions.append_many(sid, [msg("a", "assistant"), msg("b")])
    retained(raw, client, sid)
    client.sessions.navigate(sid, first)
    retained(raw, client, sid)
    client.sessions.navigate(sid, None)
    retained(raw, client, sid)
    text = client.sessions.export_jsonl(sid)
    client.sessions.import_jsonl(text, "r1-copy")
    retained(raw, client, "r1-copy")
    client.sessions.import_jsonl(text, sid, replace=True)
    retained(raw, client, sid)


def test_a_large_import_in_steps_is_retained(client: CompactionClient,
                                             raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("big")
    big = [msg("x" * 2_000) for _ in range(300)]  # over the inline 256 kB: staged
    for at in range(0, len(big), 100):
        client.sessions.append_many(sid, big[at:at + 100])
    text = client.sessions.export_jsonl(sid)
    assert len(text) > 512 << 10
    client.sessions.import_jsonl(text, "big-copy")
    ttls = retained(raw, client, "big-copy")
    assert not any(name.startswith("import:") for name in ttls)  # renamed into place


def test_jobs_and_their_end_refresh_and_cap(client: CompactionClient,
                                            raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("r2")
    client.sessions.append_many(sid, [msg("a"), msg("b", "assistant")])
    handle = client.compact(sid, reason="manual")
    ttls = retained(raw, client, sid)
    assert "inflight:compact" in ttls  # its pending hour, capped at the retention
    assert handle.cancel().value == "cancelled"  # finish.lua: the completion event
    ttls = retained(raw, client, sid)
    assert "events" in ttls and "inflight:compact" not in ttls
    client.prune(sid)
    client.branch_summary(sid, client.sessions.load(sid).leaf_id or "")
    client.compact(sid, reason="threshold")  # compact_auto.lua: no draft, enqueued
    ttls = retained(raw, client, sid)
    assert {"inflight:prune", "inflight:branch_summary"} <= set(ttls)
    # observe near the threshold notes the pace (observe.lua)
    client.observe(sid, context_tokens=100_000, context_window=200_000)
    assert "pace" in retained(raw, client, sid)


def _store_draft(client: CompactionClient, raw: redis.Redis[str], sid: str,
                 snapshot_leaf: str) -> None:
    entry = '"summary":"drafted","firstKeptEntryId":"' + snapshot_leaf + '","tokensBefore":900}'
    raw.set(client.layout.session(sid).draft, json.dumps({
        "jobId": f"{sid}:00000000000000ff", "snapshotLeafId": snapshot_leaf,
        "lineTail": "," + entry, "tokensAfter": 10, "threshold": 100_000}))  # no TTL of its own


def test_a_draft_applied_by_the_client_is_retained(client: CompactionClient,
                                                   raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("r3")
    leaf = client.sessions.append_many(sid, [msg("a"), msg("b", "assistant")])[-1]
    _store_draft(client, raw, sid, leaf)
    handle = client.compact(sid, reason="threshold")
    assert handle.from_draft
    ttls = retained(raw, client, sid)
    assert {"compactions", "events"} <= set(ttls) and "draft" not in ttls
    assert "effects" not in ttls  # the marker is the record's (effect), as a worker's commit


def test_refusals_and_discarded_drafts_are_retained(client: CompactionClient,
                                                    raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("r4")
    client.sessions.append_many(sid, [msg("a"), msg("b", "assistant")])
    _store_draft(client, raw, sid, "not-on-the-path")
    client.compact(sid, reason="threshold")  # discarded (offpath): the note's pipeline
    retained(raw, client, sid)

    other = client.sessions.create("r5")
    now = time.time()
    guard = client.layout.session(other).compactions
    raw.zadd(guard, {f"{other}:{i:016x}": now for i in range(client.settings.loop_guard_max)})
    raw.persist(guard)
    handle = client.compact(other, reason="threshold")  # the loop guard's refusal: a pipeline
    assert handle.record().state.value == "failed"
    assert "events" in retained(raw, client, other)


def test_a_session_written_before_retention_gets_it_on_its_next_write(
        settings: ClientSettings, client: CompactionClient, raw: redis.Redis[str]) -> None:
    with CompactionClient(settings.model_copy(update={"session_ttl_s": 0})) as forever:
        sid = forever.sessions.create("old")
        forever.sessions.append(sid, msg("a"))
        forever.compact(sid).cancel()
    ttls = session_ttls(raw, client.layout, sid)
    assert {ttls[name] for name in ttls if name in SESSION_LONG} == {-1}
    client.sessions.append(sid, msg("b"))
    retained(raw, client, sid)


def test_zero_keeps_a_session_forever(settings: ClientSettings, client: CompactionClient,
                                      raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("kept")
    client.sessions.append(sid, msg("a"))
    retained(raw, client, sid)
    with CompactionClient(settings.model_copy(update={"session_ttl_s": 0})) as forever:
        forever.sessions.append(sid, msg("b"))  # the setting now: keep it (PERSIST)
        forever.compact(sid).cancel()
        ttls = session_ttls(raw, forever.layout, sid)
    assert all(ttls[name] == -1 for name in ttls if name in SESSION_LONG)
    # keys with a lifetime of their own keep it
    assert 0 < ttls["appends"] <= 600_000 and 0 < ttls["events"] <= 86_400_000


def test_list_pages_through_the_stored_sessions(client: CompactionClient) -> None:
    made = {client.sessions.create(f"list-{i:03d}") for i in range(30)}
    client.sessions.create("other-1")
    client.compact("list-000").cancel()  # job records and streams are not sessions
    seen: list[str] = []
    page = SessionPage([], cursor=0)
    pages = 0
    while True:
        page = client.sessions.list(page.cursor, prefix="list-", count=5)
        seen += page.session_ids
        pages += 1
        if page.done:
            break
    assert set(seen) == made and pages > 1
    assert set(client.sessions.iter_ids()) == made | {"other-1"}
    assert list(client.sessions.iter_ids(prefix="nothing-")) == []


def test_list_refuses_bad_input(client: CompactionClient, settings: ClientSettings) -> None:
    with pytest.raises(InvalidIdError):
        client.sessions.list(prefix="*")
    with pytest.raises(InvalidRequestError):
        client.sessions.list(-1)
    with pytest.raises(InvalidRequestError):
        client.sessions.list(count=0)
    cluster = settings.model_copy(update={"redis_cluster": True})
    with pytest.raises(InvalidRequestError, match="Cluster"):
        next(list_flow(KeyLayout(), cluster, 0, "", 10))


def test_the_key_prefix_is_matched_literally(settings: ClientSettings) -> None:
    with CompactionClient(settings.model_copy(update={"key_prefix": "a*"})) as starred, \
            CompactionClient(settings.model_copy(update={"key_prefix": "ab"})) as plain:
        starred.sessions.create("s1")
        plain.sessions.create("s2")
        assert list(starred.sessions.iter_ids()) == ["s1"]


def test_delete_removes_every_key_but_the_job_records(client: CompactionClient,
                                                      raw: redis.Redis[str]) -> None:
    sid = client.sessions.create("gone")
    client.sessions.append(sid, msg("a"))
    job = client.compact(sid)
    assert client.sessions.delete(sid) and not client.sessions.delete(sid)
    assert session_ttls(raw, client.layout, sid) == {}
    assert raw.exists(client.layout.job(job.id).record)  # expires on its own
    assert sid not in set(client.sessions.iter_ids())


def test_async_list_and_writes(settings: ClientSettings, raw: redis.Redis[str]) -> None:
    async def run() -> tuple[SessionPage, list[str]]:
        async with AsyncCompactionClient(settings) as ac:
            for i in range(3):
                sid = await ac.sessions.create(f"async-{i}")
                await ac.sessions.append(sid, msg("a"))
            page = await ac.sessions.list(prefix="async-")
            ids = [sid async for sid in ac.sessions.iter_ids(prefix="async-")]
            assert await ac.sessions.delete("async-2")
            return page, ids

    page, ids = asyncio.run(run())
    assert page.done and sorted(page.session_ids) == sorted(ids) == ["async-0", "async-1",
                                                                      "async-2"]
    assert_retained(raw, KeyLayout(), "async-0", TTL)


def test_one_expiry_instant_moved_only_when_it_ran_down(client: CompactionClient,
                                                        raw: redis.Redis[str]) -> None:
    # Re-stamping every key on every write would log a PEXPIREAT per key and write: the keys
    # share the header's instant, moved once 1 % of the retention has run down.
    sid = client.sessions.create("instant")
    keys = client.layout.session(sid)
    client.sessions.append(sid, msg("a"))
    long = [k for k in keys.all() if raw.exists(k) and k.removeprefix(
        keys.header.removesuffix("header")) in SESSION_LONG]
    for key in long:
        raw.pexpire(key, TTL * 1000 - 5_000)  # within 1 % (18 s): fresh enough
    client.sessions.navigate(sid, None)
    assert all(TTL * 1000 - 7_000 < raw.pttl(k) <= TTL * 1000 - 5_000 for k in long)
    raw.persist(keys.order)  # a key new to the session joins the instant
    client.sessions.append(sid, msg("b"))
    assert abs(raw.pttl(keys.order) - raw.pttl(keys.header)) < 1_000
    for key in long:
        raw.pexpire(key, TTL * 1000 - 60_000)  # ran down by more: the instant moves
    client.sessions.append(sid, msg("c"))
    retained(raw, client, sid)
    assert all(raw.pttl(k) > TTL * 1000 - 2_000 for k in long)


def test_a_shorter_retention_shortens_a_session_at_its_next_write(
        settings: ClientSettings, client: CompactionClient, raw: redis.Redis[str]) -> None:
    with CompactionClient(settings.model_copy(update={"session_ttl_s": 30 * 86_400})) as long:
        sid = long.sessions.create("shortened")
        long.sessions.append(sid, msg("a"))
        long.compact(sid)  # inflight: its pending hour
    client.sessions.append(sid, msg("b"))
    retained(raw, client, sid)
