"""What one client call may send is bounded, and a write that happened is never reported as failed
(issue 33, finding 2). Against the run's real Redis, and a TCP proxy in front of it that loses
replies. Before: 100k entries in one append, 50 MB of instructions and the session ids
``../../etc`` and ``*`` were accepted; a 200 MB append that was stored raised
``BrokerUnavailableError: Timeout reading…`` and a retry stored it twice."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from client.conftest import seed_sessions

from api_client import (
    AppendTooLargeError,
    AppendUnconfirmedError,
    AsyncCompactionClient,
    ClientSettings,
    CompactionClient,
    EntryTooLargeError,
    InstructionsTooLongError,
    InvalidIdError,
    LimitExceededError,
)
from helpers.sessions import user
from helpers.tcp_proxy import TcpProxy

TEXT = '{"type":"session","version":3,"id":"x","timestamp":"2026-01-01T00:00:00Z","cwd":""}\n'


@pytest.mark.parametrize("session_id", ["../../etc", "*", "a/b", "a b", ".hidden", "", "k{1}"])
@pytest.mark.parametrize("call", [
    lambda c, sid: c.sessions.create(sid),
    lambda c, sid: c.sessions.append(sid, user("x")),
    lambda c, sid: c.sessions.import_jsonl(TEXT, sid),
    lambda c, sid: c.compact(sid),
], ids=["create", "append", "import", "compact"])
def test_a_session_id_that_names_a_path_or_a_pattern_is_refused(
        client: CompactionClient, raw: redis.Redis[str], session_id: str,
        call: Callable[[CompactionClient, str], Any]) -> None:
    with pytest.raises(InvalidIdError, match="invalid session id"):
        call(client, session_id)
    assert raw.keys("*") == []


SMALL = {"max_entry_bytes": 2_000, "max_append_bytes": 5_000, "max_append_entries": 10}


@pytest.mark.parametrize(("batch", "error", "setting", "measured"), [
    # the stored line: the text plus its JSON and the ids the script fills in (< 400 bytes)
    ([user("y" * 3_000)], EntryTooLargeError, "max_entry_bytes", (3_000, 3_400)),
    # the lines up to the one that crossed the bound (the third)
    ([user("y" * 1_500)] * 4, AppendTooLargeError, "max_append_bytes", (4_500, 5_700)),
    ([user("y")] * 11, AppendTooLargeError, "max_append_entries", (11, 11)),
], ids=["entry bytes", "append bytes", "entries"])
def test_an_append_over_a_bound_names_it_and_stores_nothing(
        redis_url: str, batch: list[dict[str, Any]], error: type[LimitExceededError],
        setting: str, measured: tuple[int, int]) -> None:
    with CompactionClient(ClientSettings(redis_url=redis_url, **SMALL)) as client:
        sid = client.sessions.create()
        before = client.sessions.export_jsonl(sid), client.sessions.revision(sid)
        with pytest.raises(error) as caught:
            client.sessions.append_many(sid, batch)
        assert (caught.value.setting, caught.value.limit) == (setting, SMALL[setting])
        assert measured[0] <= caught.value.value <= measured[1]
        assert f"is {caught.value.value:,} " in str(caught.value)
        assert f"{setting} = {SMALL[setting]:,}" in str(caught.value)
        assert f"COMPACTOR_{setting.upper()}" in str(caught.value)
        assert (client.sessions.export_jsonl(sid), client.sessions.revision(sid)) == before


def test_the_defaults_refuse_a_huge_entry_and_a_huge_batch_before_sending(
        client: CompactionClient, raw: redis.Redis[str]) -> None:
    sid = client.sessions.create()
    calls = raw.info("stats")["total_commands_processed"]
    with pytest.raises(EntryTooLargeError, match="max_entry_bytes = 8,388,608"):
        client.sessions.append(sid, user("z" * (9 << 20)))
    with pytest.raises(AppendTooLargeError, match="is 1,001 entries, over the limit "
                                                  "max_append_entries = 1,000"):
        client.sessions.append_many(sid, [user("z")] * 1_001)
    assert raw.info("stats")["total_commands_processed"] == calls + 1  # only INFO itself
    assert client.sessions.revision(sid) == 1


def test_instructions_over_the_bound_queue_nothing(redis_url: str,
                                                   raw: redis.Redis[str]) -> None:
    seed_sessions(redis_url, "s1")
    settings = ClientSettings(redis_url=redis_url, max_instructions_chars=100)
    before = sorted(raw.keys("*"))
    with CompactionClient(settings) as client:
        with pytest.raises(InstructionsTooLongError) as caught:
            client.compact("s1", instructions="i" * 101)
        with pytest.raises(InstructionsTooLongError):
            client.branch_summary("s1", "t1", instructions="i" * 101)
        assert (caught.value.setting, caught.value.limit, caught.value.value) == (
            "max_instructions_chars", 100, 101)
        assert "is 101 characters, over the limit max_instructions_chars = 100" in str(
            caught.value)
        assert sorted(raw.keys("*")) == before  # no record, no message, no single-flight key
        assert client.compact("s1", instructions="i" * 100).record().instructions == "i" * 100


@pytest.fixture
def proxy(redis_proc: Any, redis_url: str) -> Iterator[TcpProxy]:
    p = TcpProxy(redis_proc.port)
    yield p
    p.close()


def _through(proxy: TcpProxy) -> ClientSettings:
    # A 0.2 s read timeout (half the 0.4 s budget): a reply held 0.5 s is lost to the client.
    return ClientSettings(redis_url=f"redis://127.0.0.1:{proxy.port}/0", enqueue_timeout_s=0.4)


def _evalsha_calls(raw: redis.Redis[str]) -> int:
    return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def _stored_ids(raw: redis.Redis[str], client: CompactionClient, sid: str) -> list[str]:
    return list(raw.lrange(client.layout.session(sid).order, 0, -1))


def test_a_lost_reply_is_neither_a_failure_nor_a_duplicate(proxy: TcpProxy,
                                                           raw: redis.Redis[str]) -> None:
    with CompactionClient(_through(proxy)) as client:
        sid = client.sessions.create()
        client.warm()
        sent = _evalsha_calls(raw)
        proxy.delay_replies(0.5)  # Redis stores the entry; its reply comes too late
        ids = client.sessions.append_many(sid, [user("once"), user("twice?")])
        assert _evalsha_calls(raw) == sent + 2  # the append, and again under its key
        assert _stored_ids(raw, client, sid) == ids
        assert client.sessions.revision(sid) == 2


def test_an_unconfirmed_append_is_stored_once_when_repeated_with_its_key(
        proxy: TcpProxy, raw: redis.Redis[str]) -> None:
    with CompactionClient(_through(proxy)) as client:
        sid = client.sessions.create()
        client.warm()
        proxy.delay_replies(0.5, count=2)  # the append and its retry: both replies lost
        with pytest.raises(AppendUnconfirmedError) as caught:
            client.sessions.append(sid, user("maybe"))
        key = caught.value.idempotency_key
        assert f"idempotency_key={key!r}" in str(caught.value)
        [stored] = _stored_ids(raw, client, sid)  # it did happen
        assert client.sessions.append(sid, user("maybe"), idempotency_key=key) == stored
        assert _stored_ids(raw, client, sid) == [stored]


def test_the_same_key_appends_once_sync_and_async(client: CompactionClient,
                                                  settings: ClientSettings,
                                                  raw: redis.Redis[str]) -> None:
    sid = client.sessions.create()
    first = client.sessions.append_many(sid, [user("a"), user("b")], idempotency_key="turn-7")
    assert client.sessions.append_many(sid, [user("a"), user("b")],
                                       idempotency_key="turn-7") == first

    async def again() -> list[str]:
        async with AsyncCompactionClient(settings) as ac:
            return await ac.sessions.append_many(sid, [user("a"), user("b")],
                                                 idempotency_key="turn-7")

    assert asyncio.run(again()) == first
    assert _stored_ids(raw, client, sid) == first and client.sessions.revision(sid) == 2
    assert client.sessions.append(sid, user("c"), idempotency_key="turn-8") not in first
    with pytest.raises(InvalidIdError):
        client.sessions.append(sid, user("d"), idempotency_key="no spaces")


def test_a_job_refuses_a_session_over_max_session_bytes_before_loading_it(
        redis_url: str, raw: redis.Redis[str]) -> None:
    from runtime.runtime_support import running_worker, runtime_settings

    from api_client import JobFailedError, SessionTooLargeError
    from worker.store.snapshot_store import SnapshotStore

    settings = runtime_settings(redis_url, max_session_bytes=50_000)
    with CompactionClient(settings.client) as client, running_worker(settings):
        sid = client.sessions.create()
        for turn in range(8):
            client.sessions.append_many(sid, [user(f"turn {turn} " + "w " * 4_000)])
        store = SnapshotStore(raw, client.layout, max_bytes=50_000)
        with pytest.raises(SessionTooLargeError) as caught:
            store.load(sid)
        assert caught.value.value > 50_000 == caught.value.limit
        with pytest.raises(JobFailedError, match="over the limit max_session_bytes = 50,000 "
                                                 r"\(COMPACTOR_MAX_SESSION_BYTES\); the job "
                                                 "does not load it"):
            client.compact(sid).wait(30)
        assert client.sessions.revision(sid) == 9  # unchanged
