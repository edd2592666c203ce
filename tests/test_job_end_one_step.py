"""A worker's end of a job (worker/store/job_lifecycle.py ``finish``, lua/end_job.lua): on one
Redis one round trip counts the delivery's spend, gives the job's reservation back, ends the job
and copies its completion event to the global stream; on a Redis Cluster (other slots) the same
writes go as the spend's MULTI, finish.lua and commands of their own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from api_client import CompactionClient
from api_client.contract.job_enums import EventType, JobState
from api_client.contract.redis_flows import Call
from api_client.contract.usage import SpendAdd, utc_day
from api_client.contract.wire import JobEvent
from worker.store.job_lifecycle import JobStore


@pytest.fixture
def client(redis_url: str) -> Iterator[CompactionClient]:
    with CompactionClient(redis_url) as c:
        yield c


def _running(client: CompactionClient) -> tuple[JobStore, str]:
    sid = client.sessions.create("end")
    client.sessions.append(sid, {"role": "user", "content": "hi", "timestamp": 1})
    job = client.jobs.enqueue(sid, "compact", reason="manual").job_id
    store = JobStore(client.redis, client.settings, client.layout)
    assert store.mark_running(job) == 1
    return store, job


def _trips(store: JobStore) -> list[Call]:
    """Every round trip the store's flows make from now on (a pipeline or MULTI is one)."""
    sent: list[Call] = []
    execute = store._io.execute

    def counted(call: Call) -> Any:
        sent.append(call)
        return execute(call)

    store._io.execute = counted  # type: ignore[method-assign]
    return sent


@pytest.mark.parametrize("one_step", [True, False])
def test_the_end_counts_the_spend_and_gives_back_the_reservation(
        client: CompactionClient, one_step: bool) -> None:
    store, job = _running(client)
    assert store.ends_in_one_step  # a single Redis
    store.ends_in_one_step = one_step  # False: the path a Redis Cluster takes
    layout, at = client.layout, time.time()
    reserved, day = layout.tenant_reserved("default"), layout.tenant_usage("default", utc_day(at))
    client.redis.hset(reserved, mapping={job: "900 99999999999999 -", "other": "5 9 -"})
    record = client.jobs.get(job)
    event = JobEvent.completion(record, JobState.SUCCEEDED, cost_usd=0.25)
    spend = SpendAdd("default", utc_day(at), input_tokens=30, output_tokens=4, usd=0.25,
                     draft=False, jobs=1)
    sent = _trips(store)
    assert store.finish(job, JobState.SUCCEEDED, event=event, spend=spend, cost_usd=0.25)
    assert len(sent) == (1 if one_step else 4)  # spend MULTI, finish.lua, global copy, release
    assert client.redis.hgetall(day) == {"jobs": "1", "input_tokens": "30",
                                         "output_tokens": "4", "usd": "0.25"}
    assert client.redis.ttl(day) > 0 and client.redis.smembers(layout.tenants) == {"default"}
    assert client.redis.hkeys(reserved) == ["other"]
    assert client.jobs.get(job).state is JobState.SUCCEEDED
    session = client.layout.job(job).session
    assert client.redis.get(session.inflight("compact")) is None
    ends = [f for _, f in client.redis.xrange(layout.events_of(record.session_id))
            if f["type"] == "compaction_end"]
    assert [f["job"] for f in ends] == [job]
    # A second end changes nothing and copies nothing (the job ended once).
    copies = client.redis.xlen(layout.events_of(record.session_id))
    assert not store.finish(job, JobState.FAILED, event=event)
    assert client.redis.xlen(layout.events_of(record.session_id)) == copies
    assert client.jobs.get(job).state is JobState.SUCCEEDED


def test_the_one_step_end_without_a_spend_and_of_a_queued_job(
        client: CompactionClient) -> None:
    """No model called (a prune, a refusal): the end still gives the reservation back in its
    one step; a job ended before it started also leaves its tenant's queued set."""
    store, job = _running(client)
    sent = _trips(store)
    assert store.finish(job, JobState.FAILED, record=client.jobs.get(job), error="x")
    assert len(sent) == 1
    assert not client.redis.exists(client.layout.tenant_usage("default", utc_day(time.time())))
    sid = client.sessions.create("queued")
    queued = client.jobs.enqueue(sid, "prune").job_id
    assert client.redis.zscore(client.layout.queued_of_job(queued), queued) is not None
    assert store.finish(queued, JobState.FAILED, record=client.jobs.get(queued), error="y")
    assert client.redis.zscore(client.layout.queued_of_job(queued), queued) is None


@pytest.mark.parametrize("one_step", [True, False])
def test_an_end_whose_start_saw_no_budget_gives_nothing_back(client: CompactionClient,
                                                             one_step: bool) -> None:
    """Its start saw no daily budget (``release=False``): admission reserved nothing for the
    job, and its end sends no HDEL (a budget removed after the admission leaves that
    reservation to lapse at its own time: docs/tenants.md)."""
    store, job = _running(client)
    store.ends_in_one_step = one_step
    reserved = client.layout.tenant_reserved("default")
    client.redis.hset(reserved, job, "900 99999999999999 -")
    sent = _trips(store)
    assert store.finish(job, JobState.FAILED, record=client.jobs.get(job), error="x",
                        release=False)
    assert len(sent) == (1 if one_step else 2)  # finish.lua and its global copy
    assert client.redis.hkeys(reserved) == [job]
    assert client.jobs.get(job).state is JobState.FAILED


def test_the_commits_event_goes_with_the_end_before_it(client: CompactionClient) -> None:
    """A compaction's ``session_compact`` (announced by the job) is written in the end's one
    round trip, on the session's stream and the global one, before ``compaction_end``."""
    store, job = _running(client)
    record = client.jobs.get(job)
    told = JobEvent.for_record(record, EventType.SESSION_COMPACT, tokens_before=9)
    sent = _trips(store)
    end = JobEvent.completion(record, JobState.SUCCEEDED)
    assert store.finish(job, JobState.SUCCEEDED, event=end, announce=(told,))
    assert len(sent) == 1
    session = client.layout.job(job).session.events
    for stream in (session, client.layout.events_of(record.session_id)):
        types = [f["type"] for _, f in client.redis.xrange(stream) if f["job"] == job]
        assert types[-2:] == ["session_compact", "compaction_end"]
    assert client.redis.ttl(session) > 0
