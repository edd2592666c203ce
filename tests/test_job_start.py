"""A job's start on a single Redis (worker/store/job_start.py, start_job.lua): one round trip, one
EVALSHA, where a delivery sent ten calls (the lease, the jobs-due index, the tenant's slot, the
record running, the queued set, the fair index, the budget's reads, the start event with its
retention and global copy); with every outcome the separate calls had: held, finished, put back
over max_running, a missing record, one attempt more each start, a full Redis refusing it whole,
and the start event only when no check of the worker can come between it and the start; the
start of a compaction's or a prune's read of its path, which the job's load goes on from
without a round trip of its own when the first page holds the path."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from api_client import CompactionClient
from api_client.contract.errors import (
    JobNotFoundError,
    SessionTooLargeError,
    StorageFullError,
)
from api_client.contract.job_enums import EventType, JobKind, JobState
from api_client.contract.job_events import decode_event
from api_client.contract.keys import ANY_TENANT, KeyLayout
from api_client.contract.session import Entry
from api_client.contract.usage import utc_day
from api_client.contract.wire import JobEvent
from helpers.sessions import turns_jsonl
from helpers.waits import wait_until
from worker.store.job_lifecycle import JobStore
from worker.store.job_start import JobStart, JobStarts
from worker.store.leases import LeaseOutcome
from worker.store.paths import PAGE_LINES, FirstRead
from worker.store.snapshot_store import SnapshotStore
from worker.store.tenant_slots import DEFER_S, TenantSlots

TEXT = turns_jsonl("start", [f"turn {i} the parser splits amounts by locale" for i in range(8)])


class Worker:
    """The worker's side of one Redis: its stores, as the composition root builds them."""

    def __init__(self, url: str, max_running: int = 0, max_bytes: int = 1 << 30) -> None:
        self.raw = redis.Redis.from_url(url, decode_responses=True)
        self.layout = KeyLayout("compactor", ANY_TENANT)
        self.jobs = JobStore(self.raw, layout=self.layout)
        self.slots = TenantSlots(self.raw, self.layout, max_running=max_running, hold_s=60)
        self.starts = JobStarts(self.jobs, lease_ttl_s=3, slots=self.slots, budgets=True,
                                max_session_bytes=max_bytes)
        self.sessions = SnapshotStore(self.raw, self.layout, max_bytes=max_bytes)

    def begin(self, job_id: str, owner: str = "w1/a") -> JobStart:
        return self.starts.begin(job_id, owner)

    def events(self, session_id: str) -> list[JobEvent]:
        stream = self.layout.session(session_id).events
        return [decode_event(i, f) for i, f in self.raw.xrange(stream)]


@pytest.fixture
def worker(redis_url: str) -> Iterator[Worker]:
    w = Worker(redis_url)
    yield w
    w.raw.close()


def _queued(url: str, tenant: str | None = None, kind: str = "compact",
            text: str = TEXT) -> tuple[str, str]:
    """(session id, job id) of a job enqueued as a client does, its message on the broker's
    list in its fair place (no worker takes it). ``kind``: compact, speculative or prune."""
    with CompactionClient(url, tenant=tenant) as client:
        sid = client.sessions.import_jsonl(text, f"s-{uuid.uuid4().hex[:10]}")
        handle = (client.prune(sid) if kind == "prune" else
                  client.compact(sid, reason="manual" if kind == "compact" else kind))
        return client.layout.qualified(sid), handle.id


