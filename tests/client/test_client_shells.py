"""One implementation per operation: the sans-IO flows, and the sync and asyncio shells agreeing.

The flows are driven by hand here (replies sent in, errors thrown in: no Redis needed to see
what a flow asks for and how it reads an answer); the shells run them on the run's own Redis.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import redis
from client.conftest import seed_sessions

from api_client import (
    AsyncCompactionClient,
    BrokerUnavailableError,
    ClientSettings,
    CompactionClient,
    JobCancelledError,
    JobError,
    JobFailedError,
    JobKind,
    JobNotFoundError,
    JobState,
    JobTimeoutError,
    SessionNotFoundError,
)
from api_client.client.jobs import EnqueueResult, JobStore
from api_client.client.sessions import SessionStore
from api_client.contract.job_enums import CompactReason
from api_client.contract.job_records import get_record
from api_client.contract.redis_flows import Command, Pipeline, Script, cmd, drive
from api_client.contract.routing import route_for
from api_client.contract.wire import job_error_text
from helpers.jobs import worker_jobs

JOB = "s1:" + "0" * 16


@pytest.mark.parametrize(
    ("kind", "state", "reason", "message", "text"),
    [
        (JobKind.COMPACT, JobState.CANCELLED, None, None, "Compaction cancelled"),
        (JobKind.PRUNE, JobState.CANCELLED, None, None, "Compaction cancelled"),
        (JobKind.BRANCH_SUMMARY, JobState.CANCELLED, None, None, "Branch summary cancelled"),
        (JobKind.COMPACT, JobState.FAILED, CompactReason.MANUAL, "boom", "boom"),
        (JobKind.COMPACT, JobState.FAILED, None, "boom", "boom"),
        (JobKind.COMPACT, JobState.FAILED, "threshold", "boom", "Auto-compaction failed: boom"),
        (JobKind.COMPACT, JobState.FAILED, CompactReason.OVERFLOW, "boom",
         "Context overflow recovery failed: boom"),
        (JobKind.COMPACT, JobState.FAILED, None, None, "compaction failed"),
        (JobKind.PRUNE, JobState.FAILED, None, "bad", "bad"),
        (JobKind.BRANCH_SUMMARY, JobState.FAILED, None, None, "job failed"),
    ],
)
def test_job_error_text(kind: JobKind, state: JobState, reason: Any, message: str | None,
                        text: str) -> None:
    assert job_error_text(kind, state, reason, message) == text


def test_a_flow_asks_for_calls_and_reads_their_replies() -> None:
    jobs = JobStore(redis.Redis(decode_responses=True))  # never connects: the flow is driven here
    flow = get_record(jobs.layout, JOB)
    # One script reads the record and the entry it names (same slot: the session's).
    assert next(flow) == Script("read_record", [f"compactor:session:{{s1}}:job:{'0' * 16}",
                                                "compactor:session:{s1}:entries"], [])
    with pytest.raises(JobNotFoundError):
        flow.send([""])
    fields = ["", "id", JOB, "kind", "prune", "sessionId", "s1", "state", "running"]
    assert drive(get_record(jobs.layout, JOB), lambda call: fields).state is JobState.RUNNING


def test_a_load_is_a_transaction_of_four_reads_then_bounded_pages() -> None:
    store = SessionStore(redis.Redis(decode_responses=True))
    flow = store._load("s1")
    call = next(flow)
    assert isinstance(call, Pipeline) and call.transaction
    assert [c.name for c in call.commands] == ["get", "get", "get", "llen"]
    pages = flow.send(['{"type":"session"}', "3", "b", 2])  # the order, in pages of ids
    assert isinstance(pages, Pipeline) and not pages.transaction
    assert [(c.name, c.args[1:]) for c in pages.commands] == [("lrange", (0, 9_999))]
    lines = flow.send([["a", "b"]])
    assert (lines.name, lines.args[1]) == ("hmget", ["a", "b"])  # type: ignore[union-attr]
    missing = store._load("s1")
    next(missing)
    with pytest.raises(SessionNotFoundError):  # no header: no session
        missing.send([None, None, None, 0])


def test_an_error_thrown_into_a_flow_is_handled_where_the_flow_says() -> None:
    """A job that could not be sent is failed; if that fails too, the broker error still wins."""
    client = CompactionClient("redis://127.0.0.1:1/0")  # never connects
    sent_error = BrokerUnavailableError("broker unavailable: down")
    result = EnqueueResult(JOB, "created", JobState.QUEUED, "0-0", route_for(JobKind.PRUNE))
    calls: list[Any] = []

    def down(call: Any) -> Any:
        calls.append(call.name)
        raise BrokerUnavailableError("Redis unavailable: down too")

    with pytest.raises(BrokerUnavailableError) as info:
        drive(client.flows._unsent(result, sent_error), down)
    assert info.value is sent_error
    assert calls == ["read_record"]  # the record, to finish it
    upgraded = EnqueueResult(JOB, "upgraded", JobState.QUEUED, "0-0", route_for(JobKind.PRUNE))
    assert drive(client.flows._unsent(upgraded, sent_error), down) is None
    assert calls == ["read_record"]  # an upgraded job keeps its first message: nothing to fail
    client.close()


@pytest.mark.parametrize("kind", list(JobKind))
@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_queued_job_cancelled_by_the_client_names_its_kind(
        client: CompactionClient, redis_url: str, kind: JobKind, side: str) -> None:
    seed_sessions(redis_url, "s1")  # with the branch target t1
    job = _enqueue(client, kind)
    expected = job_error_text(kind, JobState.CANCELLED)
    if side == "sync":
        assert client.job(job).cancel() is JobState.CANCELLED
    else:
        assert asyncio.run(_async_cancel(redis_url, job)) is JobState.CANCELLED
    record = client.jobs.get(job)
    (event,) = [e for e in client.events("s1", follow=False) if e.job_id == job]
    assert (record.state, record.error, event.state, event.error) == (
        JobState.CANCELLED, expected, JobState.CANCELLED, expected)
    with pytest.raises(JobCancelledError, match=expected):
        client.job(job).wait(timeout=1)


def _enqueue(client: CompactionClient, kind: JobKind) -> str:
    target = "t1" if kind is JobKind.BRANCH_SUMMARY else None
    return client.jobs.enqueue("s1", kind, target_id=target).job_id


async def _async_cancel(url: str, job: str) -> JobState:
    async with AsyncCompactionClient(url) as ac:
        return await (await ac.job(job)).cancel()


@pytest.mark.parametrize(
    ("ending", "raised"),
    [
        ("none", JobTimeoutError),            # still queued when the time is up
        ("failed", JobFailedError),           # ended before wait() started: the record answers
        ("cancelled", JobCancelledError),
        ("succeeded", None),
    ],
)
def test_sync_and_async_wait_agree(client: CompactionClient, redis_url: str, ending: str,
                                   raised: type[JobError] | None) -> None:
    client.sessions.create("s1")
    job = client.jobs.enqueue("s1", "prune").job_id
    if ending != "none":
        worker_jobs(client).finish(job, ending, error="bad" if ending == "failed" else None,
                                   result={"prunedEntryIds": ["a"], "tokensSaved": 3})

    def sync_wait() -> Any:
        return client.job(job).wait(timeout=0.3)

    async def async_wait() -> Any:
        async with AsyncCompactionClient(redis_url) as ac:
            return await (await ac.job(job)).wait(timeout=0.3)

    outcomes = []
    for wait in (sync_wait, lambda: asyncio.run(async_wait())):
        try:
            outcomes.append(("returned", wait()))
        except JobError as err:
            outcomes.append((type(err).__name__, str(err)))
    assert outcomes[0] == outcomes[1]
    if raised is not None:
        assert outcomes[0][0] == raised.__name__
    else:
        assert outcomes[0][1].tokens_saved == 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_async_broker_down_fails_the_job_record_as_the_sync_client_does(redis_url: str) -> None:
    settings = ClientSettings(redis_url=redis_url, broker_url=f"redis://127.0.0.1:{_free_port()}/0")
    seed_sessions(redis_url, "s1")

    async def scenario() -> None:
        async with AsyncCompactionClient(settings) as ac:
            with pytest.raises(BrokerUnavailableError, match="broker unavailable"):
                await ac.compact("s1")

    asyncio.run(scenario())
    with CompactionClient(settings) as client:
        (key,) = client.redis.keys("compactor:session:{s1}:job:*")
        record = client.redis.hgetall(key)
        assert record["state"] == "failed" and "broker unavailable" in record["error"]
        assert client.redis.get("compactor:session:{s1}:inflight:compact") is None


def test_calls_are_plain_data() -> None:
    # Flows compare and print their calls: what an operation sends is visible without Redis.
    assert cmd("get", "k") == Command("get", ("k",), {})
    assert Script("enqueue", ["a"], ["b"]).name == "enqueue"


def test_scripts_survive_flush_and_kill(
        client: CompactionClient, raw: redis.Redis[str]) -> None:
    """A script the server lost is loaded again, a connection the server dropped is replaced
    by the pool, and every connection goes back to the pool."""
    seed_sessions(client.settings.redis_url, "d1", "d2", "d3")
    first = client.compact("d1", "threshold")
    raw.script_flush()  # as after a restart: the next EVALSHA meets NOSCRIPT
    second = client.compact("d2", "threshold")
    killed = raw.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1  # the client's pooled connection is gone
    third = client.compact("d3", "threshold")
    assert len({first.id, second.id, third.id}) == 3
    states = {raw.hget(client.layout.job(h.id).record, "state") for h in (first, second, third)}
    assert states == {"queued"}
    assert not client.redis.connection_pool._in_use_connections  # type: ignore[attr-defined]
    with pytest.raises(SessionNotFoundError):  # an error reply is read, the connection kept
        client.compact("missing", "threshold")
    assert not client.redis.connection_pool._in_use_connections  # type: ignore[attr-defined]


def test_scripts_fail_fast_on_a_dead_server() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = ClientSettings(redis_url=f"redis://127.0.0.1:{port}/0", connect_timeout_s=0.2)
    with CompactionClient(settings) as dead, \
            pytest.raises(BrokerUnavailableError, match="Redis unavailable"):
        dead.compact("s1", "threshold")


def test_async_scripts_survive_flush_and_kill(redis_url: str, raw: redis.Redis[str]) -> None:
    """The asyncio shell's own EVALSHA path (AsyncShell._evalsha) as the sync one's: a lost
    script is loaded again, a dropped connection replaced, every connection given back."""
    seed_sessions(redis_url, "a1", "a2", "a3")

    async def scenario() -> None:
        async with AsyncCompactionClient(redis_url) as ac:
            pool: Any = ac.redis.connection_pool
            first = await ac.compact("a1", "threshold")
            raw.script_flush()
            second = await ac.compact("a2", "threshold")
            assert raw.client_kill_filter(_type="normal", skipme=True) >= 1
            third = await ac.compact("a3", "threshold")
            assert len({first.id, second.id, third.id}) == 3
            assert not pool._in_use_connections
            with pytest.raises(SessionNotFoundError):  # an error reply: the connection kept
                await ac.compact("missing", "threshold")
            assert not pool._in_use_connections

    asyncio.run(scenario())
    states = {raw.hget(key, "state") for key in raw.keys("compactor:session:{a*}:job:*")}
    assert states == {"queued"}


def test_async_scripts_skip_redis_pys_command_path(redis_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A compact's and an append's script go straight to a pooled connection, packed in C:
    redis-py's execute_command was most of compactor serve's own CPU on those routes."""
    seed_sessions(redis_url, "a1")
    commands: list[object] = []

    async def scenario() -> None:
        async with AsyncCompactionClient(redis_url) as ac:
            await ac.warm()
            execute = ac.redis.execute_command

            async def counted(*args: Any, **options: Any) -> Any:
                commands.append(args[0])
                return await execute(*args, **options)

            monkeypatch.setattr(ac.redis, "execute_command", counted)
            await ac.compact("a1", "manual")
            await ac.sessions.append_with_revision("a1", [{"role": "user", "content": "x",
                                                           "timestamp": 1}])

    asyncio.run(scenario())
    assert commands == []


def test_async_scripts_fail_fast_on_a_dead_server() -> None:
    settings = ClientSettings(redis_url=f"redis://127.0.0.1:{_free_port()}/0",
                              connect_timeout_s=0.2)

    async def scenario() -> None:
        async with AsyncCompactionClient(settings) as dead:
            with pytest.raises(BrokerUnavailableError, match="Redis unavailable"):
                await dead.compact("s1", "threshold")

    asyncio.run(scenario())
