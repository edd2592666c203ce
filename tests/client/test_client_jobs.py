"""JobStore: single-flight enqueue, upgrades, record lifecycle, leases, exactly-once finish.

The stores under test are both ends of a job (``helpers.jobs.BothSides``): the client's
enqueue and cancel, the worker's lifecycle (``worker.store.job_lifecycle``: leases, running).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from client.conftest import seed_sessions

from api_client import (
    ClientSettings,
    CompactionClient,
    EventType,
    InvalidIdError,
    InvalidRequestError,
    JobConflictError,
    JobEvent,
    JobNotFoundError,
    JobState,
    PruneResult,
)
from api_client.contract.job_enums import CompactReason, JobKind
from api_client.contract.routing import route_for
from api_client.contract.wire import TokenUsage, failure_message, terminal_event_type
from helpers.jobs import BothSides
from worker.store.leases import LeaseOutcome


@pytest.fixture
def jobs(client: CompactionClient) -> Any:
    seed_sessions(client.settings.redis_url, "s1", "s2")
    return BothSides(client)


def session_events(raw: redis.Redis[str], sid: str = "s1") -> list[tuple[str, str]]:
    return [(f["type"], f["job"]) for _, f in raw.xrange(f"compactor:session:{{{sid}}}:events")]


def test_second_request_of_a_kind_coalesces_into_the_queued_job(jobs: Any) -> None:
    first = jobs.enqueue("s1", "compact", reason="manual", instructions="focus")
    second = jobs.enqueue("s1", "compact", reason="manual")
    same = jobs.enqueue("s1", "compact", reason="manual", instructions="focus")
    other_kind = jobs.enqueue("s1", "prune")
    other_session = jobs.enqueue("s2", "compact")
    assert (first.outcome, first.coalesced, first.must_send) == ("created", False, True)
    assert (second.job_id, second.outcome, second.must_send) == (first.job_id, "coalesced", False)
    assert same.job_id == first.job_id
    assert len({first.job_id, other_kind.job_id, other_session.job_id}) == 3
    assert jobs.get(first.job_id).instructions == "focus"  # the job in flight keeps its request
    # other instructions would vanish in the queued job: refused, the job unchanged
    with pytest.raises(JobConflictError, match="other instructions") as caught:
        jobs.enqueue("s1", "compact", reason="manual", instructions="other")
    assert caught.value.job_id == first.job_id
    assert jobs.get(first.job_id).instructions == "focus"


def test_running_job_still_coalesces_and_a_finished_one_does_not(jobs: Any) -> None:
    first = jobs.enqueue("s1", "prune")
    jobs.acquire_lease(first.job_id, "w1", 30)
    assert jobs.mark_running(first.job_id) == 1
    again = jobs.enqueue("s1", "prune")
    assert (again.job_id, again.state) == (first.job_id, JobState.RUNNING)
    jobs.finish(first.job_id, "succeeded", result={"prunedEntryIds": [], "tokensSaved": 0})
    fresh = jobs.enqueue("s1", "prune")
    assert fresh.outcome == "created" and fresh.job_id != first.job_id


@pytest.mark.parametrize(
    ("first", "then", "outcome", "priority", "queue"),
    [
        ("manual", "overflow", "upgraded", 0, "compactor.urgent"),
        ("threshold", "overflow", "upgraded", 0, "compactor.urgent"),
        ("manual", "threshold", "upgraded", 3, "compactor.compact"),
        ("overflow", "manual", "coalesced", 0, "compactor.urgent"),
        ("threshold", "manual", "coalesced", 3, "compactor.compact"),
        ("overflow", "overflow", "coalesced", 0, "compactor.urgent"),
    ],
)
def test_more_urgent_compaction_upgrades_a_queued_job(jobs: Any, first: str, then: str,
                                                      outcome: str, priority: int,
                                                      queue: str) -> None:
    a = jobs.enqueue("s1", "compact", reason=first)
    b = jobs.enqueue("s1", "compact", reason=then)
    assert (b.job_id, b.outcome) == (a.job_id, outcome)
    record = jobs.get(a.job_id)
    assert (record.priority, record.queue) == (priority, queue)
    if outcome == "upgraded":
        assert record.reason == then and b.route == route_for(JobKind.COMPACT, CompactReason(then))


def test_overflow_does_not_upgrade_a_running_job(jobs: Any) -> None:
    a = jobs.enqueue("s1", "compact", reason="threshold")
    jobs.mark_running(a.job_id)
    b = jobs.enqueue("s1", "compact", reason="overflow")
    assert (b.job_id, b.outcome, b.upgraded) == (a.job_id, "coalesced", False)
    assert jobs.get(a.job_id).priority == 3


def test_branch_summary_to_another_target_is_a_conflict(jobs: Any) -> None:
    a = jobs.enqueue("s1", "branch_summary", target_id="t1")
    assert jobs.enqueue("s1", "branch_summary", target_id="t1").job_id == a.job_id
    with pytest.raises(JobConflictError) as info:
        jobs.enqueue("s1", "branch_summary", target_id="t2")
    assert info.value.job_id == a.job_id


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"kind": "compress"}, InvalidRequestError),
        ({"kind": "compact", "reason": "whenever"}, InvalidRequestError),
        ({"kind": "branch_summary"}, InvalidRequestError),
        ({"kind": "compact", "session_id": "a b"}, InvalidIdError),
    ],
)
def test_bad_requests_are_refused_before_redis(jobs: Any, kwargs: dict[str, str],
                                               error: type[Exception]) -> None:
    with pytest.raises(error):
        jobs.enqueue(**{"session_id": "s1", **kwargs})
    assert jobs.redis.keys("compactor:session:{s1}:job:*") == []


def test_record_lifecycle_and_ttl(jobs: Any, raw: redis.Redis[str]) -> None:
    a = jobs.enqueue("s1", "compact", reason="threshold", instructions="keep paths")
    record = jobs.get(a.job_id)
    assert (record.state, record.kind, record.session_id, record.reason, record.attempts) == (
        JobState.QUEUED, JobKind.COMPACT, "s1", CompactReason.THRESHOLD, 0)
    assert record.created_at.endswith("Z") and record.started_at is None
    assert raw.ttl(jobs.layout.job(a.job_id).record) > 0  # a job never run cannot linger
    assert jobs.acquire_lease(a.job_id, "w1", 30) is LeaseOutcome.ACQUIRED
    assert jobs.mark_running(a.job_id) == 1
    assert jobs.mark_running(a.job_id) == 2  # a redelivery counts another attempt
    started = jobs.get(a.job_id).started_at
    entry = {"type": "compaction", "id": "c0ffee00", "summary": "S", "tokensBefore": 9}
    assert jobs.finish(a.job_id, "succeeded", entry=entry, model="p/m",
                       usage=TokenUsage(input=10, output=2), tokens_before=9, tokens_after=3)
    done = jobs.get(a.job_id)
    assert (done.state, done.attempts, done.started_at, done.entry, done.result_entry_id) == (
        JobState.SUCCEEDED, 2, started, entry, "c0ffee00")
    assert (done.model, done.usage) == ("p/m", TokenUsage(input=10, output=2))
    ttl = raw.ttl(jobs.layout.job(a.job_id).record)
    assert 0 < ttl <= ClientSettings().job_ttl_s
    assert raw.get("compactor:session:{s1}:inflight:compact") is None
    assert raw.exists(jobs.layout.job(a.job_id).lease) == 0


def test_a_record_names_the_entry_its_session_holds_and_reads_it_back(
        jobs: Any, raw: redis.Redis[str]) -> None:
    """docs/storage.md "The entry is stored once": no copy on the record of an entry the session
    holds; every reader reads it back from the session, as absent once the session lost it."""
    a = jobs.enqueue("s1", "compact", reason="manual")
    entry = {"type": "compaction", "id": "c0ffee01", "summary": "S" * 500, "tokensBefore": 9}
    entries = jobs.layout.session("s1").entries
    raw.hset(entries, "c0ffee01", json.dumps(entry, separators=(",", ":")))
    assert jobs.acquire_lease(a.job_id, "w1", 30) is LeaseOutcome.ACQUIRED
    jobs.mark_running(a.job_id)
    assert jobs.finish(a.job_id, "succeeded", entry=entry, model="p/m")
    stored = raw.hgetall(jobs.layout.job(a.job_id).record)
    assert "entry" not in stored and stored["resultEntryId"] == "c0ffee01"
    done = jobs.get(a.job_id)
    assert (done.entry, done.result_entry_id) == (entry, "c0ffee01")
    raw.hdel(entries, "c0ffee01")  # the session rewritten (or deleted) since
    gone = jobs.get(a.job_id)
    assert (gone.entry, gone.result_entry_id, gone.state) == (None, "c0ffee01",
                                                              JobState.SUCCEEDED)


def test_an_older_workers_record_keeps_its_copy_and_a_drafts_result_gets_the_entry(
        jobs: Any, raw: redis.Redis[str]) -> None:
    """Rolling upgrade: a record written with its ``entry`` reads as it was written; an applied
    draft's record without it gets the session's entry in ``entry`` and ``result.entry``."""
    a, b = (jobs.enqueue(sid, "compact", reason="manual") for sid in ("s1", "s2"))
    old = {"type": "compaction", "id": "e1", "summary": "as written"}
    raw.hset(jobs.layout.session("s1").entries, "e1", '{"type":"compaction","id":"e1"}')
    raw.hset(jobs.layout.job(a.job_id).record, mapping={
        "state": "succeeded", "resultEntryId": "e1", "entry": json.dumps(old)})
    assert jobs.get(a.job_id).entry == old
    line = '{"type":"compaction","id":"e2","summary":"from the draft"}'
    raw.hset(jobs.layout.session("s2").entries, "e2", line)
    raw.hset(jobs.layout.job(b.job_id).record, mapping={
        "state": "succeeded", "resultEntryId": "e2",
        "result": '{"fromDraft":true,"draftJobId":"d","growthTokens":0}'})
    done = jobs.get(b.job_id)
    assert done.entry == json.loads(line)
    assert done.result == {"fromDraft": True, "draftJobId": "d", "growthTokens": 0,
                           "entry": json.loads(line)}
    assert list(done.result or {})[-1] == "entry"  # where the stored result had it


def test_finished_record_expires(redis_url: str) -> None:
    client = CompactionClient(ClientSettings(redis_url=redis_url, job_ttl_s=1))
    seed_sessions(redis_url, "s1")
    a = client.jobs.enqueue("s1", "prune")
    client.jobs.finish(a.job_id, "failed", error="x")
    deadline = time.monotonic() + 5
    while client.redis.exists(client.layout.job(a.job_id).record) and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(JobNotFoundError):
        client.jobs.get(a.job_id)
    client.close()


def test_finish_happens_once_with_one_completion_event(jobs: Any,
                                                       raw: redis.Redis[str]) -> None:
    a = jobs.enqueue("s1", "compact", reason="overflow")
    jobs.mark_running(a.job_id)
    assert jobs.finish(a.job_id, "failed", error=failure_message("overflow", "boom"))
    assert not jobs.finish(a.job_id, "succeeded", entry={"id": "x"})
    assert not jobs.finish(a.job_id, "failed", error="again")
    record = jobs.get(a.job_id)
    assert (record.state, record.error) == (JobState.FAILED,
                                            "Context overflow recovery failed: boom")
    assert session_events(raw) == [("compaction_end", a.job_id)]
    assert [f["job"] for _, f in raw.xrange("compactor:events")] == [a.job_id]
    event = JobEvent.model_validate_json(raw.xrange("compactor:session:{s1}:events")[0][1]["data"])
    assert (event.state, event.error, event.aborted, event.attempt) == (
        JobState.FAILED, "Context overflow recovery failed: boom", False, 1)


def test_finish_refuses_a_non_terminal_state(jobs: Any) -> None:
    a = jobs.enqueue("s1", "prune")
    with pytest.raises(InvalidRequestError):
        jobs.finish(a.job_id, "running")
    assert jobs.get(a.job_id).state is JobState.QUEUED


def test_leases(jobs: Any, raw: redis.Redis[str]) -> None:
    a = jobs.enqueue("s1", "prune")
    assert jobs.acquire_lease(a.job_id, "w1", 30) is LeaseOutcome.ACQUIRED
    assert jobs.acquire_lease(a.job_id, "w2", 30) is LeaseOutcome.HELD
    assert jobs.acquire_lease(a.job_id, "w1", 30) is LeaseOutcome.ACQUIRED  # re-entrant
    assert jobs.renew_lease(a.job_id, "w1", 60) and not jobs.renew_lease(a.job_id, "w2", 60)
    assert 30_000 < raw.pttl(jobs.layout.job(a.job_id).lease) <= 60_000
    assert not jobs.release_lease(a.job_id, "w2")
    assert jobs.release_lease(a.job_id, "w1")
    assert jobs.acquire_lease(a.job_id, "w2", 0.05) is LeaseOutcome.ACQUIRED
    time.sleep(0.15)  # an expired lease (dead worker) is free again
    assert jobs.acquire_lease(a.job_id, "w3", 30) is LeaseOutcome.ACQUIRED
    jobs.finish(a.job_id, "succeeded", result=PruneResult(tokens_saved=5).to_wire())
    assert jobs.acquire_lease(a.job_id, "w4", 30) is LeaseOutcome.FINISHED
    assert jobs.mark_running(a.job_id) is None


def test_unknown_jobs(jobs: Any) -> None:
    missing = "s1:0123456789abcdef"
    for call in (lambda: jobs.get(missing), lambda: jobs.request_cancel(missing),
                 lambda: jobs.acquire_lease(missing, "w", 1), lambda: jobs.mark_running(missing),
                 lambda: jobs.finish(missing, "failed", error="x")):
        with pytest.raises(JobNotFoundError):
            call()
    with pytest.raises(InvalidIdError):
        jobs.get("not-a-job-id")


def test_cancel_a_queued_job_ends_it_at_once(jobs: Any, raw: redis.Redis[str]) -> None:
    a = jobs.enqueue("s1", "prune")
    assert jobs.request_cancel(a.job_id) is JobState.CANCELLED
    assert jobs.get(a.job_id).state is JobState.CANCELLED
    assert session_events(raw) == [("cancelled", a.job_id)]
    assert jobs.enqueue("s1", "prune").outcome == "created"
    assert jobs.request_cancel(a.job_id) is JobState.CANCELLED  # idempotent, no second event
    assert len(session_events(raw)) == 1


def test_the_cancel_watch_reads_every_running_jobs_flag_in_one_round_trip(
        jobs: Any, raw: redis.Redis[str]) -> None:
    from worker.service._control import CancelWatch, JobControl

    a, b = jobs.enqueue("s1", "compact"), jobs.enqueue("s2", "compact")
    for job in (a, b):
        jobs.mark_running(job.job_id)
    assert jobs.cancel_requested_among([]) == set()
    watch = CancelWatch(jobs, poll_s=0.05)
    try:
        seen_a, seen_b = watch.watch(a.job_id), watch.watch(b.job_id)
        control = JobControl(jobs, b.job_id, "w1", deadline_s=60, lease_ttl_s=30, flags=watch)
        assert jobs.request_cancel(b.job_id) is JobState.RUNNING
        assert seen_b.wait(5) and not seen_a.is_set()
        assert control.is_cancelled()
        assert jobs.cancel_requested_among([a.job_id, b.job_id]) == {b.job_id}
        watch.forget(a.job_id)
        watch.forget(b.job_id)
        time.sleep(0.1)  # the last poll in flight
        before = raw.info("commandstats").get("cmdstat_hget", {}).get("calls", 0)
        time.sleep(0.3)  # nothing watched: the thread sleeps, Redis hears nothing
        assert raw.info("commandstats").get("cmdstat_hget", {}).get("calls", 0) == before
    finally:
        watch.close()


def test_the_cancel_watch_reads_a_poll_after_a_job_starts(jobs: Any,
                                                          raw: redis.Redis[str]) -> None:
    # The job's start read its flag with its record: a job shorter than poll_s costs no read.
    from helpers.waits import wait_until
    from worker.service._control import CancelWatch

    a = jobs.enqueue("s1", "compact")
    jobs.mark_running(a.job_id)

    def hgets() -> int:
        return int(raw.info("commandstats").get("cmdstat_hget", {}).get("calls", 0))

    watch = CancelWatch(jobs, poll_s=0.6)
    try:
        before = hgets()
        seen = watch.watch(a.job_id)
        time.sleep(0.2)  # a read at once would have come by now
        assert hgets() == before
        assert jobs.request_cancel(a.job_id) is JobState.RUNNING
        asked = hgets()  # the cancel's own script reads the state
        wait_until(seen.is_set, timeout=5, what="the first poll")
        assert hgets() == asked + 1
    finally:
        watch.close()


def test_cancel_a_running_job_asks_the_worker(jobs: Any, raw: redis.Redis[str]) -> None:
    a = jobs.enqueue("s1", "compact")
    jobs.mark_running(a.job_id)
    assert not jobs.is_cancel_requested(a.job_id)
    assert jobs.request_cancel(a.job_id) is JobState.RUNNING
    assert jobs.is_cancel_requested(a.job_id) and jobs.get(a.job_id).cancel_requested
    assert session_events(raw) == []
    jobs.finish(a.job_id, "cancelled", error="Compaction cancelled")
    event = JobEvent.model_validate_json(raw.xrange("compactor:session:{s1}:events")[0][1]["data"])
    assert (event.type, event.aborted, event.state) == (EventType.COMPACTION_END, True,
                                                        JobState.CANCELLED)


@pytest.mark.parametrize(
    ("kind", "state", "event"),
    [
        ("compact", "succeeded", "compaction_end"),
        ("compact", "failed", "compaction_end"),
        ("compact", "cancelled", "compaction_end"),
        ("prune", "succeeded", "prune_end"),
        ("prune", "failed", "failed"),
        ("prune", "cancelled", "cancelled"),
        ("branch_summary", "succeeded", "session_tree"),
        ("branch_summary", "failed", "failed"),
        ("branch_summary", "cancelled", "cancelled"),
    ],
)
def test_terminal_event_types(kind: str, state: str, event: str) -> None:
    assert terminal_event_type(JobKind(kind), JobState(state)) == EventType(event)


@pytest.mark.parametrize(
    ("reason", "message", "text"),
    [
        ("overflow", "429", "Context overflow recovery failed: 429"),
        ("threshold", "timeout", "Auto-compaction failed: timeout"),
        ("threshold", None, "Auto-compaction failed: compaction failed"),
        ("manual", "Nothing to compact (session too small)",
         "Nothing to compact (session too small)"),
    ],
)
def test_failure_messages_follow_the_reference(reason: str, message: str | None, text: str) -> None:
    assert failure_message(reason, message) == text


def test_record_fields_round_trip_through_redis(jobs: Any, raw: redis.Redis[str]) -> None:
    a = jobs.enqueue("s1", "branch_summary", target_id="t1", instructions="ünïcode")
    fields = raw.hgetall(jobs.layout.job(a.job_id).record)
    assert fields["targetId"] == "t1" and fields["instructions"] == "ünïcode"
    assert fields["kind"] == "branch_summary" and "reason" not in fields
    jobs.finish(a.job_id, "succeeded", entry=None, result_entry_id=None)
    assert json.loads(raw.xrange("compactor:events")[0][1]["data"])["type"] == "session_tree"