def sent_by_clients(url: str, fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """What ``fn`` returned and the commands Redis got from clients while it ran (MONITOR; the
    commands a script runs inside apart)."""
    lines: list[str] = []
    marker = redis.Redis.from_url(url, decode_responses=True)
    monitor = redis.Redis.from_url(url, decode_responses=True)

    def watch() -> None:
        with monitor.monitor() as m:
            for command in m.listen():
                if command.get("client_type") != "lua":
                    lines.append(str(command["command"]))
                if command["command"] == "ECHO end":
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    wait_until(lambda: marker.echo("start") and "ECHO start" in lines, what="MONITOR on")
    result = fn()
    marker.echo("end")
    thread.join(10)
    marker.close()
    monitor.close()
    sent = lines[lines.index("ECHO start") + 1:lines.index("ECHO end")]
    return result, [line for line in sent if line != "ECHO start"]


def test_a_start_is_one_evalsha_on_a_single_redis(worker: Worker, redis_url: str) -> None:
    worker.begin(_queued(redis_url)[1])  # a worker's first start loads the script
    sid, job_id = _queued(redis_url)
    record_key = worker.layout.job(job_id).record
    queue, priority = worker.raw.hmget(record_key, "queue", "priority")
    tags, messages = worker.layout.fair_index(str(queue), int(str(priority)))
    assert worker.raw.zscore(tags, job_id) is not None  # the client placed it
    before = int(time.time() * 1000)
    start, sent = sent_by_clients(redis_url, lambda: worker.begin(job_id))
    assert [line.split()[0] for line in sent] == ["EVALSHA"], sent
    assert start.lease is LeaseOutcome.ACQUIRED and not start.deferred and start.start_event
    record = start.record
    assert record is not None and record.state is JobState.RUNNING and record.attempts == 1
    assert worker.raw.get(worker.layout.job(job_id).lease) == "w1/a"
    due = worker.raw.zscore(worker.layout.jobs_due, job_id)
    assert due is not None and before + 3000 <= due <= time.time() * 1000 + 3000
    assert worker.raw.zscore(worker.layout.tenant_queued("default"), job_id) is None
    assert worker.raw.zscore(tags, job_id) is None and worker.raw.hget(messages, job_id) is None
    # No budget set: the quota read (once), not the day's spend; the check reads nothing, and
    # nothing was reserved for the job (admission reserves under a daily budget only).
    assert start.budget is not None and start.budget[0].spent_tokens == 0
    assert not start.may_reserve
    # The start event, as the job's publish wrote it, with its TTL and its global copy.
    (event,) = worker.events(sid)
    assert event.type is EventType.COMPACTION_START
    expected = JobEvent.for_record(record, EventType.COMPACTION_START,
                                   timestamp=event.timestamp)
    assert event.to_wire() == expected.to_wire() and event.timestamp == record.started_at
    assert 0 < worker.raw.ttl(worker.layout.session(sid).events) <= 86_400
    copies = worker.raw.xrange(worker.layout.events_of(sid))
    assert copies[-1][1] == worker.raw.xrange(worker.layout.session(sid).events)[0][1]


def test_held_finished_and_missing_as_the_separate_calls_had_them(worker: Worker,
                                                                  redis_url: str) -> None:
    sid, job_id = _queued(redis_url)
    assert worker.jobs.acquire_lease(job_id, "w2/b", 10) is LeaseOutcome.ACQUIRED
    assert worker.begin(job_id) == JobStart(LeaseOutcome.HELD)
    assert worker.raw.hget(worker.layout.job(job_id).record, "state") == "queued"
    assert worker.events(sid) == []
    worker.jobs.finish(job_id, JobState.FAILED, error="gone")
    assert worker.begin(job_id) == JobStart(LeaseOutcome.FINISHED)
    with pytest.raises(JobNotFoundError):
        worker.begin(f"{sid}:0123456789abcdef")


def test_each_start_counts_an_attempt_and_a_committed_one_starts_no_event(
        worker: Worker, redis_url: str) -> None:
    sid, job_id = _queued(redis_url)
    first = worker.begin(job_id, "w1/a")
    worker.jobs.release_lease(job_id, "w1/a")  # that delivery died
    second = worker.begin(job_id, "w1/b")
    assert first.record is not None and second.record is not None
    assert (first.record.attempts, second.record.attempts) == (1, 2)
    assert second.record.started_at == first.record.started_at  # the first start time kept
    assert [e.attempt for e in worker.events(sid)] == [1, 2] and second.start_event
    # An earlier delivery committed (its marker: the record's, or an older worker's hash).
    worker.jobs.release_lease(job_id, "w1/b")
    worker.raw.hset(worker.layout.job(job_id).record, "effect", "e1")
    third = worker.begin(job_id, "w1/c")
    assert third.record is not None and third.record.attempts == 3 and not third.start_event
    assert len(worker.events(sid)) == 2


def test_over_max_running_the_job_is_put_back(redis_url: str) -> None:
    worker = Worker(redis_url, max_running=1)
    sid, job_id = _queued(redis_url)
    running = worker.layout.tenant_running("default")
    worker.raw.zadd(running, {"other:0123456789abcdef": time.time() * 1000 + 60_000})
    before = int(time.time() * 1000)
    assert worker.begin(job_id) == JobStart(LeaseOutcome.ACQUIRED, deferred=True)
    # The lease let go, due again DEFER_S on, still queued, no attempt counted, no event.
    assert worker.raw.get(worker.layout.job(job_id).lease) is None
    due = worker.raw.zscore(worker.layout.jobs_due, job_id)
    assert due is not None and before + DEFER_S * 1000 <= due <= before + DEFER_S * 1000 + 1000
    assert worker.raw.hmget(worker.layout.job(job_id).record, "state", "attempts") == [
        "queued", "0"]
    assert worker.raw.zscore(worker.layout.tenant_queued("default"), job_id) is not None
    assert worker.events(sid) == []
    worker.raw.delete(running)  # the other job ended: this one takes the slot
    start = worker.begin(job_id)
    assert start.record is not None and worker.raw.zscore(running, job_id) is not None
    worker.slots.release(job_id)
    assert worker.raw.zscore(running, job_id) is None
    # The quota's field wins over the setting: no cap for this tenant.
    worker.raw.hset(worker.layout.tenant_quota("default"), "max_running", "0")
    _, other = _queued(redis_url)
    assert worker.begin(other).record is not None and worker.raw.exists(running) == 0


def test_a_budget_leaves_the_start_event_to_the_check(worker: Worker, redis_url: str) -> None:
    """With a tokens_per_day the worker's check may refuse the job: the start reads the day's
    spend for it and writes no event (the job publishes it once the check let it run)."""
    sid, job_id = _queued(redis_url)
    worker.raw.hset(worker.layout.tenant_quota("default"), "tokens_per_day", "1000")
    worker.raw.hset(worker.layout.tenant_usage("default", utc_day(time.time())),
                    mapping={"input_tokens": "700", "output_tokens": "50"})
    start = worker.begin(job_id)
    assert start.record is not None and not start.start_event and worker.events(sid) == []
    assert start.budget is not None
    usage, quota = start.budget
    assert usage.spent_tokens == 750 and quota == {"tokens_per_day": "1000"}
    assert start.may_reserve  # its end gives the reservation back


def test_a_prune_starts_no_compaction_event(worker: Worker, redis_url: str) -> None:
    sid, job_id = _queued(redis_url, kind="prune")
    start = worker.begin(job_id)
    assert start.record is not None and start.record.kind is JobKind.PRUNE
    assert not start.start_event and worker.events(sid) == []


def test_an_inbox_job_starts_as_admitted(worker: Worker, redis_url: str) -> None:
    """A tenant's job runs with the kind and reason the workers admitted it as, whatever its
    record says (docs/tenants.md): so does its start event."""
    sid, job_id = _queued(redis_url, tenant="acme", kind="prune")
    worker.raw.hset(worker.layout.tenant_admitted("acme"), job_id, "compact threshold")
    start = worker.begin(job_id)
    assert start.record is not None and start.record.kind is JobKind.COMPACT
    (event,) = worker.events(sid)
    assert (event.kind, event.reason and event.reason.value) == (JobKind.COMPACT, "threshold")


def test_a_full_redis_refuses_the_start_whole(worker: Worker, redis_url: str) -> None:
    sid, job_id = _queued(redis_url)
    worker.raw.config_set("maxmemory", "1")
    try:
        with pytest.raises(StorageFullError):
            worker.begin(job_id)
    finally:
        worker.raw.config_set("maxmemory", "0")
    assert worker.raw.get(worker.layout.job(job_id).lease) is None
    assert worker.raw.hget(worker.layout.job(job_id).record, "state") == "queued"
    assert worker.events(sid) == []
    assert worker.begin(job_id).record is not None  # memory back: it starts


def _whole(path: object, pruned_through: object) -> bool:
    return False  # read to the root


def _ids(path: list[Entry]) -> list[str]:
    return [e.id for e in path]


@pytest.mark.parametrize("kind", ["compact", "prune"])
def test_the_start_reads_the_path_and_the_load_sends_nothing(worker: Worker, redis_url: str,
                                                             kind: str) -> None:
    """The stored-bytes check, the MGET and the path's first page go with the start: a path
    that fits one page costs the job's load no round trip (three before: HGET, MGET, EVALSHA),
    and it is the path a load of its own reads."""
    sid, job_id = _queued(redis_url, kind=kind)
    start = worker.begin(job_id)
    first = start.first_read
    assert first is not None and first.values is not None
    tenant, plain = worker.layout.resolve(sid)
    counted = worker.raw.hget(worker.layout.tenant_bytes(tenant), plain)
    assert first.counted == int(str(counted))
    snap, sent = sent_by_clients(redis_url,
                                 lambda: worker.sessions.load_path(sid, _whole, first))
    assert sent == []
    worker.sessions.load_path(sid, _whole)  # (Redis has the page's script from now on)
    again, sent = sent_by_clients(redis_url, lambda: worker.sessions.load_path(sid, _whole))
    assert [line.split()[0] for line in sent] == ["HGET", "MGET", "EVALSHA"]
    assert _ids(snap.path) == _ids(again.path) and snap.complete and len(snap.path) == 8
    assert (snap.revision, snap.leaf_id, snap.rewrites, snap.pruned_through) == (
        again.revision, again.leaf_id, again.rewrites, again.pruned_through)


def test_without_a_bound_the_start_reads_no_stored_bytes(redis_url: str) -> None:
    worker = Worker(redis_url, max_bytes=0)
    sid, job_id = _queued(redis_url)
    first = worker.begin(job_id).first_read
    assert first is not None and first.counted is None and first.values is not None
    snap, sent = sent_by_clients(redis_url,
                                 lambda: worker.sessions.load_path(sid, _whole, first))
    assert sent == [] and snap.complete and len(snap.path) == 8


def test_a_path_longer_than_a_page_goes_on_from_the_first(worker: Worker,
                                                          redis_url: str) -> None:
    turns = [f"turn {i} the parser splits amounts by locale" for i in range(PAGE_LINES + 20)]
    sid, job_id = _queued(redis_url, text=turns_jsonl("long", turns))
    first = worker.begin(job_id).first_read
    assert first is not None and len(first.lines) == PAGE_LINES
    worker.sessions.load_path(sid, _whole)  # (Redis has the page's script from now on)
    snap, sent = sent_by_clients(redis_url,
                                 lambda: worker.sessions.load_path(sid, _whole, first))
    assert [line.split()[0] for line in sent] == ["EVALSHA"]  # the second page only
    assert _ids(snap.path) == _ids(worker.sessions.load_path(sid, _whole).path)
    assert snap.complete and len(snap.path) == len(turns)


def test_jobs_that_read_otherwise_get_no_read_with_their_start(worker: Worker,
                                                               redis_url: str) -> None:
    """A draft reads its whole session (its own load), as a branch summary does; a session the
    stored-bytes count does not know is measured by the job (MEMORY USAGE)."""
    _, job_id = _queued(redis_url, kind="speculative")
    assert worker.begin(job_id).first_read is None
    sid, job_id = _queued(redis_url)
    tenant, plain = worker.layout.resolve(sid)
    worker.raw.hdel(worker.layout.tenant_bytes(tenant), plain)
    assert worker.begin(job_id).first_read is None


def test_over_the_bound_the_start_reads_nothing_more_and_the_load_refuses(
        redis_url: str) -> None:
    worker = Worker(redis_url, max_bytes=100)
    sid, job_id = _queued(redis_url)
    first = worker.begin(job_id).first_read
    assert first is not None and first.values is None and (first.counted or 0) > 100
    with pytest.raises(SessionTooLargeError):
        worker.sessions.load_path(sid, _whole, first)
    assert first == FirstRead(first.counted)
